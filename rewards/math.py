"""Math answer verification: extract the final answer, decide equivalence, score.

``extract_answer(text)`` finds the final answer of a response or a gold label, in this order (each
step can be switched off with :class:`MathConfig`): the last ``\\boxed{}``/``\\fbox{}``; GSM8K's
``#### N``; "the (final) answer is X" / "answer: X"; a text that is itself a bare answer
(``7,425,000``, ``\\frac{14}{3}``, ``\\text{Evelyn}``); the last ``$...$`` of the final line; the
last number. Both sides of :func:`is_equivalent` are read the same way.

Equivalence first tries the pure-Python fast path (:mod:`rewards.mathnorm`: numbers, fractions,
thousands separators, percents, degrees, units, mixed numbers, scientific notation, tuples,
intervals, sets, ratios, text answers); only what it cannot decide goes to Math-Verify/sympy in a
helper process with a hard deadline that works from any thread (:mod:`rewards._sympy_worker`).

Hedged answers score 0: several boxed answers that disagree, "or" in the prediction when the gold
has none ("5 or 6"); ``a \\pm b`` reads as the two values ``{a+b, a-b}``, so it matches only a gold
that has both. A response never gets credit for merely containing the answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from agentrl.types import RewardResult, Task
from rewards import mathnorm
from rewards._sympy_worker import sympy_equal

__all__ = ["MathConfig", "extract_answer", "is_equivalent", "score", "compare"]


@dataclass(frozen=True)
class MathConfig:
    """How answers are found and compared."""

    boxed: bool = True
    """Read the last ``\\boxed{}`` / ``\\fbox{}``."""
    hash: bool = True
    """Read GSM8K's ``#### N``."""
    answer_is: bool = True
    """Read "the answer is X" / "final answer: X"."""
    dollars: bool = True
    """Read the last ``$...$`` of the final line."""
    last_number: bool = True
    """As a last resort, read the last number in the text."""
    rel_tol: float = 1e-9
    """Relative tolerance for numbers (exact rationals compare exactly; this absorbs float noise)."""
    float_rounding: int = 6
    """Decimal places Math-Verify rounds floats to on the slow path."""
    timeout_s: float = 5.0
    """Hard deadline for one slow-path (sympy) comparison."""
    use_sympy: bool = True
    """Allow the slow path; without it, undecided comparisons are False."""


DEFAULT = MathConfig()

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASH_RE = re.compile(r"####\s*([^\n]+)")
_ANSWER_IS_RE = re.compile(r"(?:answer\s*(?:is|:)|answer\s+is\s*:)\s*(.+?)(?=\.\s|\.?\s*$|\n)",
                           re.IGNORECASE | re.MULTILINE)
_DOLLAR_RE = re.compile(r"\$\$(.+?)\$\$|\$([^$]+)\$|\\\((.+?)\\\)|\\\[(.+?)\\\]", re.DOTALL)
_NUM_RE = re.compile(r"[-+\u2212]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:\s*/\s*\d+)?|[-+\u2212]?\.\d+")
_PROSE_WORD = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{2,}")
_HEDGE_RE = re.compile(r"(?<![a-zA-Z])or(?![a-zA-Z])|\\(?:lor|vee)(?![a-zA-Z])")  # "41 or 42", "41 \\lor 42"


@dataclass(frozen=True)
class Extraction:
    """A final answer found in a text (``answer``) and how (``how``: boxed, hash, ...)."""

    answer: str | None
    how: str


def matching_braces(text: str) -> dict[int, int]:
    """``{index of "{": index of its "}"}`` for every balanced pair, in one pass (linear even for
    thousands of nested, unclosed ``\\boxed{`` in a runaway output)."""
    pairs, opened = {}, []
    for i, ch in enumerate(text):
        if ch == "{":
            opened.append(i)
        elif ch == "}" and opened:
            pairs[opened.pop()] = i
    return pairs


def boxed_contents(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` / ``\\fbox{...}``, braces balanced, in order."""
    pairs = matching_braces(text)
    return [text[m.end(): pairs[m.end() - 1]].strip() for m in _BOXED_RE.finditer(text) if m.end() - 1 in pairs]


def _is_bare(text: str) -> bool:
    """A short one-line text with no prose is itself an answer (``12 inches``, ``no solution``)."""
    if "\n" in text.strip() or len(text) > 200:
        return False
    stripped = re.sub(r"\\(?:text|mbox|textbf|mathrm|begin|end|operatorname)\s*\{[^{}]*\}", "", text)
    limit = 1 if re.search(r"\d", stripped) else 2
    return len(_PROSE_WORD.findall(stripped)) <= limit and not text.rstrip().endswith(":")


def _strip_math(s: str) -> str:
    s = s.strip().rstrip(".").strip()
    m = _DOLLAR_RE.fullmatch(s)
    return next(g for g in m.groups() if g is not None).strip() if m else s


def _extract_uncached(text: str, cfg: MathConfig) -> Extraction:
    if cfg.boxed and ("\\boxed" in text or "\\fbox" in text) and (boxes := [b for b in boxed_contents(text) if b]):
        last = boxes[-1]
        for other in set(boxes[:-1]):
            if other != last and not compare(other, last, cfg)[0]:
                return Extraction(None, "hedged")
        return Extraction(last, "boxed")
    if cfg.hash and "####" in text and (hashes := _HASH_RE.findall(text)):
        if len({_strip_math(h) for h in hashes}) > 1:  # "#### 41" then "#### 42": two final answers
            return Extraction(None, "hedged")
        return Extraction(_strip_math(hashes[-1]), "hash")
    if cfg.answer_is and ("nswer" in text or "NSWER" in text) and (said := _ANSWER_IS_RE.findall(text)):
        return Extraction(_strip_math(said[-1]), "answer_is")
    if _is_bare(text):
        return Extraction(_strip_math(text), "bare") if text.strip() else Extraction(None, "missing")
    last_line = text.strip().rsplit("\n", 1)[-1]
    if cfg.dollars and (maths := _DOLLAR_RE.findall(last_line)):
        return Extraction(next(g for g in maths[-1] if g).strip(), "dollars")
    if cfg.last_number and (nums := _NUM_RE.findall(text)):
        if _HEDGE_RE.search(last_line) and len(set(_NUM_RE.findall(last_line))) > 1:
            return Extraction(None, "hedged")
        return Extraction(nums[-1], "last_number")
    return Extraction(None, "missing")


@lru_cache(maxsize=8192)
def _extract_cached(text: str, cfg: MathConfig) -> Extraction:
    return _extract_uncached(text, cfg)


def extract(text: Any, cfg: MathConfig = DEFAULT) -> Extraction:
    """The final answer of ``text`` with how it was found (see the module docstring)."""
    text = str(text)
    return _extract_cached(text, cfg) if len(text) <= 4096 else _extract_uncached(text, cfg)


def extract_answer(text: Any, cfg: MathConfig = DEFAULT) -> str | None:
    """The final answer of ``text`` as a string, or ``None`` (nothing found, or hedged)."""
    return extract(text, cfg).answer


def _hedged(pred: str, gold: str) -> bool:
    return bool(_HEDGE_RE.search(pred)) and not _HEDGE_RE.search(gold)


def _percent_equal(pred_raw: str, gold_raw: str, pn: str, gn: str) -> bool:
    """``50\\%`` also equals ``0.5`` (and the other way round)."""
    if "%" not in pred_raw + gold_raw:
        return False
    a, b = mathnorm.number(pn), mathnorm.number(gn)
    if a is None or b is None:
        return False
    return ("%" in pred_raw and a / 100 == b) or ("%" in gold_raw and a == b / 100)


def compare(pred: str, gold: str, cfg: MathConfig = DEFAULT) -> tuple[bool, str]:
    """Compare two extracted answers: ``(equal, path)``, path is fast, sympy, timeout or hedged."""
    pn, gn = mathnorm.normalize(pred), mathnorm.normalize(gold)
    if _hedged(pn, gn):
        return False, "hedged"
    verdict = mathnorm.fast_equal(pn, gn, cfg.rel_tol)
    if verdict is False and _percent_equal(pred, gold, pn, gn):
        verdict = True
    if verdict is None and (mathnorm.has_ambiguous_commas(pn) or mathnorm.has_ambiguous_commas(gn)):
        alt = mathnorm.fast_equal(mathnorm.canonical_thousands(pn, as_separators=True),
                                  mathnorm.canonical_thousands(gn, as_separators=True), cfg.rel_tol)
        verdict = True if alt else verdict
    if verdict is not None:
        return verdict, "fast"
    if not cfg.use_sympy:
        return False, "undecided"
    slow = sympy_equal(mathnorm.canonical_thousands(pn), mathnorm.canonical_thousands(gn),
                       timeout_s=cfg.timeout_s, float_rounding=cfg.float_rounding)
    return (slow is True), ("sympy" if slow is not None else "timeout")


def is_equivalent(pred: Any, gold: Any, cfg: MathConfig = DEFAULT) -> bool:
    """True when the final answers of ``pred`` and ``gold`` are mathematically the same."""
    p, g = extract(pred, cfg), extract(gold, cfg)
    if p.answer is None or g.answer is None:
        return False
    return compare(p.answer, g.answer, cfg)[0]


def score(response: str, task: Task, cfg: MathConfig = DEFAULT) -> RewardResult:
    """1.0 when the response's final answer equals ``task.answer`` (any gold form), else 0.0."""
    gold = extract(task.answer, cfg)
    if gold.answer is None:
        raise ValueError(f"task {task.id}: no answer found in gold label {task.answer!r}")
    pred = extract(response, cfg)
    if pred.answer is None:
        return RewardResult(0.0, {"correct": 0.0}, {"parsed": None, "how": pred.how, "gold": gold.answer})
    equal, path = compare(pred.answer, gold.answer, cfg)
    correct = float(equal)
    how = "hedged" if path == "hedged" else pred.how
    return RewardResult(correct, {"correct": correct},
                        {"parsed": pred.answer, "how": how, "path": path, "gold": gold.answer})
