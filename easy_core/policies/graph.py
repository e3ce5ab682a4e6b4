"""The `graph` dispatcher: a small message-passing network over the task's DAG (plain torch)
that scores every (subtask, executor) pair in one forward pass; the plan then takes, per subtask,
the executor with the best predicted success for its cost (`budgeted.choose`). Doubted results
are escalated as `greedy` does.

Nodes carry the subtask's declared attributes (skill, difficulty, sizes, in/out degree, depth);
two rounds of message passing mix in what comes before and after each node (a subtask deep in a
chain, or feeding many others, is worth a stronger executor: its errors travel); a pair head reads
the node's embedding with the executor's card (claimed success, price, self-check reliability).
Trained offline on the first-milestone rows of execution traces (label: the step was correct,
given correct inputs), so it learns executors only through their profiles and applies to pools it
never saw.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
from torch import nn

from easy_core.core.errors import ConfigError
from easy_core.core.params import Params, PolicyTrainingParams
from easy_core.core.schemas import ExecutorProfile, Subtask, Task
from easy_core.policies.baselines import SubtaskPolicy, estimates
from easy_core.policies.budgeted import Candidate, choose
from easy_core.policies.progress import predicted_latency
from easy_core.policies.progress_view import prior_success
from easy_core.runtime.policy import EpisodeState

NODE_NUMERIC = 6  # difficulty, log sizes in and out, in-degree, out-degree, depth
PAIR_FEATURES = 4  # claimed, claimed logit, log price, reliability


class GraphDispatcher(nn.Module):
    def __init__(self, skills: Sequence[str], hidden: int = 32, rounds: int = 2):
        super().__init__()
        self.skills = list(skills)
        self.hidden = hidden
        self.encode = nn.Sequential(nn.Linear(len(self.skills) + NODE_NUMERIC, hidden), nn.ReLU())
        self.rounds = nn.ModuleList(nn.Linear(3 * hidden, hidden) for _ in range(rounds))
        self.head = nn.Sequential(
            nn.Linear(hidden + PAIR_FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, 1)
        )

    def forward(
        self, nodes: torch.Tensor, edges: torch.Tensor, pairs: torch.Tensor, pair_node: torch.Tensor
    ) -> torch.Tensor:
        """Success logits of `pairs` (rows of executor features, each for node `pair_node`);
        `edges` is 2 x E (prerequisite, dependent) over the rows of `nodes`."""
        h = self.encode(nodes)
        n = len(h)
        src, dst = edges
        ones = torch.ones(len(src), 1)
        in_deg = torch.zeros(n, 1).index_add_(0, dst, ones).clamp(min=1)
        out_deg = torch.zeros(n, 1).index_add_(0, src, ones).clamp(min=1)
        for layer in self.rounds:
            from_parents = torch.zeros_like(h).index_add_(0, dst, h[src]) / in_deg
            from_children = torch.zeros_like(h).index_add_(0, src, h[dst]) / out_deg
            h = torch.relu(layer(torch.cat([h, from_parents, from_children], dim=1))) + h
        # A correction to the profile's own claim (its logit is pair feature 1, scaled by 1/4):
        # an untrained head already predicts what the card says.
        correction = self.head(torch.cat([h[pair_node], pairs], dim=1)).squeeze(1)
        return 4.0 * pairs[:, 1] + correction


def node_features(task_subtasks: Sequence[Subtask], skills: Sequence[str]) -> list[list[float]]:
    index = {sub.id: i for i, sub in enumerate(task_subtasks)}
    depth: dict[str, int] = {}
    children: dict[str, int] = dict.fromkeys(index, 0)
    for sub in task_subtasks:  # topological order
        depth[sub.id] = 1 + max((depth[d] for d in sub.depends_on if d in depth), default=-1)
        for dep in sub.depends_on:
            if dep in children:
                children[dep] += 1
    rows = []
    for sub in task_subtasks:
        onehot = [float(sub.skill == s) for s in skills]
        rows.append(
            onehot
            + [
                sub.difficulty / 5.0,
                math.log1p(sub.input_tokens) / 8.0,
                math.log1p(sub.output_tokens) / 8.0,
                len(sub.depends_on) / 3.0,
                children[sub.id] / 3.0,
                depth[sub.id] / 5.0,
            ]
        )
    return rows


def pair_features(profile: ExecutorProfile, sub: Subtask, slope: float) -> list[float]:
    claimed = prior_success(profile, sub, slope)
    clipped = min(max(claimed, 1e-4), 1 - 1e-4)
    return [
        claimed,
        math.log(clipped / (1 - clipped)) / 4.0,
        math.log10(max(profile.price_out_per_1m, 1e-6)),
        profile.self_check_reliability,
    ]


def _graph_batch(
    tasks: Sequence[tuple[list[Subtask], list[tuple[int, list[float]]]]], skills: Sequence[str]
) -> tuple[torch.Tensor, ...]:
    """Concatenate graphs: node rows, edges with offsets, pair rows and their node index."""
    nodes: list[list[float]] = []
    src: list[int] = []
    dst: list[int] = []
    pairs: list[list[float]] = []
    pair_node: list[int] = []
    for subtasks, task_pairs in tasks:
        offset = len(nodes)
        index = {sub.id: offset + i for i, sub in enumerate(subtasks)}
        nodes += node_features(subtasks, skills)
        for sub in subtasks:
            for dep in sub.depends_on:
                if dep in index:
                    src.append(index[dep])
                    dst.append(index[sub.id])
        for node, features in task_pairs:
            pairs.append(features)
            pair_node.append(offset + node)
    return (
        torch.tensor(nodes, dtype=torch.float32),
        torch.tensor([src, dst], dtype=torch.long).reshape(2, -1),
        torch.tensor(pairs, dtype=torch.float32),
        torch.tensor(pair_node, dtype=torch.long),
    )


def training_graphs(rows: Sequence[dict[str, Any]]) -> tuple[list[Any], list[float], list[str]]:
    """Per task, its DAG rebuilt from the first milestone's rows (one step per subtask there)
    and the (node, executor features) pairs with outcomes, where inputs were correct."""
    by_task: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["milestone"] == 0 and r["subtask"] and r["status"] != "skipped":
            by_task.setdefault(f"{r['policy']}|{r['task_id']}", []).append(r)
    graphs, labels, skills = [], [], sorted({r["skill"] for r in rows if r["skill"]})
    for task_rows in by_task.values():
        seen: dict[str, int] = {}
        subtasks: list[Subtask] = []
        for r in task_rows:
            if r["subtask"] in seen:
                continue
            seen[r["subtask"]] = len(subtasks)
            subtasks.append(
                Subtask(
                    id=r["subtask"],
                    skill=r["skill"],
                    difficulty=r["difficulty_level"],
                    input_tokens=r["sub_input_tokens"],
                    output_tokens=r["sub_output_tokens"],
                    depends_on=list(r["deps"]),
                    gold="",
                )
            )
        pairs = []
        for r in task_rows:
            if not r["inputs_correct"]:
                continue
            pairs.append(
                (
                    seen[r["subtask"]],
                    [
                        r["claimed"],
                        r["claimed_logit"] / 4.0,
                        r["log_price"],
                        r["reliability"],
                    ],
                )
            )
            labels.append(float(r["correct"]))
        graphs.append((subtasks, pairs))
    return graphs, labels, skills


def train_graph_dispatcher(
    rows: Sequence[dict[str, Any]], tp: PolicyTrainingParams
) -> tuple[GraphDispatcher, dict[str, float]]:
    from easy_core.policies.progress import holdout_mask, log_loss

    graphs, labels, skills = training_graphs(rows)
    if not labels:
        raise ConfigError("no usable first-milestone trace rows to train the graph dispatcher")
    torch.manual_seed(tp.seed)
    model = GraphDispatcher(skills, hidden=tp.hidden)
    ids = [f"{i}" for i in range(len(graphs))]
    held = holdout_mask(ids, tp.holdout)
    train = [g for g, h in zip(graphs, held, strict=True) if not h]
    test = [g for g, h in zip(graphs, held, strict=True) if h]
    y_all = torch.tensor(labels)
    offsets = [0]
    for _, pairs in graphs:
        offsets.append(offsets[-1] + len(pairs))
    y_train = torch.cat([y_all[offsets[i] : offsets[i + 1]] for i, h in enumerate(held) if not h])
    y_test = torch.cat([y_all[offsets[i] : offsets[i + 1]] for i, h in enumerate(held) if h])
    optimiser = torch.optim.Adam(model.parameters(), lr=tp.learning_rate)
    loss_fn = nn.BCEWithLogitsLoss()
    batch_graphs = 128
    label_offsets = [0]
    for _, pairs in train:
        label_offsets.append(label_offsets[-1] + len(pairs))
    generator = torch.Generator().manual_seed(tp.seed)
    for _ in range(max(1, tp.epochs // 2)):
        order = torch.randperm(len(train), generator=generator).tolist()
        for start in range(0, len(order), batch_graphs):
            chosen = order[start : start + batch_graphs]
            batch = _graph_batch([train[i] for i in chosen], skills)
            y = torch.cat([y_train[label_offsets[i] : label_offsets[i + 1]] for i in chosen])
            optimiser.zero_grad()
            loss = loss_fn(model(*batch), y)
            loss.backward()
            optimiser.step()
    with torch.no_grad():
        p = torch.sigmoid(model(*_graph_batch(test, skills))).numpy()
    claimed = torch.tensor([f[0] for _, pairs in test for _, f in pairs]).numpy()
    y = y_test.numpy()
    return model, {
        "graphs": float(len(graphs)),
        "heldout_pairs": float(len(y)),
        "logloss_profile_claim": log_loss(claimed, y),
        "logloss_graph": log_loss(p, y),
    }


def save_dispatcher(model: GraphDispatcher, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    torch.save(
        {
            "skills": model.skills,
            "hidden": model.hidden,
            "rounds": len(model.rounds),
            "state": model.state_dict(),
        },
        tmp,
    )
    os.replace(tmp, path)
    return path


def load_dispatcher(path: str | Path) -> GraphDispatcher:
    try:
        mtime = os.path.getmtime(path)
    except OSError:
        raise ConfigError(
            f"graph dispatcher {path} not found; train it with `easy train-policy graph` "
            "(or `dvc repro policies`)"
        ) from None
    return _load(str(Path(path).resolve()), mtime)


@lru_cache(maxsize=8)
def _load(path: str, mtime: float) -> GraphDispatcher:
    saved = torch.load(path, weights_only=True)
    model = GraphDispatcher(saved["skills"], saved["hidden"], saved["rounds"])
    model.load_state_dict(saved["state"])
    model.eval()
    return model


def predict_success(
    model: GraphDispatcher, task: Task, profiles: Sequence[ExecutorProfile], slope: float
) -> list[list[float]]:
    """Predicted success of every profile (columns) on every subtask (rows): one forward pass."""
    pairs = [
        (i, pair_features(p, sub, slope)) for i, sub in enumerate(task.subtasks) for p in profiles
    ]
    with torch.inference_mode():
        p = torch.sigmoid(model(*_graph_batch([(task.subtasks, pairs)], model.skills)))
    return p.reshape(len(task.subtasks), len(profiles)).tolist()


class GraphPolicy(SubtaskPolicy):
    name = "graph"
    escalate = True

    def prepare(self, params: Params) -> None:
        """Load the network now: a missing model is a ConfigError naming the command."""
        load_dispatcher(params.policies.graph_model)

    def chooser(self, state: EpisodeState) -> Callable[[Subtask], str]:
        task = state.task
        profiles = state.pool.profiles
        slope = state.params.capability.difficulty_slope
        model = load_dispatcher(state.params.policies.graph_model)
        success = predict_success(model, task, profiles, slope)
        table = estimates(state)
        candidates = {}
        for sub, row in zip(task.subtasks, success, strict=True):
            tokens_in = sub.input_tokens + sum(
                task.subtask(d).output_tokens for d in sub.depends_on
            )
            by_name = table.by_name(sub.id)
            candidates[sub.id] = [
                Candidate(p.name, s, by_name[p.name].cost, predicted_latency(p, sub, tokens_in))
                for p, s in zip(profiles, row, strict=True)
            ]
        weights = state.params.policies
        chosen = choose(
            candidates,
            cost_weight=weights.graph_cost_weight,
            time_weight=weights.time_weight,
            budget_usd=task.budget_usd,
            budget_s=task.budget_s,
            remaining_usd=state.remaining_usd,
        )
        return lambda sub: chosen[sub.id].executor
