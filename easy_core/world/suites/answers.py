"""Reading answers out of free text and grading them (SQuAD-style normalisation)."""

from __future__ import annotations

import re
import string
from collections import Counter

# "Answer: X", "answer = X", "the answer is X"; not any line that uses the word
_ANSWER_LINE = re.compile(r"\banswer\s*(?:is\b\s*[:=]?|[:=])\s*(.+)", re.IGNORECASE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def last_boxed(text: str) -> str | None:
    """The contents of the last `\\boxed{...}` in `text` (braces nested inside it kept), or
    None: the form math-tuned models answer in even when asked for an 'Answer:' line."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed{")
    for i in range(begin, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            if depth == 0:
                return text[begin:i].strip()
            depth -= 1
    return None  # unclosed


def final_line(text: str | None) -> str:
    """The answer a model gave: what follows the last 'Answer:' if any (unboxed), else the
    last `\\boxed{...}`, else the last non-empty line."""
    if not text:
        return ""
    for line in reversed(text.strip().splitlines()):
        match = _ANSWER_LINE.search(line)
        if match:
            answer = match.group(1).strip()
            return last_boxed(answer) or answer
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
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
