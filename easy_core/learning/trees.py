"""Tree-structured rollouts: from each task, K alternatives at each orchestrator decision (a
turn: the next milestone's plan, or the answer) down to depth D; below that every branch runs on
to the end with one sample. Siblings share their prefix: its turns are generated once and its
steps executed once (the episode is forked, not replayed).

The return of a leaf is its trajectory's reward; the value of a node is the mean return of the
leaves below it; a node's advantage is its value normalised within its sibling group (GRPO's
group), plus, with `scope="tree"`, normalised across every node of the task's tree (Tree-GRPO).
On-policy trees, grown by the model being trained inside TRL, are `tree_grpo`'s.

The point of trees is tokens: a sibling group compares K continuations of one shared prefix, so
the prefix's orchestrator tokens are paid once instead of once per leaf. `token_comparison`
measures generated orchestrator tokens per leaf against independent rollouts with as many leaves.
Forking needs the discrete-event clock: the sim suite and backends.
"""

from __future__ import annotations

import statistics
from typing import Literal

from pydantic import Field

from easy_core.core.clock import DiscreteEventClock, run_synchronously
from easy_core.core.params import Params
from easy_core.core.schemas import Record, Task, Trajectory
from easy_core.runtime.episode import EpisodeCursor, EpisodeRunner
from easy_core.runtime.policy import Policy

AdvantageScope = Literal["siblings", "tree"]


class TreeNode(Record):
    id: int
    parent: int | None
    depth: int
    branch: str
    tokens: int = Field(description="orchestrator tokens generated on this node's own segment")
    decision: str = Field("", description="the milestone of the turn taken at this node")
    value: float = 0.0
    advantage: float = 0.0
    leaf: Trajectory | None = None


class TaskTree(Record):
    task_id: str
    policy: str
    k: int
    depth: int
    scope: AdvantageScope
    nodes: list[TreeNode]

    @property
    def leaves(self) -> list[TreeNode]:
        return [n for n in self.nodes if n.leaf is not None]

    @property
    def tokens(self) -> int:
        return sum(n.tokens for n in self.nodes)


def _finish(cursor: EpisodeCursor, policy: Policy) -> None:
    while run_synchronously(cursor.turn(policy)):
        pass


def grow_tree(
    runner: EpisodeRunner,
    policy: Policy,
    task: Task,
    seed: int,
    k: int,
    depth: int,
    scope: AdvantageScope = "siblings",
) -> TaskTree:
    runner.count_plan_tokens = True
    nodes: list[TreeNode] = []
    root = runner.start(task, seed, DiscreteEventClock())
    root.state.scratch["branch"] = "r"
    nodes.append(TreeNode(id=0, parent=None, depth=0, branch="r", tokens=0))

    def expand(cursor: EpisodeCursor, node: TreeNode) -> None:
        if cursor.ended or node.depth >= depth:
            before = sum(cursor.turn_tokens)
            _finish(cursor, policy)
            node.tokens += sum(cursor.turn_tokens) - before
            node.leaf = cursor.trajectory(policy.name)
            return
        for i in range(k):
            child = cursor.fork()
            branch = f"{node.branch}.{i}"
            child.state.scratch["branch"] = branch
            before = sum(child.turn_tokens)
            milestones = len(child.state.milestones)
            run_synchronously(child.turn(policy))
            decision = (
                child.state.milestones[-1].plan.milestone
                if len(child.state.milestones) > milestones
                else (child.end_reason or "repair")
            )
            grown = TreeNode(
                id=len(nodes),
                parent=node.id,
                depth=node.depth + 1,
                branch=branch,
                tokens=sum(child.turn_tokens) - before,
                decision=decision,
            )
            nodes.append(grown)
            expand(child, grown)

    expand(root, nodes[0])
    assign_values(nodes, scope)
    return TaskTree(task_id=task.id, policy=policy.name, k=k, depth=depth, scope=scope, nodes=nodes)


def assign_values(
    nodes: list[TreeNode], scope: AdvantageScope = "siblings", scale: bool = True
) -> None:
    """Values (mean leaf return of each subtree) and advantages, in place: each node's value
    against its sibling group's (GRPO's group), and with `scope="tree"` also against every node
    of the task's tree (Tree-GRPO's intra- plus inter-branch advantage). `scale` divides each
    term by its group's standard deviation (GRPO), else only centres it (Dr. GRPO)."""
    children: dict[int, list[TreeNode]] = {}
    for node in nodes:
        if node.parent is not None:
            children.setdefault(node.parent, []).append(node)

    def value(node: TreeNode) -> list[float]:
        if node.leaf is not None:
            returns = [node.leaf.reward.total]
        else:
            returns = [r for child in children.get(node.id, []) for r in value(child)]
        node.value = statistics.fmean(returns) if returns else 0.0
        return returns

    value(nodes[0])
    for node in nodes:
        node.advantage = 0.0
    groups = list(children.values())
    if scope == "tree":
        groups.append([n for n in nodes if n.parent is not None])
    for group in groups:
        for n, term in zip(group, normalised([n.value for n in group], scale), strict=True):
            n.advantage += term


def normalised(values: list[float], scale: bool = True) -> list[float]:
    """GRPO's advantage of each value in its group: minus the group mean, over the group's
    population standard deviation when `scale`; 0 for a group of one."""
    if len(values) < 2:
        return [0.0] * len(values)
    mean = statistics.fmean(values)
    std = statistics.pstdev(values) if scale else 0.0
    return [(v - mean) / (std + 1e-6) if scale else v - mean for v in values]


def independent_rollouts(
    runner: EpisodeRunner, policy: Policy, task: Task, seed: int, n: int
) -> tuple[list[Trajectory], int]:
    """`n` independent episodes (each its own sample) and the orchestrator tokens they generate."""
    runner.count_plan_tokens = True
    trajectories, tokens = [], 0
    for j in range(n):
        cursor = runner.start(task, seed, DiscreteEventClock())
        cursor.state.scratch["branch"] = f"independent.{j}"
        _finish(cursor, policy)
        tokens += sum(cursor.turn_tokens)
        trajectories.append(cursor.trajectory(policy.name))
    return trajectories, tokens


def grow_and_count(
    runner: EpisodeRunner,
    policy: Policy,
    task: Task,
    seed: int,
    k: int,
    depth: int,
    scope: AdvantageScope = "siblings",
) -> tuple[TaskTree, dict[str, float]]:
    """The task's tree, and its orchestrator tokens and returns beside independent episodes
    with as many leaves (sums, for `token_summary`)."""
    tree = grow_tree(runner, policy, task, seed, k, depth, scope)
    leaves = tree.leaves
    trajectories, tokens = independent_rollouts(runner, policy, task, seed, len(leaves))
    return tree, {
        "tasks": 1.0,
        "leaves": float(len(leaves)),
        "tree_tokens": float(tree.tokens),
        "independent_tokens": float(tokens),
        "tree_return": sum(n.leaf.reward.total for n in leaves if n.leaf is not None),
        "independent_return": sum(t.reward.total for t in trajectories),
    }


def token_summary(counts: list[dict[str, float]]) -> dict[str, float]:
    """Generated orchestrator tokens per leaf, trees against independent rollouts with the same
    number of leaves, and the mean returns of both, from `grow_and_count`'s sums."""
    total = {key: sum(c[key] for c in counts) for key in counts[0]} if counts else {}
    leaves = max(1.0, total.get("leaves", 0.0))
    per_leaf_tree = total.get("tree_tokens", 0.0) / leaves
    per_leaf_independent = total.get("independent_tokens", 0.0) / leaves
    return {
        "tasks": total.get("tasks", 0.0),
        "leaves": total.get("leaves", 0.0),
        "tokens_per_leaf_tree": per_leaf_tree,
        "tokens_per_leaf_independent": per_leaf_independent,
        "token_saving": 1.0 - per_leaf_tree / per_leaf_independent if per_leaf_independent else 0.0,
        "mean_return_tree": total.get("tree_return", 0.0) / leaves,
        "mean_return_independent": total.get("independent_return", 0.0) / leaves,
    }


def token_comparison(
    runner: EpisodeRunner, policy: Policy, tasks: list[Task], seed: int, k: int, depth: int
) -> dict[str, float]:
    return token_summary(
        [grow_and_count(runner, policy, task, seed, k, depth)[1] for task in tasks]
    )


def tree_shard(
    params: Params, shard: int, shards: int
) -> list[tuple[int, TaskTree, dict[str, float]]]:
    """Every `shards`-th training task of params.rollouts from `shard` on, as (its position among
    the tree tasks, its tree, its token counts): shards run anywhere (a Dask worker) and their
    union is `generate_trees`' result."""
    from easy_core.executors.pool import load_pool
    from easy_core.policies import get_policy
    from easy_core.world.suites.sim import SimSuite

    config = params.rollouts
    runner = EpisodeRunner(load_pool(config.pool, params), params, SimSuite.check)
    policy = get_policy(config.tree_policy)
    tasks = list(SimSuite(params.sim).tasks("train", config.tree_tasks, config.seed))
    return [
        (
            position,
            *grow_and_count(
                runner,
                policy,
                task,
                config.seed,
                config.tree_k,
                config.tree_depth,
                config.advantage_scope,
            ),
        )
        for position, task in enumerate(tasks)
        if position % shards == shard
    ]


def merge_tree_shards(
    shards: list[list[tuple[int, TaskTree, dict[str, float]]]],
) -> tuple[list[TaskTree], dict[str, float]]:
    rows = sorted((row for shard in shards for row in shard), key=lambda row: row[0])
    return [tree for _, tree, _ in rows], token_summary([counts for _, _, counts in rows])


def generate_trees(params: Params) -> tuple[list[TaskTree], dict[str, float]]:
    """The trees of params.rollouts (training split, sim suite) and their token comparison."""
    return merge_tree_shards([tree_shard(params, 0, 1)])
