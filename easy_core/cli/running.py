"""Running and evaluating: `easy eval`, `solve`, `profile`, `record`, `calibrate`, `compare`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from easy_core.cli.app import (
    ParamsOption,
    app,
    comma_list,
    metrics_table,
    out,
    progress_bar,
    resolve_params,
    user_errors,
)
from easy_core.core.errors import ConfigError, EasyError
from easy_core.evaluation.evaluator import EvalSpec, evaluate, evaluate_resumable, write_results


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
    split: Annotated[
        str | None, typer.Option(help="train, validation or test [params: eval.split]")
    ] = None,
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

    names = comma_list(suites)
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
    records: Annotated[
        Path | None,
        typer.Option(
            help="measure from this recording's train split (`easy record`) instead of calling "
            "the executors"
        ),
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
    if records is not None:
        from easy_core.evaluation.recording import profile_from_records, read_split

        rows = read_split(records, [name for name, _ in chosen], "train")
        profile, measurements = profile_from_records(executors, rows, seed)
    else:
        with progress_bar() as progress:
            bar = progress.add_task(f"profiling {executors.name}", total=None)
            profile, measurements = profile_pool(
                executors, chosen, n, seed, lambda: progress.advance(bar)
            )
    write_profile(out_path, profile)
    out.print(measurements_markdown(measurements))
    out.print(executor_cards(profile.apply(executors.config).executors))
    out.print(f"wrote {out_path}")


@app.command("record")
@user_errors
def record_command(
    pool: Annotated[Path, typer.Option(help="pool YAML whose executors are recorded")],
    suite: Annotated[str, typer.Option(help="math, research, code or embodied")],
    split: Annotated[str, typer.Option(help="train (for the profile), validation or test")],
    n: Annotated[int, typer.Option(min=1, help="tasks of the split, from its first")],
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="recording folder [default: data/records/POOL]")
    ] = None,
    seed: Annotated[int, typer.Option(help="task seed")] = 0,
    at_once: Annotated[
        int,
        typer.Option(
            "--executors-at-once",
            min=1,
            help="executors called at the same time (2 on 2 cores with one-thread servers)",
        ),
    ] = 1,
    inputs: Annotated[
        str,
        typer.Option(
            help="what a prerequisite delivers: recorded (a right recorded output, as a live "
            "episode hands it on) or gold (its bare gold answer, RouterBench's rule)"
        ),
    ] = "recorded",
    params_path: ParamsOption = None,
) -> None:
    """Run every executor on every subtask of a split, alone with right inputs; one row per
    (task, subtask, executor). Resumable: finished shards are kept."""
    from easy_core.evaluation.recording import SHARD_TASKS, record
    from easy_core.world.suites.splits import checked_split

    if inputs not in ("recorded", "gold"):
        raise ConfigError(f"--inputs {inputs!r}: use recorded or gold")
    params = resolve_params(params_path)
    executors, chosen = pool_and_suites(pool, suite, params)
    checked_split(suite, split)
    out_dir = out_dir or Path("data/records") / executors.name
    with progress_bar() as progress:
        bar = progress.add_task(f"recording {executors.name} on {suite}/{split}", total=None)
        directory, written = record(
            executors,
            chosen[0][1],
            split,
            n,
            out_dir,
            seed,
            lambda: progress.advance(bar),
            at_once,
            inputs,  # type: ignore[arg-type]  # checked above
        )
    shards = -(-n // SHARD_TASKS)
    out.print(f"{directory}: {written} shards written, {shards - written} already recorded")


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
    records: Annotated[
        Path | None,
        typer.Option(help="measured: this recording's test split (`easy record`), not new calls"),
    ] = None,
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
        rows = None
        if records is not None:  # the recorded tasks: the split's first ones
            from easy_core.evaluation.recording import read_split

            rows = read_split(records, [name for name, _ in chosen], "test")
            n = len({r.task_id for r in rows})
        report = calibrate(
            executors,
            chosen,
            n,
            seed,
            SimWorld(params.sim, params.capability),
            lambda: progress.advance(bar),
            records=rows,
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
    split: Annotated[
        str, typer.Option(help="validation to choose settings on, test to report them")
    ] = "test",
    out_dir: Annotated[Path, typer.Option("--out", help="results folder")] = Path(
        "results/compare"
    ),
    params_path: ParamsOption = None,
) -> None:
    """Every policy on the same held-out tasks and seeds (the oracle added as the bound on sim):
    table, Pareto plots of success against cost and against makespan; each policy's episodes
    in OUT/episodes/POLICY (run again, finished shards are reused)."""
    from easy_core.evaluation.policy_comparison import compare, targets_markdown, write_comparison

    names = comma_list(policies)
    params = resolve_params(params_path)
    rows = compare(params, suite, pool, names, n, seed, split, out_dir / "episodes")
    try:
        plots = write_comparison(out_dir, rows, f"{suite} / {rows[0].pool}: {n} held-out tasks")
    except ImportError as exc:
        raise EasyError(f"plots need matplotlib: pip install -e '.[pipeline]' ({exc})") from None
    out.print(metrics_table(rows, f"{suite} / {rows[0].pool}"))
    print(targets_markdown(rows))
    out.print("wrote " + ", ".join(str(p) for p in [out_dir / "compare.md", *plots]))
