"""Benchmarks: `easy bench ...`; the figures they print are recorded in docs/BENCHMARKS.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from easy_core.cli.app import (
    ParamsOption,
    bench_app,
    comma_list,
    metrics_table,
    out,
    progress_bar,
    resolve_params,
    user_errors,
)
from easy_core.core.errors import ConfigError


@bench_app.command("engine")
@user_errors
def bench_engine(
    as_json: Annotated[bool, typer.Option("--json", help="print the figures as JSON")] = False,
    runs: Annotated[int, typer.Option(min=1, help="wall-time DAG runs")] = 5,
    steps: Annotated[int, typer.Option(min=2, help="steps per DAG")] = 50,
    episodes: Annotated[int, typer.Option(min=1, help="episodes for the throughput figure")] = 3000,
    params_path: ParamsOption = None,
) -> None:
    """Engine overhead on wall-time DAGs, and sim throughput on one core."""
    from easy_core.benchmarks.engine_bench import engine_benchmark

    figures = engine_benchmark(
        resolve_params(params_path), runs=runs, steps=steps, episodes=episodes
    )
    if as_json:
        print(json.dumps(figures, indent=2))
        return
    table = Table(title="engine benchmark")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in figures.items():
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value))
    out.print(table)


@bench_app.command("replay")
@user_errors
def bench_replay(
    pool: Annotated[Path, typer.Option(help="the live pool YAML")],
    records: Annotated[Path, typer.Option(help="its recording (`easy record`)")],
    suite: Annotated[str, typer.Option(help="a recorded suite")] = "math",
    policies: Annotated[str, typer.Option(help="comma-separated policies")] = "strongest,cheapest",
    n: Annotated[int, typer.Option(min=1, help="recorded tasks of the split, run live too")] = 5,
    split: Annotated[str, typer.Option(help="the recorded split")] = "test",
    seed: Annotated[int, typer.Option()] = 0,
    live: Annotated[
        str,
        typer.Option(
            help="comma-separated executors that run live in the replay too, as a replay pool "
            "file's `live:` (textworld for the embodied games)"
        ),
    ] = "",
    params_path: ParamsOption = None,
) -> None:
    """Replay against live: per policy, the share of live steps replay reproduced, and success
    live and replayed, on the same tasks."""
    from easy_core.benchmarks.replay_bench import replay_benchmark, replay_markdown

    names = comma_list(policies)
    kept = comma_list(live)
    rows = replay_benchmark(
        resolve_params(params_path), pool, records, suite, names, n, split, seed, kept
    )
    print(replay_markdown(rows))


@bench_app.command("paired")
@user_errors
def bench_paired(
    reference: Annotated[Path, typer.Option(help="an episodes folder: DIR/episodes/POLICY")],
    other: Annotated[Path, typer.Option(help="another run's episodes folder, same tasks")],
    as_json: Annotated[bool, typer.Option("--json", help="print the figures as JSON")] = False,
) -> None:
    """Two finished runs of the same tasks (e.g. a live policy against the replayed baselines of
    its recording), task by task: success, reward and graded-score differences and the cost
    ratio, each with its 95% bootstrap interval."""
    from easy_core.evaluation.paired_runs import compare_paired_runs, paired_runs_markdown

    figures = compare_paired_runs(reference, other)
    print(json.dumps(figures, indent=2) if as_json else paired_runs_markdown(figures), end="")


@bench_app.command("frontier")
@user_errors
def bench_frontier(
    run: Annotated[
        list[str], typer.Option(help="SUITE=DIR, repeated: a folder `easy compare --out` wrote")
    ],
    score: Annotated[
        list[str] | None,
        typer.Option(help="SUITE=SCORE: judge that suite by a graded score (e.g. parts)"),
    ] = None,
    reference: Annotated[str, typer.Option(help="the policy costs are relative to")] = "strongest",
    target_cost: Annotated[
        float, typer.Option(min=0.0, help="the target's largest share of the reference's cost")
    ] = 0.35,
    out: Annotated[Path, typer.Option(help="write frontier.png, .md and .json here")] = Path(
        "results/frontier"
    ),
) -> None:
    """Every policy of finished runs over several suites, live and replayed: quality (success or
    a graded score) against cost relative to the reference on the same tasks, both with 95%
    intervals; one Pareto panel per suite with the target region shaded."""
    from easy_core.core.storage import atomic_write_text
    from easy_core.evaluation.suite_frontier import (
        frontier_json,
        frontier_markdown,
        frontier_plot,
        suite_frontier,
    )

    runs: dict[str, list[Path]] = {}
    for item in run:
        suite, folder = _pair("--run", item, "SUITE=DIR", "--run math=results/compare")
        runs.setdefault(suite, []).append(Path(folder))
    scores = dict(
        _pair("--score", item, "SUITE=SCORE", "--score math=parts") for item in score or []
    )
    points = suite_frontier(runs, reference, scores)
    markdown = frontier_markdown(points, reference, target_cost)
    atomic_write_text(out / "frontier.md", markdown)
    atomic_write_text(out / "frontier.json", json.dumps(frontier_json(points), indent=2) + "\n")
    frontier_plot(points, out / "frontier.png", reference, target_cost)
    print(markdown, end="")
    print(f"{out}/frontier.png, .md, .json")


def _pair(option: str, item: str, form: str, example: str) -> tuple[str, str]:
    """A repeated NAME=VALUE option's item split in two, or a ConfigError showing `form`."""
    name, sep, value = item.partition("=")
    if not sep or not name or not value:
        raise ConfigError(f"{option} {item!r}: write {form}, e.g. {example}")
    return name, value


@bench_app.command("level-table")
@user_errors
def bench_level_table(
    pool: Annotated[list[Path], typer.Option(help="pool YAML, repeated")],
    n: Annotated[int, typer.Option(min=1, help="sim tasks of the split per pool")] = 400,
    split: Annotated[
        str, typer.Option(help="validation: tune a table and report it in sample; test: --table")
    ] = "validation",
    table: Annotated[
        Path | None, typer.Option(help="a tuned table.json to evaluate as it is (no tuning)")
    ] = None,
    by_sink: Annotated[
        bool, typer.Option(help="one level per (skill, difficulty, sink of the DAG or not)")
    ] = False,
    seed: Annotated[int, typer.Option()] = 0,
    out: Annotated[Path | None, typer.Option(help="write table.json, report.json, .md")] = None,
    params_path: ParamsOption = None,
) -> None:
    """A level per (skill, difficulty), tuned on the validation split for mean reward over the
    pools, against greedy, strongest and the oracle: how much choosing levels per step can gain
    over greedy's one threshold. Evaluate a tuned table on test with --table."""
    from easy_core.benchmarks.level_table_bench import (
        evaluate_level_table,
        level_table_markdown,
        load_table,
        save_table,
        tune_level_table,
        tuning_trials,
    )
    from easy_core.core.storage import atomic_write_text, write_json

    params = resolve_params(params_path)
    if table is None and split != "validation":
        raise ConfigError(
            f"--split {split} without --table would tune the table on the tasks it reports: "
            "tune on validation (--out DIR), then pass --table DIR/table.json with --split test"
        )
    if table is not None:
        cells = load_table(table)
    else:
        with progress_bar() as progress:
            trials = tuning_trials(params, n, seed, by_sink=by_sink)
            bar = progress.add_task("tables tried", total=trials)
            advance = lambda k: progress.advance(bar, k)  # noqa: E731
            cells = tune_level_table(params, pool, n, seed, on_trial=advance, by_sink=by_sink)
    report = evaluate_level_table(params, pool, cells, split, n, seed)
    text = level_table_markdown(cells, report, tuned_here=table is None)
    print(text, end="")
    if out is not None:
        if table is None:
            save_table(cells, out / "table.json")
        write_json(out / "report.json", report)
        atomic_write_text(out / "report.md", text)


@bench_app.command("baselines")
@user_errors
def bench_baselines(
    pool: Annotated[Path, typer.Option(help="pool YAML")] = Path("configs/pools/sim-default.yaml"),
    n: Annotated[int, typer.Option(min=1, help="held-out tasks")] = 1000,
    seed: Annotated[int, typer.Option()] = 0,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="write all metrics as JSON")
    ] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="print a markdown table")] = False,
    params_path: ParamsOption = None,
) -> None:
    """Every baseline, parallel and sequential, on the same held-out sim tasks."""
    from easy_core.benchmarks.engine_bench import baseline_table
    from easy_core.core.storage import atomic_write_text
    from easy_core.evaluation.reports import metrics_markdown

    rows = baseline_table(resolve_params(params_path), pool, n=n, seed=seed)
    if markdown:
        print(metrics_markdown(rows), end="")
    else:
        out.print(metrics_table(rows, f"baselines on {n} held-out sim tasks ({pool})"))
    if out_file is not None:
        atomic_write_text(out_file, json.dumps([r.model_dump(mode="json") for r in rows], indent=2))


@bench_app.command("dispatch")
@user_errors
def bench_dispatch(
    pool: Annotated[Path, typer.Option(help="pool YAML")] = Path("configs/pools/sim-default.yaml"),
    steps: Annotated[int, typer.Option(min=2)] = 50,
    params_path: ParamsOption = None,
) -> None:
    """Per-DAG dispatch time of the `graph` dispatcher (one forward pass + the choice)."""
    from easy_core.benchmarks.engine_bench import dispatch_overhead

    print(json.dumps(dispatch_overhead(resolve_params(params_path), str(pool), steps), indent=2))


@bench_app.command("speculative")
@user_errors
def bench_speculative(
    pool: Annotated[Path, typer.Option(help="pool YAML")] = Path("configs/pools/sim-default.yaml"),
    n: Annotated[int, typer.Option(min=1)] = 500,
    seed: Annotated[int, typer.Option()] = 0,
    workers: Annotated[int, typer.Option(min=1, help="worker limit")] = 8,
    slow_rate: Annotated[float, typer.Option(min=0, max=1, help="share of slow calls")] = 0.1,
    params_path: ParamsOption = None,
) -> None:
    """Speculative re-execution of stragglers against eager dispatch: P95 makespan and cost."""
    from easy_core.benchmarks.speculative_bench import speculative_benchmark, speculative_markdown

    rows = speculative_benchmark(
        resolve_params(params_path),
        str(pool),
        n=n,
        seed=seed,
        worker_limit=workers,
        slow_rate=slow_rate,
    )
    print(speculative_markdown(rows), end="")


@bench_app.command("prefix")
@user_errors
def bench_prefix(
    pool: Annotated[Path, typer.Option(help="pool YAML")] = Path("configs/pools/sim-default.yaml"),
    seed: Annotated[int, typer.Option()] = 0,
    params_path: ParamsOption = None,
) -> None:
    """FIFO against prefix-aware ordering of concurrent workflows: cache hits, tokens, time."""
    from easy_core.benchmarks.prefix_bench import prefix_benchmark, prefix_markdown
    from easy_core.executors.pool import load_pool
    from easy_core.world.suites.sim import SimSuite

    params = resolve_params(params_path)
    loaded = load_pool(pool, params)
    tasks = list(SimSuite(params.sim).tasks("test", params.prefix.workflows, seed))
    rows = [prefix_benchmark(params, loaded, tasks, params.prefix, o) for o in ("fifo", "prefix")]
    print(prefix_markdown(rows), end="")


@bench_app.command("release")
@user_errors
def bench_release(
    pool: Annotated[Path, typer.Option(help="pool YAML")] = Path("configs/pools/sim-default.yaml"),
    workflows: Annotated[int, typer.Option(min=10, help="workflows (Poisson arrivals)")] = 2000,
    seed: Annotated[int, typer.Option()] = 0,
    split: Annotated[
        str, typer.Option(help="validation to choose release settings, test to report them")
    ] = "test",
    params_path: ParamsOption = None,
) -> None:
    """Eager release against the tail-risk (mean-CVaR) release scheduler at light and heavy
    load: P50 and P95 workflow flow time."""
    from easy_core.benchmarks.release_bench import release_benchmark, release_markdown

    params = resolve_params(params_path)
    rows = release_benchmark(params, pool, n_workflows=workflows, seed=seed, split=split)
    print(release_markdown(rows), end="")


@bench_app.command("serve")
@user_errors
def bench_serve(
    pool: Annotated[Path, typer.Option(help="pool YAML")] = Path("configs/pools/sim-default.yaml"),
    releases: Annotated[
        str, typer.Option(help="release rules to compare, comma-separated")
    ] = "eager,tail_risk,coact,prefix",
    light: Annotated[float, typer.Option(help="light load, requests per second")] = 2.0,
    heavy: Annotated[float, typer.Option(help="heavy load, requests per second")] = 30.0,
    n: Annotated[int, typer.Option(min=1, max=2000, help="requests per run")] = 200,
    time_scale: Annotated[
        float, typer.Option(help="sim.time_scale of the served sim pool (wall time)")
    ] = 0.05,
    model: Annotated[str, typer.Option(help="the policy requests ask for")] = "greedy",
    suite: Annotated[
        str, typer.Option(help="what requests ask: sim tasks, or math/research test questions")
    ] = "sim",
    seed: Annotated[int, typer.Option()] = 0,
    server_set: Annotated[
        list[str] | None,
        typer.Option(help="KEY=VALUE params override for the served process (repeatable)"),
    ] = None,
    server_logs: Annotated[
        str,
        typer.Option(
            help="llama.cpp server logs, comma-separated (.prefect-local/ladder-*/llama.log): "
            "each run's prefix-cache hit rate from their lines"
        ),
    ] = "",
    time_limit: Annotated[
        float, typer.Option(help="the most one run (one load, all its requests) may take, s")
    ] = 600.0,
    params_path: ParamsOption = None,
) -> None:
    """`easy serve` under Poisson load from the official openai client, one fresh server per
    release rule: throughput, P50/P95 latency, errors by kind, the front's own time, spend /
    budget, and on llama.cpp the prefix-cache hit rate from the servers' logs."""
    from easy_core.benchmarks.serve_bench import serve_benchmark, serve_markdown
    from easy_core.runtime.dispatcher import RULES

    names = comma_list(releases)
    unknown = sorted(set(names) - set(RULES))
    if unknown:
        raise ConfigError(f"unknown release rule {unknown[0]!r}; known: {', '.join(RULES)}")
    rows = serve_benchmark(
        pool,
        names,
        [("light", light), ("heavy", heavy)],
        n,
        time_scale,
        model,
        seed,
        params_path,
        suite,
        time_limit,
        server_set or (),
        [Path(p) for p in comma_list(server_logs)],
    )
    print(serve_markdown(rows), end="")


@bench_app.command("front")
@user_errors
def bench_front(
    pool: Annotated[Path, typer.Option(help="pool YAML (a sim pool)")] = Path(
        "configs/pools/sim-default.yaml"
    ),
    suite: Annotated[str, typer.Option(help="what requests ask")] = "math-compound",
    model: Annotated[str, typer.Option(help="the policy requests ask for")] = "greedy",
    n: Annotated[int, typer.Option(min=1, max=2000, help="requests")] = 40,
    params_path: ParamsOption = None,
) -> None:
    """The front's own time per request of `easy serve`, in process (ASGI, virtual time, one
    request at a time): the code's cost apart from the machine's load."""
    from easy_core.benchmarks.front_bench import front_benchmark

    figures = front_benchmark(pool, resolve_params(params_path), suite, model, n)
    print(json.dumps(figures.__dict__, indent=2))


@bench_app.command("plans")
@user_errors
def bench_plans(
    model: Annotated[str | None, typer.Option(help="override orchestrator.model")] = None,
    pool: Annotated[Path, typer.Option(help="pool YAML")] = Path("configs/pools/sim-default.yaml"),
    n: Annotated[int, typer.Option(min=1, help="held-out tasks")] = 10,
    seed: Annotated[int, typer.Option()] = 0,
    backend: Annotated[
        str | None, typer.Option(help="override orchestrator.backend: hf or openai")
    ] = None,
    endpoint: Annotated[str | None, typer.Option(help="override orchestrator.endpoint")] = None,
    structured: Annotated[
        bool | None,
        typer.Option(
            "--structured/--free",
            help="schema-constrained decoding (in process: llguidance; openai: the server) or free",
        ),
    ] = None,
    schema_format: Annotated[
        str | None, typer.Option(help="json_schema, or json_object (llama-cpp-python)")
    ] = None,
    extra_body: Annotated[
        str | None,
        typer.Option(help="openai: JSON of extra request fields, e.g. '{\"repeat_penalty\": 1.0}'"),
    ] = None,
    params_path: ParamsOption = None,
) -> None:
    """Valid-plan rate of the LLM orchestrator's first turn on held-out sim tasks."""
    from easy_core.evaluation.plan_validity import valid_plan_rate

    params = resolve_params(
        params_path,
        {
            "orchestrator.model": model,
            "orchestrator.backend": backend,
            "orchestrator.endpoint": endpoint,
            "orchestrator.structured": structured,
            "orchestrator.schema_format": schema_format,
            "orchestrator.extra_body": extra_body,  # JSON is YAML
        },
    )
    print(json.dumps(valid_plan_rate(params, str(pool), n, seed), indent=2))


@bench_app.command("name-reading")
@user_errors
def bench_name_reading(
    model: Annotated[str, typer.Option(help="orchestrator checkpoint folder")],
    pool: Annotated[Path, typer.Option(help="pool YAML")] = Path("configs/pools/sim-default.yaml"),
    n: Annotated[int, typer.Option(min=1, help="tasks")] = 20,
    split: Annotated[str, typer.Option(help="train, validation or test")] = "validation",
    seed: Annotated[int, typer.Option()] = 0,
    params_path: ParamsOption = None,
) -> None:
    """Does a checkpoint copy executor names from the cards? Its next-token mass on the pool's
    name beginnings at the first step's executor slot."""
    from easy_core.evaluation.name_reading import name_reading

    if split not in ("train", "validation", "test"):
        raise ConfigError(f"--split must be train, validation or test, not {split!r}")
    figures = name_reading(resolve_params(params_path), model, str(pool), n, seed, split)
    print(json.dumps(figures, indent=2))


@bench_app.command("orchestrators")
@user_errors
def bench_orchestrators(
    model: Annotated[
        list[str],
        typer.Option(help="LABEL=CHECKPOINT, repeated; the last is compared with the first"),
    ],
    pool: Annotated[list[Path], typer.Option(help="pool YAML, repeated")],
    n: Annotated[int, typer.Option(min=1, help="held-out sim tasks per pool")] = 40,
    seed: Annotated[int, typer.Option()] = 0,
    split: Annotated[
        str, typer.Option(help="validation to choose a checkpoint, test to report it")
    ] = "test",
    first_task: Annotated[
        int,
        typer.Option(
            min=0,
            help="play tasks FIRST_TASK.. of the split, e.g. past those an earlier choice saw "
            "(a multiple of eval.shard_size when --out keeps the runs)",
        ),
    ] = 0,
    baselines: Annotated[
        str, typer.Option(help="comma-separated baseline policies on the same tasks")
    ] = "greedy,strongest,cheapest,oracle",
    out: Annotated[
        Path | None,
        typer.Option(
            help="write comparison.json, .md, .png here, and each evaluation under OUT/runs "
            "(reused on the next run while its checkpoint and the params episodes read "
            "are unchanged)"
        ),
    ] = None,
    params_path: ParamsOption = None,
) -> None:
    """LLM orchestrator checkpoints (`easy` policy, e.g. SFT then GRPO) and baselines on the
    same held-out sim tasks: success, cost, makespan, mean reward, and the per-task difference
    in mean reward of the last checkpoint against the first and against each baseline, with
    its 95% interval; steps per executor, and (with the oracle baseline) the subtasks on which
    each policy picked the oracle's executor."""
    from easy_core.core.storage import atomic_write_text, write_json
    from easy_core.evaluation.checkpoint_comparison import (
        choice_markdown,
        choose_checkpoint,
        compare_checkpoints,
        comparison_markdown,
        comparison_plot,
    )

    params = resolve_params(params_path)
    models = dict(_pair("--model", item, "LABEL=CHECKPOINT", "sft=models/sft") for item in model)
    names = [b for b in baselines.split(",") if b]
    with progress_bar() as progress:
        bar = progress.add_task("episodes", total=n * len(pool) * (len(models) + len(names)))
        advance = lambda k: progress.advance(bar, k)  # noqa: E731
        runs = out / "runs" if out is not None else None
        results = [
            compare_checkpoints(params, p, models, names, n, seed, advance, runs, split, first_task)
            for p in pool
        ]
    text = "\n".join(comparison_markdown(r) for r in results)
    summary: dict = {"pools": results}
    if split == "validation":
        summary["choice"] = choose_checkpoint(results)
        text += "\n" + choice_markdown(summary["choice"])
    print(text, end="")
    if out is not None:
        write_json(out / "comparison.json", summary)
        atomic_write_text(out / "comparison.md", text)
        comparison_plot(results, out / "comparison.png")


@bench_app.command("grpo-signal")
@user_errors
def bench_grpo_signal(
    model: Annotated[
        Path | None, typer.Option(help="the warm start; default: grpo.base_model")
    ] = None,
    n: Annotated[int, typer.Option(min=1, help="root prompts (one group each)")] = 16,
    k: Annotated[int | None, typer.Option(min=2, help="override rollouts.tree_k")] = None,
    temperature: Annotated[
        float | None, typer.Option(min=0.01, help="override grpo.temperature")
    ] = None,
    continuation: Annotated[
        str | None, typer.Option(help="override grpo.continuation (a policy name)")
    ] = None,
    trees_file: Annotated[
        Path | None, typer.Option("--trees", help="tree rollouts JSONL; default: grow them here")
    ] = None,
    params_path: ParamsOption = None,
) -> None:
    """The groups a GRPO step would sample from the warm start (group size, temperature,
    schemas and reward of params.yaml): how many differ in correctness, i.e. carry signal,
    and what greedy's first plan is worth on the same prompts. Run it before a long GRPO run."""
    from easy_core.learning.group_signal import group_signal
    from easy_core.learning.grpo import read_trees

    params = resolve_params(
        params_path,
        {
            "rollouts.tree_k": k,
            "grpo.temperature": temperature,
            "grpo.continuation": continuation,
        },
    )
    trees = read_trees(trees_file) if trees_file is not None else None
    with progress_bar() as progress:
        bar = progress.add_task("groups", total=n)
        result = group_signal(
            params, model or params.grpo.base_model, n, trees, lambda k: progress.advance(bar, k)
        )
    print(json.dumps(result, indent=2))


@bench_app.command("tree-grpo")
@user_errors
def bench_tree_grpo(
    tasks: Annotated[int, typer.Option(min=1, help="tasks for the tokens-per-leaf figure")] = 4,
    steps: Annotated[int, typer.Option(min=1, help="training steps of each run")] = 3,
    k: Annotated[int | None, typer.Option(min=2, help="override rollouts.tree_k")] = None,
    depth: Annotated[int, typer.Option(min=2, help="grpo.tree_depth of the tree run")] = 2,
    skip_training: Annotated[
        bool, typer.Option("--skip-training", help="the token figure only")
    ] = False,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="write the figures as JSON")
    ] = None,
    params_path: ParamsOption = None,
) -> None:
    """On-policy Tree-GRPO (params.grpo with rollout on_policy): tokens per leaf of the model's
    own trees against independent episodes, and leaves, samples and reward per CPU-hour of
    Tree-GRPO against root-only GRPO, from grpo.base_model."""
    from easy_core.benchmarks.tree_grpo_bench import (
        cpu_hour_figures,
        markdown,
        tree_token_figures,
    )
    from easy_core.core.storage import atomic_write_text

    params = resolve_params(
        params_path,
        {
            "grpo.rollout": "on_policy",
            "grpo.reward_worlds": 1,
            "grpo.continuation": "self",
            "rollouts.tree_k": k,
            "grpo.tree_depth": depth,
        },
    )
    tokens = tree_token_figures(params, tasks)
    runs = {} if skip_training else cpu_hour_figures(params, steps)
    if out_file is not None:
        atomic_write_text(out_file, json.dumps({"tokens": tokens, "runs": runs}, indent=2))
    print(markdown(tokens, runs))
