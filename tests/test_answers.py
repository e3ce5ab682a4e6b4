"""Reading a model's answer out of its text: an 'Answer:' line, a `\\boxed{}`, the last line."""

from __future__ import annotations

import pytest

from easy_core.world.suites.answers import final_line, last_boxed


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("Let me think.\nAnswer: 42", "42"),
        ("Answer: \\boxed{42}", "42"),
        ("so 1 - 6 * 4 = -23, and\n\\[ \\boxed{-13} \\]\nThat is all.", "-13"),
        ("first \\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("no answer marker\n17", "17"),
        ("", ""),
    ],
)
def test_final_line(text: str, answer: str) -> None:
    assert final_line(text) == answer


def test_an_unclosed_box_is_no_answer() -> None:
    assert last_boxed("\\boxed{12") is None
    assert final_line("\\boxed{12") == "\\boxed{12"
