"""The `easy` command. Every user error prints one clear message and exits 2, never a traceback."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn
from rich.table import Table

from easy_core.core.config import load_yaml_model
from easy_core.core.errors import EasyError
from easy_core.core.params import load_params
from easy_core.core.schemas import EvalMetrics, PoolConfig
from easy_core.evaluation.evaluate import EvalSpec, evaluate, evaluate_resumable, write_results
from easy_core.plans.validation import parse_plan, validate_plan

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


@app.command("eval")
@user_errors
def eval_command(
    policy: Annotated[str, typer.Option(help="strongest, cheapest, random, greedy, oracle")],
    pool: Annotated[Path, typer.Option(help="pool YAML, e.g. configs/pools/sim-default.yaml")],
    suite: Annotated[str | None, typer.Option(help="task suite [params: eval.suite]")] = None,
    n: Annotated[int | None, typer.Option(min=1, help="number of tasks [params: eval.n]")] = None,
    seed: Annotated[
        int | None, typer.Option(help="task and outcome seed [params: eval.seed]")
    ] = None,
    split: Annotated[str | None, typer.Option(help="train or test [params: eval.split]")] = None,
    sequential: Annotated[bool, typer.Option(help="run each plan one step at a time")] = False,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="write episodes.jsonl, metrics.json")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print metrics as JSON")] = False,
    params_path: ParamsOption = None,
) -> None:
    """Evaluate one policy on a suite and a pool."""
    params = resolve_params(params_path)
    defaults = params.eval
    spec = EvalSpec(
        suite or defaults.suite,
        policy,
        pool,
        n or defaults.n,
        defaults.seed if seed is None else seed,
        split or defaults.split,
        sequential,
    )
    with progress_bar() as progress:
        bar = progress.add_task(f"{policy} on {spec.suite}", total=spec.n)
        advance = lambda k: progress.advance(bar, k)  # noqa: E731
        if out_dir is not None:
            metrics, trajectories = evaluate_resumable(spec, params, out_dir, advance)
        else:
            metrics, trajectories = evaluate(spec, params, on_episode=advance)
    if out_dir is not None:
        write_results(out_dir, metrics, trajectories)
    if as_json:
        print(metrics.model_dump_json(indent=2))
    else:
        out.print(metrics_table([metrics], f"{spec.suite} / {metrics.pool}"))
        if out_dir is not None:
            out.print(f"wrote {out_dir}/episodes.jsonl and {out_dir}/metrics.json")


def pool_and_suites(pool: Path, suites: str, params: Any) -> tuple[Any, list[tuple[str, Any]]]:
    """The pool's executors and the named suites (comma-separated), for profiling runs."""
    from easy_core.executors.pool import load_pool
    from easy_core.world.suites import get_suite

    names = [name.strip() for name in suites.split(",") if name.strip()]
    chosen = [(name, get_suite(name, params)) for name in names]  # unknown names fail first
    return load_pool(pool, params), chosen


@app.command("solve")
@user_errors
def solve_command(
    question: Annotated[str | None, typer.Argument(help="the question or problem")] = None,
    suite: Annotated[str, typer.Option(help="math, research, code, embodied, sim")] = "math",
    pool: Annotated[Path, typer.Option(help="pool YAML")] = Path("configs/pools/cpu-real.yaml"),
    policy: Annotated[str, typer.Option(help="policy name")] = "greedy",
    index: Annotated[
        int | None, typer.Option(help="run the suite's test task N instead of a question")
    ] = None,
    seed: Annotated[int, typer.Option(help="task seed")] = 0,
    params_path: ParamsOption = None,
) -> None:
    """Solve one task with real executors and show the plan DAG, each step and the answer."""
    from easy_core.evaluation.solve import solve_task

    params = resolve_params(params_path)
    task, trajectory = solve_task(suite, pool, policy, params, question, index, seed)
    for milestone in trajectory.milestones:
        table = Table(title=f"milestone {milestone.index + 1}: {milestone.plan.milestone}")
        for column in ("step", "executor", "after", "status", "tok in", "tok out", "cost $", "s"):
            table.add_column(column)
        table.add_column("output", overflow="fold", max_width=60)
        for step, result in zip(milestone.plan.steps, milestone.results, strict=True):
            table.add_row(
                step.id,
                result.executor,
                ",".join(step.depends_on) or "-",
                result.status,
                str(result.tokens_in),
                str(result.tokens_out),
                f"{result.cost_usd:.6f}",
                f"{result.latency_s:.2f}",
                (result.output or result.error or "")[:300],
            )
        out.print(table)
    m = trajectory.metrics
    out.print(
        f"answer: {trajectory.final_answer!r}\nend: {trajectory.end_reason}; "
        f"cost ${m.cost_usd:.6f}, makespan {m.makespan_s:.1f} s, tokens {m.tokens}, "
        f"steps {m.n_steps}"
    )
    if task.answer:
        out.print(
            f"gold: {task.answer[:200]!r}; correct: {trajectory.correct}; {trajectory.scores}"
        )


@app.command("profile")
@user_errors
def profile_command(
    pool: Annotated[Path, typer.Option(help="pool YAML")],
    suites: Annotated[str, typer.Option(help="comma-separated suites, e.g. math,research")],
    n: Annotated[int, typer.Option(min=1, help="training tasks per suite")] = 5,
    seed: Annotated[int, typer.Option(help="task seed")] = 0,
    out_path: Annotated[
        Path | None,
        typer.Option("--out", help="profile file to write [default: the pool's `profile:`]"),
    ] = None,
    params_path: ParamsOption = None,
) -> None:
    """Measure every executor per domain and write the profile file the pool reads."""
    from easy_core.evaluation.profiling import measurements_markdown, profile_pool, write_profile
    from easy_core.plans.prompting import executor_cards

    params = resolve_params(params_path)
    executors, chosen = pool_and_suites(pool, suites, params)
    if out_path is None:
        if executors.config.profile is None:
            raise EasyError(f"{pool} names no `profile:` file; pass --out FILE")
        out_path = pool.parent / executors.config.profile
    with progress_bar() as progress:
        bar = progress.add_task(f"profiling {executors.name}", total=None)
        profile, measurements = profile_pool(
            executors, chosen, n, seed, lambda: progress.advance(bar)
        )
    write_profile(out_path, profile)
    out.print(measurements_markdown(measurements))
    out.print(executor_cards(profile.apply(executors.config).executors))
    out.print(f"wrote {out_path}")


@app.command("calibrate")
@user_errors
def calibrate_command(
    pool: Annotated[Path, typer.Option(help="pool YAML with a measured profile")],
    suites: Annotated[str, typer.Option(help="comma-separated suites, e.g. math,research")],
    n: Annotated[int, typer.Option(min=1, help="held-out tasks per suite")] = 5,
    seed: Annotated[int, typer.Option(help="task seed")] = 0,
    out_dir: Annotated[Path, typer.Option("--out", help="report folder")] = Path(
        "results/calibration"
    ),
    params_path: ParamsOption = None,
) -> None:
    """Simulated (the measured profile replayed) against measured success on held-out tasks."""
    from easy_core.core.storage import atomic_write_text, write_json
    from easy_core.evaluation.calibration import calibrate, calibration_markdown
    from easy_core.evaluation.plots import calibration_plot
    from easy_core.world.sim_world import SimWorld

    params = resolve_params(params_path)
    executors, chosen = pool_and_suites(pool, suites, params)
    with progress_bar() as progress:
        bar = progress.add_task(f"calibrating {executors.name}", total=None)
        report = calibrate(
            executors,
            chosen,
            n,
            seed,
            SimWorld(params.sim, params.capability),
            lambda: progress.advance(bar),
        )
    text = calibration_markdown(report)
    write_json(out_dir / "calibration.json", report)
    atomic_write_text(out_dir / "calibration.md", text)
    points = [(f"{r.executor}/{r.domain}", r.simulated, r.measured) for r in report.rows]
    calibration_plot(points, out_dir / "calibration.png", f"simulator calibration: {report.pool}")
    out.print(text)
    out.print(f"wrote {out_dir}/calibration.md, calibration.json, calibration.png")


@app.command("compare")
@user_errors
def compare_command(
    pool: Annotated[Path, typer.Option(help="pool YAML")],
    policies: Annotated[str, typer.Option(help="comma-separated policy names")] = (
        "strongest,cheapest,random,greedy"
    ),
    suite: Annotated[str, typer.Option(help="task suite")] = "sim",
    n: Annotated[int, typer.Option(min=1, help="held-out tasks")] = 500,
    seed: Annotated[int, typer.Option()] = 0,
    out_dir: Annotated[Path, typer.Option("--out", help="results folder")] = Path(
        "results/compare"
    ),
    params_path: ParamsOption = None,
) -> None:
    """Every policy on the same held-out tasks and seeds (the oracle added as the bound on sim):
    table, Pareto plots of success against cost and against makespan."""
    from easy_core.evaluation.policy_comparison import compare, targets_markdown, write_comparison

    names = [name.strip() for name in policies.split(",") if name.strip()]
    rows = compare(resolve_params(params_path), suite, pool, names, n, seed)
    try:
        plots = write_comparison(out_dir, rows, f"{suite} / {rows[0].pool}: {n} held-out tasks")
    except ImportError as exc:
        raise EasyError(f"plots need matplotlib: pip install -e '.[pipeline]' ({exc})") from None
    out.print(metrics_table(rows, f"{suite} / {rows[0].pool}"))
    print(targets_markdown(rows))
    out.print("wrote " + ", ".join(str(p) for p in [out_dir / "compare.md", *plots]))


@app.command("rollouts")
@user_errors
def rollouts_command(
    out_dir: Annotated[Path, typer.Option("--out", help="dataset folder")] = Path("data/rollouts"),
    params_path: ParamsOption = None,
) -> None:
    """Generate the rollout dataset of params.rollouts in shards (resumable: a re-run after a
    crash or kill skips finished shards and gives the same bytes)."""
    from easy_core.learning.rollouts import generate_rollouts

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
    split: Annotated[str, typer.Option(help="train or test")] = "train",
    seed: Annotated[int, typer.Option()] = 0,
    out_file: Annotated[Path, typer.Option("--out", help="parquet file")] = Path(
        "data/traces/traces.parquet"
    ),
    params_path: ParamsOption = None,
) -> None:
    """Execution traces (one row per step and subtask: executor, tokens, latency, cost, outcome,
    DAG position, decision features) of policies on sim tasks, as parquet."""
    from easy_core.learning.traces import collect_traces, write_traces

    names = [name.strip() for name in policies.split(",") if name.strip()]
    rows = collect_traces(resolve_params(params_path), pool, names, n, seed, split)
    write_traces(out_file, rows)
    out.print(f"{len(rows)} trace rows in {out_file}")


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


@app.command("sft-data")
@user_errors
def sft_data_command(
    out_dir: Annotated[Path, typer.Option("--out", help="folder for train.jsonl")] = Path(
        "data/sft"
    ),
    params_path: ParamsOption = None,
) -> None:
    """The teacher's successful turns as SFT examples (params.sft_data), as the pipeline's
    sft_data stage writes them: out/train.jsonl and out/summary.json."""
    from easy_core.learning.sft_data import write_teacher_dataset

    params = resolve_params(params_path)
    with out.status("running the teacher"):
        summary = write_teacher_dataset(params, out_dir)
    print(json.dumps(summary, indent=2))


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
    params_path: ParamsOption = None,
) -> None:
    """Eager release against the tail-risk (mean-CVaR) release scheduler at light and heavy
    load: P50 and P95 workflow flow time."""
    from easy_core.benchmarks.release_bench import release_benchmark, release_markdown

    rows = release_benchmark(resolve_params(params_path), pool, n_workflows=workflows, seed=seed)
    print(release_markdown(rows), end="")


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
    from easy_core.core.params import OrchestratorParams
    from easy_core.evaluation.plan_validity import valid_plan_rate

    params = resolve_params(params_path)
    overrides = {
        "model": model,
        "backend": backend,
        "endpoint": endpoint,
        "structured": structured,
        "schema_format": schema_format,
        "extra_body": json.loads(extra_body) if extra_body else None,
    }
    params.orchestrator = OrchestratorParams.model_validate(
        {
            **params.orchestrator.model_dump(),
            **{k: v for k, v in overrides.items() if v is not None},
        }
    )
    print(json.dumps(valid_plan_rate(params, str(pool), n, seed), indent=2))


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
    in mean reward of the last checkpoint against the first with its 95% interval."""
    from easy_core.core.errors import ConfigError
    from easy_core.core.storage import atomic_write_text, write_json
    from easy_core.evaluation.checkpoint_comparison import (
        compare_checkpoints,
        comparison_markdown,
        comparison_plot,
    )

    params = resolve_params(params_path)
    models = {}
    for item in model:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            raise ConfigError(f"--model {item!r}: write LABEL=CHECKPOINT, e.g. sft=models/sft")
        models[label] = path
    names = [b for b in baselines.split(",") if b]
    with progress_bar() as progress:
        bar = progress.add_task("episodes", total=n * len(pool) * (len(models) + len(names)))
        advance = lambda k: progress.advance(bar, k)  # noqa: E731
        runs = out / "runs" if out is not None else None
        results = [
            compare_checkpoints(params, p, models, names, n, seed, advance, runs) for p in pool
        ]
    text = "\n".join(comparison_markdown(r) for r in results)
    print(text, end="")
    if out is not None:
        write_json(out / "comparison.json", {"pools": results})
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


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
