"""The simulated world shows a policy only what a real one would: a wrong sub-answer has the
right one's format and length, and nothing a policy can read from a result tells them apart
(only the self-check speaks of correctness, with its profile's reliability)."""

from __future__ import annotations

import functools
import math
import re
from collections import Counter

import numpy as np

from easy_core.core.params import Params
from easy_core.evaluation.evaluator import EvalSpec, evaluate
from easy_core.world.sim_world import wrong_answer
from easy_core.world.suites.sim import SimSuite
from tests.conftest import SIM_DEFAULT

HEX8 = re.compile(r"[0-9a-f]{8}")


@functools.cache
def visible_answers(n: int = 300) -> list[tuple[str, str, bool]]:
    """(what a policy reads of a sub-answer: the result's output line, the answer, right?)."""
    params = Params()
    _, trajectories = evaluate(EvalSpec("sim", "random", str(SIM_DEFAULT), n, 5), params)
    tasks = {task.id: task for task in SimSuite(params.sim).tasks("test", n, 5)}
    rows = []
    for t in trajectories:
        gold = {s.id: s.gold for s in tasks[t.task_id].subtasks}
        for milestone in t.milestones:
            for result in milestone.results:
                for sub_id, answer in result.sub_answers.items():
                    rows.append((result.output, answer, answer == gold[sub_id]))
    return rows


def char_features(answer: str) -> np.ndarray:
    """Per position, which of the 16 hex symbols (or none) stands there, and the length."""
    grid = np.zeros((8, 17))
    for i, c in enumerate(answer[:8]):
        grid[i, int(c, 16) if c in "0123456789abcdef" else 16] = 1
    return np.concatenate([grid.ravel(), [len(answer)]])


def naive_bayes_accuracy(train: list[tuple[str, bool]], test: list[tuple[str, bool]]) -> float:
    x = np.array([char_features(a) for a, _ in train])
    y = np.array([label for _, label in train])
    log_prior = np.log([np.mean(~y), np.mean(y)])
    # Laplace-smoothed Bernoulli likelihood of every feature per class
    theta = np.array([(x[y == k].sum(0) + 1) / ((y == k).sum() + 2) for k in (False, True)])
    theta = np.clip(theta, 1e-6, 1 - 1e-6)
    xt = np.array([char_features(a) for a, _ in test]).clip(0, 1)
    scores = xt @ np.log(theta).T + (1 - xt) @ np.log(1 - theta).T + log_prior
    predicted = scores.argmax(1).astype(bool)
    return float(np.mean(predicted == np.array([label for _, label in test])))


def test_a_wrong_sub_answer_looks_exactly_like_a_right_one():
    rows = visible_answers()
    right = [a for _, a, ok in rows if ok]
    wrong = [a for _, a, ok in rows if not ok]
    assert len(right) > 200 and len(wrong) > 200  # the random policy gives plenty of both
    assert all(HEX8.fullmatch(a) for a in right + wrong)
    assert Counter(map(len, right)).keys() == Counter(map(len, wrong)).keys() == {8}
    outputs = [o for o, _, _ in rows]
    assert not any("wrong" in o or "fail" in o for o in outputs)


def test_a_classifier_on_the_visible_strings_is_at_chance():
    rows = [(answer, ok) for _, answer, ok in visible_answers()]
    train, test = rows[::2], rows[1::2]
    majority = max(np.mean([ok for _, ok in test]), 1 - np.mean([ok for _, ok in test]))
    accuracy = naive_bayes_accuracy(train, test)
    # within the sampling noise of always guessing the majority class (3 standard errors)
    margin = 3 * math.sqrt(majority * (1 - majority) / len(test))
    assert accuracy <= majority + margin, (accuracy, majority, margin)


def test_the_classifier_would_catch_a_leak():
    """The check above can fail: on the old format (`wrong-<id>-<p>`) it is far above chance."""
    rows = [
        (answer if ok else f"wrong-{i}", ok)
        for i, (_, answer, ok) in enumerate(visible_answers(60))
    ]
    train, test = rows[::2], rows[1::2]
    assert naive_bayes_accuracy(train, test) > 0.95


def test_wrong_answers_keep_the_golds_format_and_never_equal_it():
    for gold in ("1a2b3c4d", "0012", "42", "Paris", "A-7b"):
        seen = {wrong_answer(s, "task", "t1", "exe", gold) for s in range(200)}
        assert gold not in seen and all(len(a) == len(gold) for a in seen)
        assert len(seen) > 50  # drawn, not one fixed string
    assert all(c.isdigit() for c in wrong_answer(0, "t", "t1", "e", "0012"))
    assert wrong_answer(3, "t", "t1", "e", "A-7b")[1] == "-"
    assert wrong_answer(0, "t", "t1", "a", "1a2b3c4d") != wrong_answer(
        0, "t", "t1", "b", "1a2b3c4d"
    )
