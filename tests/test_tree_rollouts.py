"""Tree-structured rollouts: forks share their prefix, values and advantages, and the token
saving against independent rollouts."""

from __future__ import annotations

import statistics

import pytest

from easy_core.core.clock import DiscreteEventClock, run_synchronously
from easy_core.core.params import Params
from easy_core.learning.trees import TaskTree, grow_tree, token_comparison
from easy_core.policies import get_policy
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.suites.sim import SimSuite


@pytest.fixture
def runner(pool, params: Params) -> EpisodeRunner:
    return EpisodeRunner(pool, params, SimSuite.check)


def test_a_fork_continues_exactly_like_the_original(runner, params: Params) -> None:
    policy = get_policy("greedy")
    for task in SimSuite(params.sim).tasks("test", 20, 1):
        whole = run_synchronously(runner.run(task, policy, 1, DiscreteEventClock()))
        cursor = runner.start(task, 1, DiscreteEventClock())
        run_synchronously(cursor.turn(policy))
        fork = cursor.fork()
        while run_synchronously(fork.turn(policy)):
            pass
        assert fork.trajectory(policy.name) == whole
        # the original was not touched by its fork
        assert (
            len(cursor.state.milestones) <= 1 and cursor.session.ledger is not fork.session.ledger
        )


def test_tree_shares_its_prefix_and_values_are_leaf_means(runner, params: Params) -> None:
    policy = get_policy("greedy-sample")
    task = next(SimSuite(params.sim).tasks("train", 1, 4))
    tree = grow_tree(runner, policy, task, 4, k=2, depth=3)
    assert TaskTree.model_validate_json(tree.model_dump_json()) == tree
    children: dict[int, list] = {}
    for node in tree.nodes:
        if node.parent is not None:
            children.setdefault(node.parent, []).append(node)
    assert all(len(group) == 2 for group in children.values())
    assert 1 <= len(tree.leaves) <= 2**3

    def leaf_returns(node) -> list[float]:
        if node.leaf is not None:
            return [node.leaf.reward.total]
        return [r for child in children[node.id] for r in leaf_returns(child)]

    for node in tree.nodes:
        assert node.value == pytest.approx(statistics.fmean(leaf_returns(node)))
    for group in children.values():
        advantages = [n.advantage for n in group]
        assert sum(advantages) == pytest.approx(0.0, abs=1e-6)
    # a leaf's trajectory holds every milestone from the root: the shared prefix is in it
    depths = {n.id: n.depth for n in tree.nodes}
    for leaf in tree.leaves:
        assert leaf.leaf is not None and len(leaf.leaf.milestones) >= min(depths[leaf.id], 1)


def test_tree_level_advantages_are_normalised_over_the_whole_tree(runner, params) -> None:
    task = next(SimSuite(params.sim).tasks("train", 1, 5))
    tree = grow_tree(runner, get_policy("greedy-sample"), task, 5, k=2, depth=2, scope="tree")
    advantages = [n.advantage for n in tree.nodes if n.parent is not None]
    assert sum(advantages) == pytest.approx(0.0, abs=1e-6)


def test_trees_generate_at_least_40_percent_fewer_tokens_per_leaf(runner, params) -> None:
    tasks = list(SimSuite(params.sim).tasks("train", 60, 0))
    figures = token_comparison(runner, get_policy("greedy-sample"), tasks, 0, k=2, depth=3)
    assert figures["token_saving"] >= 0.40
    # same policy, same tasks: trees do not change what the leaves achieve by much
    assert abs(figures["mean_return_tree"] - figures["mean_return_independent"]) < 0.05


def test_tree_shards_together_are_the_trees_of_one_process(params) -> None:
    from easy_core.learning.trees import generate_trees, merge_tree_shards, tree_shard

    small = params.model_copy(
        update={"rollouts": params.rollouts.model_copy(update={"tree_tasks": 9})}
    )
    trees, summary = generate_trees(small)
    sharded, sharded_summary = merge_tree_shards([tree_shard(small, i, 4) for i in range(4)])
    assert [t.model_dump_json() for t in sharded] == [t.model_dump_json() for t in trees]
    assert sharded_summary == pytest.approx(summary) and len(trees) == 9
