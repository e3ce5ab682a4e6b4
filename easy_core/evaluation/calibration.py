"""How far the simulator can be trusted: a measured profile replayed by sim executors, against
the real executors on held-out tasks.

For every (executor, domain) the profile covers, the real executor solves the subtasks of `n`
test tasks (training tasks made the profile), and the simulator gives its success probability
for the same subtasks from the profile (at each subtask's difficulty). Reported per pair, with
the Pearson correlation and the mean absolute error over pairs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from pydantic import BaseModel

from easy_core.core.schemas import OutcomeRecord, Task
from easy_core.core.stats import mean
from easy_core.evaluation.profiling import measure_real_pool, subtask_checker
from easy_core.evaluation.recording import summarize_records
from easy_core.executors.pool import ExecutorPool
from easy_core.world.sim_world import SimWorld
from easy_core.world.suites import Suite


class CalibrationRow(BaseModel):
    executor: str
    domain: str
    n: int
    measured: float
    ci95: tuple[float, float]
    simulated: float
    profile_n: int


class CalibrationReport(BaseModel):
    pool: str
    suites: list[str]
    n_tasks: int
    rows: list[CalibrationRow]
    pearson: float | None
    mean_abs_error: float
    # over the pairs whose measured rate is strictly between 0 and 1: an executor that always
    # or never succeeds agrees with any simulator that says so, and makes r look perfect
    informative_pairs: int = 0
    pearson_informative: float | None = None
    mean_abs_error_informative: float | None = None


def pearson(xs: list[float], ys: list[float]) -> float | None:
    """Pearson r, or None with fewer than 3 pairs or a constant side."""
    if len(xs) < 3:
        return None
    try:
        return statistics.correlation(xs, ys)
    except statistics.StatisticsError:
        return None


def calibrate(
    pool: ExecutorPool,
    suites: list[tuple[str, Suite]],
    n_tasks: int,
    seed: int,
    world: SimWorld,
    on_sample: Callable[[], None] | None = None,
    records: list[OutcomeRecord] | None = None,
) -> CalibrationReport:
    """`records`: the test split's recorded outcomes (`easy record`), measured once and kept,
    instead of calling the executors again."""
    work: list[tuple[Task, Callable]] = []
    for name, suite in suites:
        check = subtask_checker(name, suite, "it cannot calibrate")
        work += [(t, check) for t in suite.tasks("test", n_tasks, seed)]
    if records is None:
        measured, _ = measure_real_pool(pool, work, seed, on_sample)
    else:
        measured, _ = summarize_records(records)
    profiles = {p.name: p for p in pool.profiles}
    rows = []
    for m in measured:
        profile = profiles[m.executor]
        subs = [s for t, _ in work for s in t.subtasks if s.skill == m.domain]
        prior = profile.capability.get(m.domain)
        rows.append(
            CalibrationRow(
                executor=m.executor,
                domain=m.domain,
                n=m.n,
                measured=m.success,
                ci95=m.ci95,
                simulated=mean([world.success_probability(profile, s) for s in subs]),
                profile_n=prior.n if prior else 0,
            )
        )
    xs, ys = [r.simulated for r in rows], [r.measured for r in rows]
    informative = [r for r in rows if 0 < r.measured < 1]
    ixs, iys = [r.simulated for r in informative], [r.measured for r in informative]
    return CalibrationReport(
        pool=pool.name,
        suites=[name for name, _ in suites],
        n_tasks=n_tasks,
        rows=rows,
        pearson=pearson(xs, ys),
        mean_abs_error=mean([abs(x - y) for x, y in zip(xs, ys, strict=True)]),
        informative_pairs=len(informative),
        pearson_informative=pearson(ixs, iys),
        mean_abs_error_informative=(
            mean([abs(x - y) for x, y in zip(ixs, iys, strict=True)]) if informative else None
        ),
    )


def calibration_markdown(report: CalibrationReport) -> str:
    lines = [
        "| executor | domain | n (test) | measured | 95% CI | simulated | profile n |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report.rows:
        lines.append(
            f"| {r.executor} | {r.domain} | {r.n} | {r.measured:.3f} | "
            f"{r.ci95[0]:.2f}-{r.ci95[1]:.2f} | {r.simulated:.3f} | {r.profile_n} |"
        )
    r_text = "n/a" if report.pearson is None else f"{report.pearson:.3f}"
    lines.append("")
    lines.append(
        f"Pearson r (simulated vs measured, {len(report.rows)} pairs): {r_text}; "
        f"mean absolute error {report.mean_abs_error:.3f}"
    )
    informative_r = report.pearson_informative
    mae = report.mean_abs_error_informative
    lines.append(
        f"Over the {report.informative_pairs} pairs with a measured rate strictly between 0 and "
        f"1: Pearson r {'n/a' if informative_r is None else f'{informative_r:.3f}'}"
        f" (needs 3 pairs); mean absolute error {'n/a' if mae is None else f'{mae:.3f}'}"
    )
    return "\n".join(lines) + "\n"
