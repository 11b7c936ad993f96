"""Numeric-answer reward: extract one final number and compare it exactly with the gold number.

Exact rational comparison (``fractions.Fraction``): ``46 == 46.0 == 92/2``; ``1,234`` reads as
1234. A response that gives several different final answers ("5 or 6", two boxed answers that
disagree) is hedged and scores 0, and so does one with no number at all.
"""

from __future__ import annotations

import re
from fractions import Fraction

from agentrl.types import RewardResult, Task

_NUM = r"[-+\u2212]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?|[-+\u2212]?\.\d+"
_NUM_RE = re.compile(_NUM)
_BARE_RE = re.compile(rf"^\s*\$?\s*({_NUM})\s*\$?\s*\.?\s*$")
_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASH_RE = re.compile(r"####\s*([^\n]*)")
_ANSWER_IS_RE = re.compile(r"answer\s+is\s*:?\s*([^\n]*)", re.IGNORECASE)
_HEDGE_WORDS = re.compile(r"\b(or|and|between|either)\b|±|\\pm", re.IGNORECASE)


def parse_number(text: str) -> Fraction | None:
    """Read one number (integer, decimal, fraction ``a/b``, thousands separators) or ``None``."""
    s = text.strip().replace("\u2212", "-").replace(" ", "")
    s = s.rstrip(".").strip("$")
    if not s or not _NUM_RE.fullmatch(s):
        return None
    s = s.replace(",", "")
    try:
        if "/" in s:
            num, den = s.split("/")
            return Fraction(num) / Fraction(den) if Fraction(den) != 0 else None
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def _boxed_contents(text: str) -> list[str]:
    from rewards.math import matching_braces  # linear; the nested scan was quadratic

    pairs = matching_braces(text)
    return [text[m.end(): pairs[m.end() - 1]] for m in _BOXED_RE.finditer(text) if m.end() - 1 in pairs]


def _numbers_in(segment: str) -> list[Fraction]:
    vals = [parse_number(m.group(0)) for m in _NUM_RE.finditer(segment)]
    return [v for v in vals if v is not None]


def extract_number(response: str) -> tuple[Fraction | None, str]:
    """Return ``(value, reason)``: the final numeric answer, or ``None`` with why not.

    Order: a bare number; the last ``\\boxed{}``; ``#### N``; "the answer is N"; the last number.
    ``reason`` is one of ``bare, boxed, hash, answer_is, last_number, missing, hedged``.
    """
    m = _BARE_RE.match(response)
    if m:
        return parse_number(m.group(1)), "bare"
    for reason, segments in (("boxed", _boxed_contents(response)),
                             ("hash", _HASH_RE.findall(response)),
                             ("answer_is", _ANSWER_IS_RE.findall(response))):
        if not segments:
            continue
        finals = {v for seg in segments for v in [_single_number(seg)] if v is not None}
        if reason in ("boxed", "hash") and len(finals) > 1:  # several final answers
            return None, "hedged"
        last = segments[-1]
        if _HEDGE_WORDS.search(last) and len(set(_numbers_in(last))) > 1:
            return None, "hedged"
        value = _single_number(last)
        return (value, reason) if value is not None else (None, "missing")
    nums = _numbers_in(response)
    if not nums:
        return None, "missing"
    tail = response[response.rfind("\n") + 1:] if "\n" in response.strip() else response
    if _HEDGE_WORDS.search(tail) and len(set(_numbers_in(tail))) > 1:
        return None, "hedged"
    return nums[-1], "last_number"


def _single_number(segment: str) -> Fraction | None:
    nums = set(_numbers_in(segment))
    return nums.pop() if len(nums) == 1 else None


def score(response: str, task: Task, *, bare: bool = False) -> RewardResult:
    """1.0 when the response's final number equals ``task.answer`` exactly, else 0.0.

    ``bare=True`` demands that the whole response is the number (nothing else), as the tiny CPU
    demo's arithmetic env does.
    """
    gold = parse_number(str(task.answer))
    if gold is None:
        raise ValueError(f"task {task.id}: gold answer {task.answer!r} is not a number")
    if bare:
        m = _BARE_RE.match(response)
        value, reason = (parse_number(m.group(1)), "bare") if m else (None, "not_bare")
    else:
        value, reason = extract_number(response)
    correct = float(value is not None and value == gold)
    return RewardResult(score=correct, components={"correct": correct},
                        info={"parsed": None if value is None else str(value), "how": reason})
