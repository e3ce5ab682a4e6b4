"""The `program` policy: math subtasks as programs an LLM writes and the python tool runs; a
failed program is rewritten by another writer told the error, then solved directly. Code is
checked by its docstring examples on the python tool and repaired by another writer. Real
engine, real sandbox, LLMs served by loopback fakes."""

from __future__ import annotations

import pytest

from easy_core.core.params import load_params
from easy_core.core.schemas import ExecutorProfile, LatencyModel
from easy_core.executors.openai_http import OpenAIExecutor
from easy_core.executors.pool import ExecutorPool
from easy_core.executors.python_tool import PythonToolExecutor, printing_last_expression
from easy_core.policies.batch import run_episodes
from easy_core.policies.example_tests import example_tests
from easy_core.runtime.episode import EpisodeRunner
from easy_core.world.sandbox import run_python
from easy_core.world.suites.code import INSTRUCTION, LIMITS, CodeSuite, problems
from easy_core.world.suites.compound_math import CompoundMathSuite
from easy_core.world.suites.math import MathSuite
from tests.conftest import ROOT
from tests.fake_openai import FakeOpenAI
from tests.helpers import python_tool_profile

PARAMS = load_params(ROOT / "params.yaml")


def llm(name: str, url: str, price: float, code: float, math: float) -> OpenAIExecutor:
    return OpenAIExecutor(
        ExecutorProfile(
            name=name,
            backend="openai",
            endpoint=url,
            model=name,
            price_in_per_1m=price,
            price_out_per_1m=3 * price,
            latency=LatencyModel(ttft_s=0.1, tokens_per_s=50),
            context_window=4096,
            max_output_tokens=128,
            capability={
                "code": {"success": code, "n": 10},
                "math": {"success": math, "n": 10},
                "writing": {"success": 0.9, "n": 10},
            },
        )
    )


def python() -> PythonToolExecutor:
    return PythonToolExecutor(python_tool_profile(math={"success": 0.0, "n": 10}))


def solve(task, suite, small: FakeOpenAI, large: FakeOpenAI, with_python=True, params=PARAMS):
    executors = [
        llm("small", small.url, 0.05, code=0.7, math=0.1),
        llm("large", large.url, 0.15, code=0.5, math=0.25),
    ]
    pool = ExecutorPool.of("test", executors + ([python()] if with_python else []))
    runner = EpisodeRunner(pool, params, suite.check, score=getattr(suite, "score", None))
    (trajectory,) = run_episodes([task], runner, "program", 0, mode="wall")
    return trajectory


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def test_a_math_task_is_a_program_written_by_the_cheap_coder_and_run_by_python():
    suite = MathSuite()
    task = next(suite.tasks("validation", 1, 0))
    with FakeOpenAI(fenced(f"answer = {task.answer}\nanswer")) as small, FakeOpenAI() as large:
        trajectory = solve(task, suite, small, large)
    (milestone,) = trajectory.milestones
    program, run = milestone.plan.steps
    assert (program.executor, run.executor) == ("small", "python")
    assert run.depends_on == [program.id] and run.covers == ["t1"]
    assert task.prompt in program.instruction and "Answer:" not in program.instruction
    # the program ended in a bare expression: the tool printed its value
    assert milestone.results[1].output == task.answer
    assert trajectory.correct is True and not large.requests


def test_a_failed_program_is_rewritten_by_another_writer_then_solved_directly():
    suite = MathSuite()
    task = next(suite.tasks("validation", 1, 0))
    with FakeOpenAI(fenced("print(1 / 0)")) as small, FakeOpenAI(fenced("pass")) as large:
        trajectory = solve(task, suite, small, large)
        rewrites = [r["body"]["messages"][-1]["content"] for r in large.requests]
    first, second, third = trajectory.milestones[:3]
    assert [s.executor for s in first.plan.steps] == ["small", "python"]
    # a program's failure repeats: the engine ran it once, with no fallback to an LLM
    assert first.results[1].status == "failed" and first.results[1].attempts == 1
    assert "ZeroDivisionError" in first.results[1].error
    assert [s.executor for s in second.plan.steps] == ["large", "python"]
    assert "ZeroDivisionError" in rewrites[0]  # the next writer was told the error
    assert second.results[1].output == "" and second.results[1].faults == ["empty"]
    (direct,) = third.plan.steps  # no writer left: the math executor greedy would choose
    assert direct.executor == "large" and direct.covers == ["t1"]


def test_compound_parts_are_programs_in_parallel_and_the_combining_step_is_greedys():
    suite = CompoundMathSuite()
    task = next(suite.tasks("validation", 1, 0))
    parts = len(task.subtasks) - 1
    with FakeOpenAI(fenced("print(7)")) as small, FakeOpenAI("Answer: 7") as large:
        trajectory = solve(task, suite, small, large)
    steps = trajectory.milestones[0].plan.steps
    runs = [s for s in steps if s.executor == "python"]
    assert len(runs) == parts and all(s.depends_on == [f"{s.id}-program"] for s in runs)
    combine = steps[-1]
    assert combine.covers == [task.sink.id]
    assert sorted(combine.depends_on) == sorted(s.id for s in runs)


def test_a_pool_without_the_python_tool_is_refused_by_name():
    suite = MathSuite()
    task = next(suite.tasks("validation", 1, 0))
    with FakeOpenAI() as small, FakeOpenAI() as large:
        trajectory = solve(task, suite, small, large, with_python=False)
    assert trajectory.end_reason == "policy_error"
    assert "has none (add an executor with backend: tool, model: python)" in trajectory.end_detail
    assert not small.requests and not large.requests


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("x = 2\nx * 21", "x = 2\nprint(x * 21)\n"),
        ("print(3)", "print(3)"),
        ("x = 1; x", "x = 1; x"),  # same line as a statement: left alone
        ("def f(:", "def f(:"),  # a syntax error reaches the sandbox as it is
        ("y = 4", "y = 4"),
    ],
)
def test_a_final_bare_expression_is_printed(code, expected):
    assert printing_last_expression(code) == expected


def code_task(entry_point: str):
    suite = CodeSuite()
    tasks = suite.tasks("train", 131, 0)
    return suite, next(t for t in tasks if CodeSuite._problem(t)["entry_point"] == entry_point)


@pytest.mark.parametrize("shows_code", [True, False])
def test_code_is_checked_by_its_docstring_examples_and_repaired_by_another_writer(shows_code):
    suite, task = code_task("has_close_elements")
    wrong = fenced("def has_close_elements(numbers, threshold):\n    return False")
    right = fenced(task.prompt + CodeSuite._problem(task)["canonical_solution"])
    params = PARAMS.model_copy(deep=True)
    params.policies.repair_shows_code = shows_code
    with FakeOpenAI(wrong) as small, FakeOpenAI(right) as large:
        trajectory = solve(task, suite, small, large, params=params)
        repair = large.requests[0]["body"]["messages"][-1]["content"]
    first, second = trajectory.milestones[:2]
    write, check = first.plan.steps
    assert (write.executor, check.executor) == ("small", "python")  # the cheap capable coder
    assert check.depends_on == [write.id] and not check.covers
    # the stub's example `has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)` is True
    assert first.results[1].status == "failed"
    assert "1 of 2 docstring examples pass" in first.results[1].output
    assert [s.executor for s in second.plan.steps] == ["large", "python"]
    assert "Got:\n    False" in repair  # what running the examples printed
    assert ("return False" in repair) is shows_code  # and the failed code, unless fresh
    assert second.results[1].status == "ok" and "2 of 2" in second.results[1].output
    assert trajectory.correct is True and len(trajectory.milestones) == 2


def test_code_that_passes_its_examples_is_the_answer_at_once():
    suite, task = code_task("has_close_elements")
    right = fenced(task.prompt + CodeSuite._problem(task)["canonical_solution"])
    with FakeOpenAI(right) as small, FakeOpenAI() as large:
        trajectory = solve(task, suite, small, large)
    assert len(trajectory.milestones) == 1  # solve and test, then the answer
    assert trajectory.correct is True and not large.requests


@pytest.mark.parametrize(
    ("stub", "doctest_text"),
    [
        (  # a doctest: its value written as Python prints it
            'def f(x):\n    """Echo.\n    >>> f("21")\n    "21"\n    """\n',
            ">>> f(\"21\")\n'21'\n",
        ),
        (  # prose examples with literal arguments and value; `f(a)` has none
            "def f(x):\n    '''f(1, 2) ==> (3, 4)\n    f([1]) should return True.\n"
            "    f(a) => False\n    f(5) -> 19 - 5 = 14'''\n",
            ">>> f(1, 2)\n(3, 4)\n>>> f([1])\nTrue\n",
        ),
        (  # a bare comparison expects True; None prints nothing
            "def f(x):\n    '''>>> f(3) == 9\n    >>> f(0)\n    None\n    '''\n",
            ">>> f(3) == 9\nTrue\n>>> f(0)\n",
        ),
        (  # the examples of the last function (the one asked for) only
            "def helper():\n    '''>>> helper()\n    1'''\n\ndef f(x):\n    '''None.'''\n",
            None,
        ),
    ],
)
def test_docstring_examples_become_doctests(stub, doctest_text):
    tests = example_tests(INSTRUCTION.format(prompt=stub))
    assert (tests.docstring if tests else None) == doctest_text


def test_humaneval_reference_solutions_pass_their_own_examples():
    """The visible examples agree with the hidden tests: the reference solutions pass them,
    except where HumanEval's docstring itself disagrees (median, tri, sort_array, bf)."""
    from concurrent.futures import ThreadPoolExecutor

    names, programs = [], []
    for problem in problems():
        tests = example_tests(INSTRUCTION.format(prompt=problem["prompt"]))
        if tests is not None:
            reply = fenced(problem["prompt"] + problem["canonical_solution"])
            names.append(problem["entry_point"])
            programs.append(f"inputs = {{'write': {reply!r}}}\n" + tests.program("write"))
    with ThreadPoolExecutor(2) as pool:  # each program runs in its own interpreter: two at once
        passed = list(pool.map(lambda program: run_python(program, LIMITS).ok, programs))
    failing = sorted(name for name, ok in zip(names, passed, strict=True) if not ok)
    assert len(programs) >= 130
    assert failing == ["bf", "median", "sort_array", "tri"]
