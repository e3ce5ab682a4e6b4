"""Data and assets: `easy rollouts`, `traces`, `sft-data`, `tree-rollouts`, and `model-path`
(the GGUF of a packaged model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from easy_core.cli.app import (
    ParamsOption,
    app,
    comma_list,
    out,
    progress_bar,
    resolve_params,
    user_errors,
)


@app.command("rollouts")
@user_errors
def rollouts_command(
    out_dir: Annotated[Path, typer.Option("--out", help="dataset folder")] = Path("data/rollouts"),
    params_path: ParamsOption = None,
) -> None:
    """Generate the rollout dataset of params.rollouts in shards (resumable: a re-run after a
    crash or kill skips finished shards and gives the same bytes)."""
    from easy_core.learning.episode_rollouts import generate_rollouts

    params = resolve_params(params_path)
    with progress_bar() as progress:
        bar = progress.add_task("rollout shards", total=params.rollouts.shards)
        manifest = generate_rollouts(params, out_dir, on_shard=lambda _: progress.advance(bar))
    episodes = sum(s.records for s in manifest.shards)
    out.print(f"{episodes} episodes in {len(manifest.shards)} shards in {out_dir}")


@app.command("traces")
@user_errors
def traces_command(
    pool: Annotated[Path, typer.Option(help="pool YAML")] = Path("configs/pools/sim-default.yaml"),
    policies: Annotated[str, typer.Option(help="comma-separated policies to trace")] = (
        "random,greedy"
    ),
    n: Annotated[int, typer.Option(min=1, help="tasks per policy")] = 2000,
    split: Annotated[str, typer.Option(help="train, validation or test")] = "train",
    seed: Annotated[int, typer.Option()] = 0,
    out_file: Annotated[Path, typer.Option("--out", help="parquet file")] = Path(
        "data/traces/traces.parquet"
    ),
    params_path: ParamsOption = None,
) -> None:
    """Execution traces (one row per step and subtask: executor, tokens, latency, cost, outcome,
    DAG position, decision features) of policies on sim tasks, as parquet."""
    from easy_core.learning.traces import collect_traces, write_traces

    names = comma_list(policies)
    rows = collect_traces(resolve_params(params_path), pool, names, n, seed, split)
    write_traces(out_file, rows)
    out.print(f"{len(rows)} trace rows in {out_file}")


@app.command("sft-data")
@user_errors
def sft_data_command(
    out_dir: Annotated[Path, typer.Option("--out", help="folder for train.jsonl")] = Path(
        "data/sft"
    ),
    params_path: ParamsOption = None,
) -> None:
    """The teacher's turns as SFT examples (params.sft_data; of its correct trajectories unless
    sft_data.trajectories is all), as the pipeline's sft_data stage writes them:
    out/train.jsonl and out/summary.json."""
    from easy_core.learning.teacher_data import write_teacher_dataset

    params = resolve_params(params_path)
    with out.status("running the teacher"):
        summary = write_teacher_dataset(params, out_dir)
    print(json.dumps(summary, indent=2))


@app.command("tree-rollouts")
@user_errors
def tree_rollouts_command(
    out_dir: Annotated[Path, typer.Option("--out", help="folder for trees.jsonl")] = Path(
        "data/trees"
    ),
    params_path: ParamsOption = None,
) -> None:
    """Tree rollouts of params.rollouts (tree_k alternatives per decision to tree_depth), with
    values and advantages, and the token saving against independent rollouts."""
    from easy_core.core.storage import write_json, write_jsonl
    from easy_core.learning.trees import generate_trees

    trees, summary = generate_trees(resolve_params(params_path))
    write_jsonl(out_dir / "trees.jsonl", trees)
    write_json(out_dir / "summary.json", summary)
    print(json.dumps(summary, indent=2))


@app.command("model-path")
@user_errors
def model_path_command(
    name: Annotated[
        str,
        typer.Argument(help="smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b"),
    ],
) -> None:
    """The GGUF file of a packaged model (a model shipped in chunk packages is joined into the
    cache once, its sha256 checked); a missing package is named with its install command."""
    from easy_core.executors.hf_models import packaged_path

    folder, gguf = packaged_path(name)
    print(folder / gguf)
