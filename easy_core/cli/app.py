"""The `easy` application: the Typer apps, the one override mechanism (`--set`), user errors
as one message and exit code 2 (never a traceback), tables and progress bars. The commands
live in one module per group (running, data, training, plans, bench); `easy_core.cli` imports
them all and runs `main`.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn
from rich.table import Table

from easy_core.core.errors import EasyError
from easy_core.core.params import load_params
from easy_core.core.schemas import EvalMetrics

app = typer.Typer(
    help="easy: an efficient orchestrator for heterogeneous LLM and tool pools.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


plan_app = typer.Typer(help="Work with orchestrator plans.", no_args_is_help=True)


bench_app = typer.Typer(
    help="Benchmarks; figures are recorded in docs/BENCHMARKS.md.", no_args_is_help=True
)


app.add_typer(plan_app, name="plan")


app.add_typer(bench_app, name="bench")


# Piped output (CI logs, files) gets a wide table instead of rich's 80-column default.
out = Console(width=None if sys.stdout.isatty() else 140)


err = Console(stderr=True)


F = TypeVar("F", bound=Callable[..., Any])


DEFAULT_PARAMS = Path("params.yaml")


ParamsOption = Annotated[
    Path | None,
    typer.Option("--params", help="params.yaml to read; defaults to ./params.yaml if present."),
]


def user_errors(func: F) -> F:
    """Turn an EasyError into its message on stderr and exit code 2."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except EasyError as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


_overrides: list[str] = []


@app.callback()
def global_options(
    assignments: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="SECTION.FIELD=VALUE",
            help="override one field of the params file for this command (repeatable; the value "
            "is read as YAML), e.g. easy --set sft.max_steps=40 train-sft",
        ),
    ] = None,
) -> None:
    """easy: an efficient orchestrator for heterogeneous LLM and tool pools."""
    _overrides[:] = assignments or []


def comma_list(text: str) -> list[str]:
    """A comma-separated option's names, stripped, empty ones dropped."""
    return [name.strip() for name in text.split(",") if name.strip()]


def resolve_params(path: Path | None, shorthands: dict[str, Any] | None = None):
    """The params file with the --set overrides, then a command's own options for single
    fields (`shorthands`: dotted field -> value, None where the option was not given)."""
    if path is None:
        path = DEFAULT_PARAMS if DEFAULT_PARAMS.is_file() else None
    given = [f"{key}={value}" for key, value in (shorthands or {}).items() if value is not None]
    return load_params(path, [*_overrides, *given])


def metrics_table(rows: list[EvalMetrics], title: str = "results") -> Table:
    table = Table(title=title)
    for column in (
        "policy",
        "mode",
        "n",
        "success",
        "95% CI",
        "cost $",
        "makespan s",
        "tokens",
        "reward",
    ):
        table.add_column(column, justify="left" if column in ("policy", "mode") else "right")
    for m in rows:
        table.add_row(
            m.policy,
            "sequential" if m.sequential else "parallel",
            str(m.n),
            f"{m.success_rate:.3f}",
            f"{m.success_ci95[0]:.3f}-{m.success_ci95[1]:.3f}",
            f"{m.mean_cost_usd:.5f}",
            f"{m.mean_makespan_s:.2f}",
            f"{m.mean_tokens:.0f}",
            f"{m.mean_reward:.3f}",
        )
    return table


def progress_bar() -> Progress:
    return Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )
