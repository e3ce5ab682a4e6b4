"""The `progress` policy: progress-guided step-wise routing under budgets.

At each milestone it reads the multi-view progress of the episode (`easy_core.progress`), predicts
for every (subtask, executor) candidate the probability that the step succeeds given correct
inputs, the progress it would add, and routes by `budgeted.choose`: the most predicted progress
per cost that fits the remaining budgets. Doubted results are retried on another executor only
when the predicted gain in log success pays for the retry and for re-running what depends on it.

The predictor has two paths mixed by a learned gate, all trained offline from execution traces
(`easy_core.traces`):
- a small MLP over the candidate features (`policies.features.FEATURES`);
- a nearest-neighbour estimate: the mean outcome of the k most similar past candidates;
- the gate, a logistic function of how far the neighbours are and how much the two paths disagree,
  fitted on held-out tasks, gives the MLP's weight: near dense past data, trust the neighbours;
  far from it, the MLP's smoother guess.
Inference is plain numpy (a forward pass of a few small matrices); torch is used to fit.

One concept in one module: the progress policy's predictor, its training and its decisions
share the same features and must change together.
"""

from __future__ import annotations

import io
import math
import os
import tempfile
import zlib
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from easy_core.core.errors import ConfigError
from easy_core.core.params import Params, PolicyTrainingParams
from easy_core.core.schemas import ExecutorProfile, Subtask
from easy_core.policies.baselines import SubtaskPolicy, downstream, estimates, latest_results
from easy_core.policies.budgeted import Candidate, choose
from easy_core.policies.features import FEATURES, candidate_features, histories
from easy_core.policies.progress_view import (
    ProgressView,
    posterior_correct,
    prior_success,
    progress_view,
)
from easy_core.runtime.policy import EpisodeState


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -30, 30)))


class GainPredictor:
    """P(step succeeds on its subtask | correct inputs) for rows of candidate features."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays
        self.mean, self.std = arrays["mean"], arrays["std"]
        n_layers = int(arrays["n_layers"])
        self.layers = [(arrays[f"w{i}"], arrays[f"b{i}"]) for i in range(n_layers)]
        self.ref_x, self.ref_y = arrays["ref_x"], arrays["ref_y"]
        self.ref_sq = (self.ref_x**2).sum(axis=1)
        self.k = int(arrays["k"])
        self.prior = float(self.ref_y.mean())
        self.gate = arrays["gate"]

    def standardize(self, x: np.ndarray) -> np.ndarray:
        return (x - self.mean) / self.std

    def mlp(self, z: np.ndarray) -> np.ndarray:
        h = z
        for w, b in self.layers[:-1]:
            h = np.maximum(h @ w + b, 0.0)
        w, b = self.layers[-1]
        return _sigmoid(h @ w + b).ravel()

    def knn(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Mean outcome of the k nearest references (smoothed toward the prior by one pseudo
        count) and their mean distance."""
        d2 = (z**2).sum(axis=1)[:, None] + self.ref_sq[None, :] - 2.0 * z @ self.ref_x.T
        k = min(self.k, len(self.ref_y))
        nearest = np.argpartition(d2, k - 1, axis=1)[:, :k]
        labels = self.ref_y[nearest]
        estimate = (labels.sum(axis=1) + self.prior) / (k + 1)
        distance = np.sqrt(np.maximum(np.take_along_axis(d2, nearest, axis=1), 0.0)).mean(axis=1)
        return estimate, distance

    def paths(self, x: np.ndarray) -> dict[str, np.ndarray]:
        z = self.standardize(np.asarray(x, dtype=np.float64))
        mlp = self.mlp(z)
        knn, distance = self.knn(z)
        g = _sigmoid(self.gate[0] + self.gate[1] * distance + self.gate[2] * np.abs(mlp - knn))
        return {"mlp": mlp, "knn": knn, "gate": g, "mixed": g * mlp + (1.0 - g) * knn}

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.paths(x)["mixed"]

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.savez(buffer, **self.arrays)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as handle:
            handle.write(buffer.getvalue())
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> GainPredictor:
        return _load_predictor(str(Path(path).resolve()), _mtime(path))


def _mtime(path: str | Path) -> float:
    try:
        return os.path.getmtime(path)
    except OSError:
        raise ConfigError(
            f"progress model {path} not found; train it with `easy train-policy progress` "
            "(or `dvc repro policies`)"
        ) from None


@lru_cache(maxsize=8)
def _load_predictor(path: str, mtime: float) -> GainPredictor:
    with np.load(path) as data:
        return GainPredictor({name: data[name] for name in data.files})


# ------------------------------------------------------------------------------- training


def training_arrays(rows: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features, outcomes and task ids of the rows a success predictor learns from: executed
    steps on a known subtask whose inputs were correct."""
    keep = [
        r
        for r in rows
        if r["subtask"]
        and r["status"] != "skipped"
        and r["inputs_correct"]
        and not math.isnan(r["claimed"])
    ]
    if not keep:
        raise ConfigError("no usable trace rows (executed steps with correct inputs)")
    x = np.array([[r[f] for f in FEATURES] for r in keep], dtype=np.float64)
    y = np.array([float(r["correct"]) for r in keep])
    return x, y, [r["task_id"] for r in keep]


def holdout_mask(task_ids: Sequence[str], share: float) -> np.ndarray:
    """Held-out rows by task (a stable hash of the id), so no task is on both sides."""
    return np.array([zlib.crc32(t.encode()) % 1000 < share * 1000 for t in task_ids])


def fit_mlp(z: np.ndarray, y: np.ndarray, tp: PolicyTrainingParams) -> list[np.ndarray]:
    import torch

    torch.manual_seed(tp.seed)
    model = torch.nn.Sequential(
        torch.nn.Linear(z.shape[1], tp.hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(tp.hidden, tp.hidden),
        torch.nn.ReLU(),
        torch.nn.Linear(tp.hidden, 1),
    )
    optimiser = torch.optim.Adam(model.parameters(), lr=tp.learning_rate)
    xt = torch.tensor(z, dtype=torch.float32)
    yt = torch.tensor(y, dtype=torch.float32)
    generator = torch.Generator().manual_seed(tp.seed)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for _ in range(tp.epochs):
        order = torch.randperm(len(yt), generator=generator)
        for start in range(0, len(yt), 512):
            batch = order[start : start + 512]
            optimiser.zero_grad()
            loss = loss_fn(model(xt[batch]).squeeze(1), yt[batch])
            loss.backward()
            optimiser.step()
    linears = [m for m in model if isinstance(m, torch.nn.Linear)]
    out = []
    for layer in linears:
        out += [
            layer.weight.detach().double().numpy().T.copy(),
            layer.bias.detach().double().numpy(),
        ]
    return out


def fit_gate(mlp: np.ndarray, knn: np.ndarray, distance: np.ndarray, y: np.ndarray) -> np.ndarray:
    import torch

    m, k, d, yt = (torch.tensor(a, dtype=torch.float64) for a in (mlp, knn, distance, y))
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    optimiser = torch.optim.Adam([w], lr=0.05)
    for _ in range(400):
        optimiser.zero_grad()
        g = torch.sigmoid(w[0] + w[1] * d + w[2] * (m - k).abs())
        p = (g * m + (1 - g) * k).clamp(1e-6, 1 - 1e-6)
        loss = -(yt * p.log() + (1 - yt) * (1 - p).log()).mean()
        loss.backward()
        optimiser.step()
    return w.detach().numpy().copy()


def log_loss(p: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(p, 1e-6, 1 - 1e-6)
    return float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())


def train_progress_predictor(
    rows: Sequence[dict[str, Any]], tp: PolicyTrainingParams
) -> tuple[GainPredictor, dict[str, float]]:
    """Fit the MLP and the neighbour set on most tasks, the gate on the held-out rest; return
    the predictor and held-out log loss of each path and of the profiles' own claim."""
    x, y, task_ids = training_arrays(rows)
    held = holdout_mask(task_ids, tp.holdout)
    if held.all() or not held.any():
        raise ConfigError("too few tasks in the traces to hold some out for the gate")
    mean = x[~held].mean(axis=0)
    std = x[~held].std(axis=0) + 1e-6
    z = (x - mean) / std
    weights = fit_mlp(z[~held], y[~held], tp)
    rng = np.random.default_rng(tp.seed)
    train_idx = np.flatnonzero(~held)
    if len(train_idx) > tp.knn_reference_rows:
        train_idx = np.sort(rng.choice(train_idx, tp.knn_reference_rows, replace=False))
    arrays: dict[str, np.ndarray] = {
        "mean": mean,
        "std": std,
        "n_layers": np.array(len(weights) // 2),
        "ref_x": z[train_idx],
        "ref_y": y[train_idx],
        "k": np.array(tp.knn_k),
        "gate": np.zeros(3),
    }
    for i in range(len(weights) // 2):
        arrays[f"w{i}"], arrays[f"b{i}"] = weights[2 * i], weights[2 * i + 1]
    predictor = GainPredictor(arrays)
    paths = predictor.paths(x[held])
    _, distance = predictor.knn(z[held])
    arrays["gate"] = fit_gate(paths["mlp"], paths["knn"], distance, y[held])
    predictor = GainPredictor(arrays)
    paths = predictor.paths(x[held])
    report = {
        "rows": float(len(y)),
        "heldout_rows": float(held.sum()),
        "heldout_success": float(y[held].mean()),
        "logloss_profile_claim": log_loss(x[held][:, FEATURES.index("claimed")], y[held]),
        "logloss_mlp": log_loss(paths["mlp"], y[held]),
        "logloss_knn": log_loss(paths["knn"], y[held]),
        "logloss_mixed": log_loss(paths["mixed"], y[held]),
        "mean_gate": float(paths["gate"].mean()),
    }
    return predictor, report


# ------------------------------------------------------------------------------- the policy


def predicted_latency(profile: ExecutorProfile, sub: Subtask, tokens_in: int) -> float:
    latency = profile.latency
    return (
        latency.ttft_s
        + tokens_in / latency.prefill_tokens_per_s
        + sub.output_tokens * profile.verbosity / latency.tokens_per_s
    )


def in_time(options: list[Candidate], remaining_s: float) -> list[Candidate]:
    """The options predicted to finish within the time left; all of them if none is."""
    return [c for c in options if c.latency < remaining_s] or options


class ProgressPolicy(SubtaskPolicy):
    name = "progress"
    escalate = True

    def prepare(self, params: Params) -> None:
        """Load the predictor now: a missing model is a ConfigError naming the command."""
        GainPredictor.load(params.policies.progress_model)

    def predictor(self, state: EpisodeState) -> Callable[[np.ndarray], np.ndarray]:
        return GainPredictor.load(state.params.policies.progress_model).predict

    def _context(self, state: EpisodeState) -> dict[str, Any]:
        """The state's progress view and per-subtask histories, once per milestone."""
        key = ("progress", len(state.milestones))
        context = state.scratch.get(key)
        if context is None:
            task = state.task
            slope = state.params.capability.difficulty_slope
            profiles = {p.name: p for p in state.pool.profiles}
            latest = latest_results(state)
            previous = state.scratch.get(("progress", len(state.milestones) - 1))
            view = progress_view(
                task, latest, profiles, slope, previous["view"].completion if previous else 0.0
            )
            context = state.scratch[key] = {
                "view": view,
                "latest": latest,
                "profiles": profiles,
                "history": histories(state.milestones, profiles, task.subtask_index, slope),
            }
        return context

    def candidates(
        self, state: EpisodeState, subs: list[Subtask], exclude: dict[str, list[str]] | None = None
    ) -> dict[str, list[Candidate]]:
        """Every allowed executor for each subtask, with predicted success, cost and latency;
        one batched prediction for all of them."""
        context = self._context(state)
        view: ProgressView = context["view"]
        slope = state.params.capability.difficulty_slope
        table = estimates(state)
        task = state.task
        keys: list[tuple[str, ExecutorProfile]] = []
        rows = []
        for sub in subs:
            tokens_in = sub.input_tokens + sum(
                task.subtask(d).output_tokens for d in sub.depends_on
            )
            for profile in state.pool.profiles:
                if exclude and profile.name in exclude.get(sub.id, ()):
                    continue
                keys.append((sub.id, profile))
                rows.append(
                    candidate_features(profile, sub, slope, context["history"].get(sub.id), view)
                    + [float(tokens_in)]
                )
        if not rows:
            return {}
        features = np.array(rows)
        success = self.predictor(state)(features[:, :-1])
        out: dict[str, list[Candidate]] = {}
        for (sub_id, profile), p, row in zip(keys, success, features, strict=True):
            sub = task.subtask(sub_id)
            out.setdefault(sub_id, []).append(
                Candidate(
                    profile.name,
                    float(p),
                    table.by_name(sub_id)[profile.name].cost,
                    predicted_latency(profile, sub, int(row[-1])),
                )
            )
        return out

    def chooser(self, state: EpisodeState) -> Callable[[Subtask], str]:
        weights = state.params.policies
        remaining_s = max(state.remaining_s, 1e-3)
        candidates = {
            sub_id: in_time(options, remaining_s)
            for sub_id, options in self.candidates(state, state.task.subtasks).items()
        }
        # Time is priced against what is left of the time budget: it gets dearer as it runs out.
        chosen = choose(
            candidates,
            cost_weight=weights.progress_cost_weight,
            time_weight=weights.time_weight,
            budget_usd=state.task.budget_usd,
            budget_s=remaining_s,
            remaining_usd=state.remaining_usd,
        )
        return lambda sub: chosen[sub.id].executor

    def _escalation(self, state: EpisodeState, sub: Subtask, tried: list[str]) -> str | None:
        """Another executor for a doubted subtask when the predicted gain in log success beats
        the price of the retry and of re-running its dependents."""
        context = self._context(state)
        result = context["latest"][sub.id]
        profile = context["profiles"].get(result.executor)
        slope = state.params.capability.difficulty_slope
        current = (
            posterior_correct(
                prior_success(profile, sub, slope),
                result.self_check,
                profile.self_check_reliability,
            )
            if profile is not None
            else 0.5
        )
        remaining_s = max(state.remaining_s, 1e-3)
        options = [
            c
            for c in self.candidates(state, [sub], exclude={sub.id: tried}).get(sub.id, [])
            if c.latency < remaining_s  # a retry that cannot finish in time is no option
        ]
        if not options:
            return None
        table = estimates(state)
        rerun = sum(
            table.by_name(d)[context["latest"][d].executor].cost
            if d in context["latest"] and context["latest"][d].executor in table.by_name(d)
            else 0.0
            for d in downstream(state.task, {sub.id}) - {sub.id}
        )
        weights = state.params.policies
        task = state.task

        def net_gain(c: Candidate) -> float:
            return (
                math.log(max(c.success, 1e-6))
                - math.log(max(current, 1e-6))
                - weights.progress_cost_weight * (c.cost + rerun) / task.budget_usd
                - weights.time_weight * c.latency / remaining_s
            )

        best = max(options, key=net_gain)
        if net_gain(best) <= 0 or best.cost + rerun > state.remaining_usd:
            return None
        return best.executor
