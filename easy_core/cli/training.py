"""Training: `easy train-policy` (progress and graph), `train-sft` and `train-grpo` (the LLM
orchestrator), and `easy recipe` (a reported checkpoint rebuilt from its recipe files).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from easy_core.cli.app import ParamsOption, app, out, resolve_params, user_errors
from easy_core.core.errors import EasyError


@app.command("train-policy")
@user_errors
def train_policy_command(
    which: Annotated[str, typer.Argument(help="progress, graph or all")] = "all",
    traces_file: Annotated[Path, typer.Option("--traces", help="parquet traces")] = Path(
        "data/traces/traces.parquet"
    ),
    reuse_traces: Annotated[
        bool, typer.Option(help="train on --traces if it exists instead of collecting anew")
    ] = False,
    params_path: ParamsOption = None,
) -> None:
    """Collect traces (params.policy_training) and fit the learned policies; the models go where
    params.policies says (progress_model, graph_model)."""
    from easy_core.learning.policy_training import LEARNED_POLICIES, train_policies

    chosen = LEARNED_POLICIES if which == "all" else (which,)
    if any(name not in LEARNED_POLICIES for name in chosen):
        raise EasyError(f"unknown learned policy {which!r}; choose progress, graph or all")
    params = resolve_params(params_path)
    with out.status("collecting traces and training"):
        report = train_policies(params, chosen, traces_file, reuse_traces=reuse_traces)
    print(json.dumps(report, indent=2))


@app.command("train-sft")
@user_errors
def train_sft_command(
    out_dir: Annotated[Path | None, typer.Option("--out", help="checkpoint folder")] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="override sft.max_steps")] = None,
    params_path: ParamsOption = None,
) -> None:
    """SFT warm start of the LLM orchestrator with TRL on the teacher turns (params.sft); writes
    the checkpoint (weights, tokenizer, model card) and its training curve."""
    from easy_core.learning.sft import train_sft

    sft = resolve_params(params_path, {"sft.max_steps": steps}).sft
    metrics = train_sft(sft, out_dir or sft.out)
    print(json.dumps(metrics, indent=2))


@app.command("train-grpo")
@user_errors
def train_grpo_command(
    out_dir: Annotated[Path | None, typer.Option("--out", help="checkpoint folder")] = None,
    trees_file: Annotated[
        Path | None, typer.Option("--trees", help="tree rollouts JSONL; default: grow them here")
    ] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="override grpo.max_steps")] = None,
    params_path: ParamsOption = None,
) -> None:
    """GRPO with TRL on the decision states of tree rollouts (params.grpo; the group size is
    rollouts.tree_k), rewarded by the simulator; from the SFT checkpoint by default."""
    from easy_core.learning.grpo import read_trees, train_grpo

    params = resolve_params(params_path, {"grpo.max_steps": steps})
    trees = read_trees(trees_file) if trees_file is not None else None
    metrics = train_grpo(params, out_dir or params.grpo.out, trees=trees)
    print(json.dumps(metrics, indent=2))


@app.command("recipe")
@user_errors
def recipe_command(
    name: Annotated[str, typer.Argument(help="a recipe in configs/recipes, e.g. grpo-cards")],
    force: Annotated[bool, typer.Option(help="redo steps whose output already exists")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="print the chain of steps and stop")
    ] = False,
    recipes_dir: Annotated[Path, typer.Option(help="folder of recipe files")] = Path(
        "configs/recipes"
    ),
) -> None:
    """Rebuild a checkpoint of docs/BENCHMARKS.md from its recipe: every recipe it needs first,
    from the packaged base model; steps whose output exists are kept (resume)."""
    from easy_core.learning.recipes import RecipeStep, checked_chain, run_recipe, step_done

    if dry_run:
        for recipe_name, recipe in checked_chain(name, recipes_dir):
            for step in recipe.steps:
                state = "done" if step_done(step) and not force else "to run"
                print(f"{recipe_name}: {step.kind} -> {step.out} ({state})")
        return

    def announce(recipe_name: str, step: RecipeStep, skipped: bool) -> None:
        verb = "keeping" if skipped else "running"
        out.print(f"{recipe_name}: {verb} {step.kind} -> {step.out}")

    rows = run_recipe(name, recipes_dir, force=force, on_step=announce)
    print(json.dumps(rows, indent=2, default=str))
