"""Plans: `easy plan validate`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from easy_core.cli.app import ParamsOption, out, plan_app, resolve_params, user_errors
from easy_core.core.config import load_yaml_model
from easy_core.core.errors import EasyError
from easy_core.core.schemas import PoolConfig
from easy_core.plans.validation import parse_plan, validate_plan


@plan_app.command("validate")
@user_errors
def plan_validate(
    file: Annotated[Path, typer.Argument(help="a JSON plan (one orchestrator turn)")],
    pool: Annotated[
        Path | None, typer.Option(help="pool YAML whose executors the plan may use")
    ] = None,
    params_path: ParamsOption = None,
) -> None:
    """Print `valid`, or the problem and exit 2."""
    params = resolve_params(params_path)
    executors = None
    if pool is not None:
        executors = [p.name for p in load_yaml_model(pool, PoolConfig).executors]
    try:
        text = file.read_bytes()
    except OSError as exc:
        raise EasyError(f"{file}: cannot read: {exc.strerror}") from None
    plan = parse_plan(text)
    validate_plan(plan, executors, max_steps=params.limits.max_steps_per_plan)
    out.print("valid")
