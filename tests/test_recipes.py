"""Recipes as files: every reported checkpoint's chain resolves from the packaged base model,
every override validates, and a chain resumes at its first missing output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from easy_core.core.errors import ConfigError
from easy_core.learning.recipes import (
    RECIPES_DIR,
    checked_chain,
    load_recipe,
    recipe_chain,
    run_recipe,
)

REPORTED = ["sft-40", "sft-160", "grpo-cpu", "sft-280", "grpo-280", "grpo-x", "grpo-g", "grpo-r"]
REPORTED += ["sft-cards", "grpo-cards", "sft-levels", "sft-levels-met", "sft-levels-retry"]
REPORTED += ["sft-levels-retry-all-layers"]


@pytest.mark.parametrize("name", REPORTED)
def test_every_reported_checkpoint_has_a_recipe_that_starts_from_the_packaged_model(name):
    chain = checked_chain(name)  # validates every step's overrides against its params file
    assert chain[-1][0] == name and chain[-1][1].checkpoint == f"models/{name}"
    first_training = next(
        recipe for _, recipe in chain for step in recipe.steps if step.kind == "train-sft"
    )
    assert first_training.steps[-1].set["sft.base_model"] == "smollm2-135m"
    names = [n for n, _ in chain]
    assert len(names) == len(set(names))
    for position, (_, recipe) in enumerate(chain):  # what a recipe needs is built before it
        assert set(recipe.needs) <= set(names[:position])


def test_the_headline_chain_is_the_documented_one():
    assert [n for n, _ in recipe_chain("grpo-cards")] == [
        "teacher-data",
        "sft-40",
        "sft-160",
        "sft-280",
        "sft-cards",
        "trees",
        "grpo-cards",
    ]


def test_every_recipe_file_loads():
    for path in sorted(RECIPES_DIR.glob("*.yaml")):
        checked_chain(path.stem)


def write(folder: Path, name: str, text: str) -> None:
    (folder / f"{name}.yaml").write_text(text)


def test_unknown_recipe_cycle_and_bad_override_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="known recipes: grpo-280"):
        load_recipe("grpo-cardz")
    write(
        tmp_path,
        "a",
        "description: a\nparams: params.yaml\nneeds: [b]\nsteps: [{kind: train-sft, out: x}]\n",
    )
    write(
        tmp_path,
        "b",
        "description: b\nparams: params.yaml\nneeds: [a]\nsteps: [{kind: train-sft, out: y}]\n",
    )
    with pytest.raises(ConfigError, match="cycle: a -> b -> a"):
        recipe_chain("a", tmp_path)
    write(
        tmp_path,
        "c",
        "description: c\nparams: params.yaml\n"
        "steps: [{kind: train-sft, out: z, set: {sft.max_stepz: 3}}]\n",
    )
    with pytest.raises(ConfigError, match="max_stepz"):
        checked_chain("c", tmp_path)


def test_a_chain_runs_its_needs_first_and_resumes_at_the_first_missing_output(tmp_path):
    data, trees = tmp_path / "teacher", tmp_path / "trees"
    write(
        tmp_path,
        "data",
        "description: d\nparams: params.yaml\nsteps:\n"
        f"  - {{kind: sft-data, out: {data}, set: {{sft_data.n_tasks: 3, sft_data.real: []}}}}\n",
    )
    write(
        tmp_path,
        "grown",
        "description: g\nparams: params.yaml\nneeds: [data]\nsteps:\n"
        f"  - {{kind: tree-rollouts, out: {trees}, set: {{rollouts.tree_tasks: 2}}}}\n",
    )
    seen = []
    rows = run_recipe("grown", tmp_path, on_step=lambda r, s, skipped: seen.append((r, skipped)))
    assert seen == [("data", False), ("grown", False)]
    assert [row["ran"] for row in rows] == [True, True]
    assert json.loads((data / "summary.json").read_text()) == rows[0]["report"]
    assert (data / "train.jsonl").read_text().strip()
    assert len((trees / "trees.jsonl").read_text().splitlines()) == 2  # one tree a task
    first = (trees / "trees.jsonl").read_bytes()
    (trees / "summary.json").unlink()  # as if killed before the step finished
    again = run_recipe("grown", tmp_path)
    assert [row["ran"] for row in again] == [False, True]
    assert (trees / "trees.jsonl").read_bytes() == first  # the same bytes on a re-run
    forced = run_recipe("grown", tmp_path, force=True)
    assert [row["ran"] for row in forced] == [True, True]
