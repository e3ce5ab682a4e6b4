"""Reading answers out of free text and grading them (SQuAD-style normalisation)."""

from __future__ import annotations

import re
import string
from collections import Counter

_ANSWER_LINE = re.compile(r"answer\s*(?:is)?\s*[:=]?\s*(.+)", re.IGNORECASE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def final_line(text: str | None) -> str:
    """The answer a model gave: what follows the last 'Answer:' if any, else the last non-empty
    line."""
    if not text:
        return ""
    for line in reversed(text.strip().splitlines()):
        match = _ANSWER_LINE.search(line)
        if match:
            return match.group(1).strip()
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def normalize(text: str) -> str:
    text = text.lower()
    text = "".join(ch for ch in text if ch not in set(string.punctuation))
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> bool:
    return normalize(prediction) == normalize(gold)


def token_f1(prediction: str, gold: str) -> float:
    pred, ref = normalize(prediction).split(), normalize(gold).split()
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)
