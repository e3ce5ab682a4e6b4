"""Recipes: how a reported orchestrator checkpoint is built, as files (`configs/recipes/NAME.yaml`).

A recipe names a params file, the recipes whose checkpoints it starts from (`needs`), and its
steps: `sft-data`, `tree-rollouts`, `train-sft` or `train-grpo`, each with `--set`-style
overrides of that params file and the folder it writes. `run_recipe` builds the whole chain from
the packaged base model: every needed recipe first (depth first, each once), and a step whose
output already exists is kept rather than redone (`force` redoes them), so an interrupted chain
resumes at the first missing output.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from easy_core.core.config import load_yaml_model
from easy_core.core.errors import ConfigError
from easy_core.core.params import Params, load_params
from easy_core.core.storage import write_json, write_jsonl

RECIPES_DIR = Path("configs/recipes")

StepKind = Literal["sft-data", "tree-rollouts", "train-sft", "train-grpo"]


class RecipeStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: StepKind
    out: str = Field(description="the folder the step writes: a data set or a checkpoint")
    set: dict[str, Any] = Field(
        default_factory=dict, description="overrides of the recipe's params file, as `--set`"
    )
    trees: str | None = Field(None, description="train-grpo: the tree rollouts JSONL it reads")


class Recipe(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str
    params: str = Field(description="the params file the steps' overrides apply to")
    needs: list[str] = Field(default_factory=list, description="recipes built before this one")
    steps: list[RecipeStep] = Field(min_length=1)

    @property
    def checkpoint(self) -> str:
        """What the recipe builds: its last step's output."""
        return self.steps[-1].out


def load_recipe(name: str, recipes_dir: str | Path = RECIPES_DIR) -> Recipe:
    path = Path(recipes_dir) / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in Path(recipes_dir).glob("*.yaml"))
        raise ConfigError(
            f"no recipe {name!r} in {recipes_dir}; known recipes: {', '.join(known) or 'none'}"
        )
    return load_yaml_model(path, Recipe)


def recipe_chain(name: str, recipes_dir: str | Path = RECIPES_DIR) -> list[tuple[str, Recipe]]:
    """The recipes `name` needs, each once, in build order, ending with `name` itself."""
    order: list[tuple[str, Recipe]] = []
    visiting: list[str] = []

    def visit(current: str) -> None:
        if any(done == current for done, _ in order):
            return
        if current in visiting:
            cycle = " -> ".join([*visiting, current])
            raise ConfigError(f"recipes need each other in a cycle: {cycle}; break the cycle")
        visiting.append(current)
        recipe = load_recipe(current, recipes_dir)
        for needed in recipe.needs:
            visit(needed)
        visiting.pop()
        order.append((current, recipe))

    visit(name)
    return order


def checked_chain(name: str, recipes_dir: str | Path = RECIPES_DIR) -> list[tuple[str, Recipe]]:
    """`recipe_chain` with every step's params validated: a typo in any override fails now,
    not hours into the chain."""
    chain = recipe_chain(name, recipes_dir)
    for _, recipe in chain:
        for step in recipe.steps:
            step_params(recipe, step)
    return chain


def step_params(recipe: Recipe, step: RecipeStep) -> Params:
    overrides = [f"{key}={_yaml(value)}" for key, value in step.set.items()]
    return load_params(recipe.params, overrides)


def _yaml(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)  # JSON is YAML


def run_step(recipe: Recipe, step: RecipeStep) -> dict[str, Any]:
    """Run one step; returns what its library function reports."""
    params = step_params(recipe, step)
    out = Path(step.out)
    if step.kind == "sft-data":
        from easy_core.learning.teacher_data import write_teacher_dataset

        return write_teacher_dataset(params, out)
    if step.kind == "tree-rollouts":
        from easy_core.learning.trees import generate_trees

        trees, summary = generate_trees(params)
        write_jsonl(out / "trees.jsonl", trees)
        write_json(out / "summary.json", summary)
        return summary
    if step.kind == "train-sft":
        from easy_core.learning.sft import train_sft

        return train_sft(params.sft, out)
    from easy_core.learning.grpo import read_trees, train_grpo

    trees = read_trees(step.trees) if step.trees is not None else None
    return train_grpo(params, out, trees=trees)


def step_done(step: RecipeStep) -> bool:
    """A step's output is complete: every writer here renames its last file into place."""
    out = Path(step.out)
    marker = {
        "sft-data": "summary.json",
        "tree-rollouts": "summary.json",
        "train-sft": "metrics.json",
        "train-grpo": "metrics.json",
    }[step.kind]
    return (out / marker).is_file()


def run_recipe(
    name: str,
    recipes_dir: str | Path = RECIPES_DIR,
    force: bool = False,
    on_step: Callable[[str, RecipeStep, bool], None] | None = None,
) -> list[dict[str, Any]]:
    """Build recipe `name` and everything it needs. `on_step(recipe, step, skipped)` is told
    of each step before it runs. Returns one row per step: recipe, kind, out, ran, report."""
    chain = checked_chain(name, recipes_dir)
    rows = []
    for recipe_name, recipe in chain:
        for step in recipe.steps:
            skipped = not force and step_done(step)
            if on_step is not None:
                on_step(recipe_name, step, skipped)
            report = {} if skipped else run_step(recipe, step)
            rows.append(
                {
                    "recipe": recipe_name,
                    "kind": step.kind,
                    "out": step.out,
                    "ran": not skipped,
                    "report": report,
                }
            )
    return rows
