"""Math answer verification: extract the final answer, decide equivalence, score.

``extract_answer(text)`` finds the final answer of a response or a gold label; both sides of
:func:`is_equivalent` are read the same way (:mod:`rewards.math_extract`), except that a gold label
cannot hedge (``$21, 16$ or $11$`` is its list of values) and a ``\\boxed{`` it never closes holds
the rest of it:

1. after a ``</think>``, only the text after it counts (the block itself when no answer follows);
2. the last ``\\boxed{}``/``\\fbox{}``, unless a "final answer is" / "Final Answer:" / "the answer
   is" / "answer:" statement comes after it (long solutions box intermediate results, then state
   the answer); a statement's answer is its ``$...$``, else its sentence when that is a bare answer,
   else what follows the sentence's last "is"/"=", else its last number;
3. GSM8K's ``#### N``; a text that is itself a bare answer (``7,425,000``, ``\\text{Evelyn}``,
   ``12 inches``);
4. the last valid math span or the last number outside math, whichever comes later.

Equivalence (:mod:`rewards.math_compare` and the modules it names) is decided in pure Python for
almost everything: normalisation, numbers, ranges, labels, relations, structures and
a randomised identity test that evaluates both expressions at fixed points (exact ``Fraction``
arithmetic where possible). Only what it cannot read goes to Math-Verify/sympy in the helper process
(:mod:`rewards._sympy_worker`) under a hard deadline (``timeout_s``, 0.8 s) that works from any
thread; a timeout is "not equal". The helper starts in the background at a process's first
comparison, so it is up before the first of those rare checks comes (the reward server's workers
start it before their first item).

Policies, each with its reason:

- **Tolerance.** Exact rationals compare exactly (``rel_tol`` only absorbs float noise). A written
  decimal equals an exact value (``0.67`` vs ``2/3``, ``9.42`` vs ``3\\pi``, ``2.236`` vs
  ``\\sqrt5``) when it is that value correctly rounded to the places written, and it must carry at
  least 2 decimal places or 3 significant digits (``0.3`` is not ``1/3``: too coarse to tell a
  right answer from a near one); against an irrational or periodic value a relative error below
  1e-5 is also accepted (truncations such as ``125.663`` for ``40\\pi`` are 6-digit answers). A
  gold decimal accepts a more precise prediction that rounds to it (``0.29`` vs ``0.2902...``), never
  a less precise one (``3.1416`` is not ``3.14159``): the gold fixes the precision asked for.
  Inside an expression the rule applies term by term (:mod:`rewards.math_rounding`): ``x + 1.414i``
  equals ``x + \\sqrt2 i`` and ``6.283r`` equals ``2\\pi r``, as the decimal stands where the other
  side has the constant it rounds; everything else must be the same expression.
- **Decimal commas.** ``d,ddd`` (1-3 digits, a comma, exactly 3 digits) is a thousands separator.
  Any other ``d,d`` (``3,75``, ``1000,99``, ``0,111``) reads as a European decimal comma only when
  the other side is a single number, so the gold says a decimal is wanted; otherwise it is a list.
  ``32, 349`` (a space after the comma) is always a list. LaTeX spacing inside numbers
  (``12,\\!500``, ``14{,}916``, ``12\\,500``) is a thousands separator.
- **Percent.** ``28\\%`` equals ``28`` and ``0.28`` (gold labels keep or drop the sign
  inconsistently); a prediction ``10\\%`` equals ``0.1`` and ``10``. ``0.28`` never equals ``28``.
- **Sets.** Bare comma lists, "and"-joined answers and ``\\{...\\}`` are unordered (the order of
  roots is not part of the answer); ``(a, b)`` tuples and intervals are ordered; a bare list against a
  tuple is compared in order. A gold of several boxed values is a set, and a prediction of several
  boxed values then counts as a set too. ``a \\pm b`` is the two values ``{a+b, a-b}``. ``;``
  separates items (``-12;-11;-10``) and, inside a bracket without commas, coordinates
  (``(0;-2;6)``); a top-level ``;`` groups more strongly than ``,`` (``p=5,q=2; p=7,q=2`` is two
  pairs). A value the prediction repeats counts once when the gold has no repeats (a set of
  tuples listed with one twice); a gold that repeats a value asks for it that many times.
- **Labels** (:mod:`rewards.math_labels`). ``(p,q)=(3,2)``, ``AB=4``, ``|AB|=1``,
  ``V_1:V_2=11:21``, ``\\frac{NO}{BO}=\\frac{1}{\\sqrt6}`` name what they give: they equal the bare
  value, on either side; the label never turns a wrong value right. A list whose items carry
  different labels (``a=1, b=2``, or ``(a,b)=(1,2)``) is a record: against a bare list its order
  counts (``2, 1`` is wrong for it), and two records with the same labels match label by label.
  A predicted record of one-letter names against a gold tuple is also read in alphabetical order
  (``y=3, x=5`` is ``(5, 3)``). A sum, a power or a number is no label (``x+z=1`` and ``7=11a+c``
  are equations).
- **Functions.** ``f(x) = x^2`` equals ``f(t) = t^2``, ``W(n)=1`` equals ``W(x)=1`` and
  ``a_n = 2n+1`` equals ``a_k = 2k+1`` (a bound variable's name does not matter), not
  ``f(t) = x^2`` (another function). A trailing quantifier
  (``for all x``, ``\\forall x \\in \\mathbb{R}``) is dropped; ``f \\equiv 0`` reads as ``f = 0``.
- **Hedges.** Against a gold with one value, several different boxed answers, several ``#### N``,
  or "or" between answers ("5 or 6", ``5 \\lor 6``) score 0: a hedge must never earn the reward.
  Against a gold of several values, "or" joins a list like "and". "Or" between conditions on one
  variable (``x < -1 or x > 2``) states a union and is no hedge. A response never gets credit for
  merely containing the answer.
- **Relations.** ``x = 4`` equals ``4`` (and a gold ``x = 4`` equals ``4``), but a gold equation
  such as ``7 = 11a+c`` never equals the bare ``11a+c``; equations are equal when one side minus the
  other is a constant multiple of the other equation's; inequalities when it is a positive multiple
  with the same direction.
- **Ranges** (:mod:`rewards.math_ranges`). A condition on one variable is read as the set it allows:
  ``-2 \\le x \\le 7`` is ``[-2, 7]``, ``1 \\le |z| \\le \\frac32`` is
  ``[-\\frac32,-1] \\cup [1,\\frac32]``, ``x \\ne 3`` and ``x < -1 or x > 2`` are unions,
  ``\\{x \\mid x > 2\\}`` is ``(2, \\infty)``; open and closed ends count. A gold condition accepts its
  set and any condition with the same set on the same variable. A gold written as a membership
  (``x \\in [-2, 7]``) is a statement about ``x`` and accepts the condition too. A predicted
  condition on ``|x|`` is read only against a gold that has one (it may be the problem's own
  condition copied back unsolved). **A bare gold
  interval (``[-2, 7]``) asks for interval notation and does not accept a condition** (Math-Verify's
  default; this project departs from it only for the membership form, where its own suite asserts
  both verdicts depending on an option).
- **Ratios and times.** ``a:b`` is compared term by term (``6:8`` is not ``3:4``, the form was
  asked for); ``h:mm`` with an optional ``a.m.``/``p.m.`` is a time of day (``20:34`` = ``8:34 PM``).
- **Units, currency, degrees** after a number are dropped; a short unit needs a space (``10 cm``
  is 10, ``10cm`` is not).
- **Shorthand TeX** (minerva's normaliser): ``\\fracab`` is ``\\frac{a}{b}``, ``\\fracabc`` is
  ``\\frac{a}{b}c``, ``\\sqrtx`` is ``\\sqrt{x}``, ``\\sqrt2`` is ``\\sqrt{2}``; a text answer ignores
  case and a leading article (``an ellipse`` = ``\\text{Ellipse}``).
- **Expressions** are equal when they agree at fixed pseudo-random points of their variables
  (exactly, in ``Fraction`` arithmetic, for rational functions; to 1e-9 relative otherwise, where an
  accidental agreement of different closed forms is far less likely than a grader bug). ``e`` is
  Euler's number and ``i`` the imaginary unit; a value beyond 1e308 never equals a finite one;
  two numbers side by side (``11 6/6``) are no answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from agentrl.types import RewardResult, Task
from rewards import math_compare, mathnorm
from rewards._sympy_worker import prestart, sympy_equal
from rewards.math_extract import Extraction, boxed_contents, find_answer, matching_braces

__all__ = ["MathConfig", "Extraction", "extract", "extract_answer", "is_equivalent", "score", "compare",
           "boxed_contents", "matching_braces"]


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
    """Read the last ``$...$`` span."""
    last_number: bool = True
    """As a last resort, read the last number in the text."""
    rel_tol: float = 1e-9
    """Relative tolerance between two exact numbers (absorbs float noise; see the rounding rule)."""
    float_rounding: int = 6
    """Decimal places Math-Verify rounds floats to on the slow path."""
    timeout_s: float = 0.8
    """Hard deadline for one slow-path (sympy) comparison; past it the answer is "not equal"."""
    use_sympy: bool = True
    """Allow the slow path; without it, undecided comparisons are False."""


DEFAULT = MathConfig()
MAX_SLOW_CHARS = 1000
"""Answers longer than this (after normalisation) never go to sympy."""
_helper_started = False


def _boxes_agree(a: str, b: str) -> bool:
    return math_compare.equal(a, b) is True


def _extract_uncached(text: str, cfg: MathConfig, gold: bool) -> Extraction:
    return find_answer(text, _boxes_agree, boxed=cfg.boxed, hash_=cfg.hash, answer_is=cfg.answer_is,
                       dollars=cfg.dollars, last_number=cfg.last_number, gold=gold)


@lru_cache(maxsize=8192)
def _extract_cached(text: str, cfg: MathConfig, gold: bool) -> Extraction:
    return _extract_uncached(text, cfg, gold)


def extract(text: Any, cfg: MathConfig = DEFAULT, *, gold: bool = False) -> Extraction:
    """The final answer of ``text`` with how it was found (see the module docstring); ``gold``:
    read a gold label (it cannot hedge; an unclosed ``\\boxed{`` holds the rest of it)."""
    text = str(text)
    return _extract_cached(text, cfg, gold) if len(text) <= 4096 else _extract_uncached(text, cfg, gold)


def extract_answer(text: Any, cfg: MathConfig = DEFAULT, *, gold: bool = False) -> str | None:
    """The final answer of ``text`` as a string, or ``None`` (nothing found, or hedged)."""
    return extract(text, cfg, gold=gold).answer


def _several(answer: str) -> bool:
    return math_compare.items_of(mathnorm.normalize(answer))[0] != "one"


def _gold_answer(gold: Extraction) -> str | None:
    return ", ".join(gold.values) if gold.values else gold.answer


def _pred_answer(pred: Extraction, gold_answer: str, gold: Extraction) -> str | None:
    """The prediction's answer; several boxed values count only against a gold of several values."""
    if pred.values and (gold.values or _several(gold_answer)):
        return ", ".join(pred.values)
    return pred.answer


def compare(pred: str, gold: str, cfg: MathConfig = DEFAULT) -> tuple[bool, str]:
    """Compare two extracted answers: ``(equal, path)``, path is fast, sympy, timeout or hedged."""
    global _helper_started
    if cfg.use_sympy and not _helper_started:
        _helper_started = True
        prestart()  # in the background: ready by the time one of the rare slow-path checks comes
    if math_compare.hedges(pred) and not math_compare.has_or(mathnorm.normalize(gold)) and not _several(gold):
        return False, "hedged"
    verdict = math_compare.equal(pred, gold, cfg.rel_tol)
    if verdict is not None:
        return verdict, "fast"
    if not cfg.use_sympy:
        return False, "undecided"
    pn, gn = (mathnorm.canonical_thousands(mathnorm.normalize(x)) for x in (pred, gold))
    if max(len(pn), len(gn)) > MAX_SLOW_CHARS:
        return False, "undecided"  # no final answer is that long: not worth sympy's time
    slow = sympy_equal(pn, gn, timeout_s=cfg.timeout_s, float_rounding=cfg.float_rounding)
    return (slow is True), ("sympy" if slow is not None else "timeout")


def is_equivalent(pred: Any, gold: Any, cfg: MathConfig = DEFAULT) -> bool:
    """True when the final answers of ``pred`` and ``gold`` are mathematically the same."""
    g = extract(gold, cfg, gold=True)
    gold_answer = _gold_answer(g)
    if gold_answer is None:
        return False
    p_answer = _pred_answer(extract(pred, cfg), gold_answer, g)
    return p_answer is not None and compare(p_answer, gold_answer, cfg)[0]


def score(response: str, task: Task, cfg: MathConfig = DEFAULT) -> RewardResult:
    """1.0 when the response's final answer equals ``task.answer`` (any gold form), else 0.0."""
    gold = extract(task.answer, cfg, gold=True)
    gold_answer = _gold_answer(gold)
    if gold_answer is None:
        raise ValueError(f"task {task.id}: no answer found in gold label {task.answer!r}")
    pred = extract(response, cfg)
    answer = _pred_answer(pred, gold_answer, gold)
    if answer is None:
        return RewardResult(0.0, {"correct": 0.0}, {"parsed": None, "how": pred.how, "gold": gold_answer})
    equal, path = compare(answer, gold_answer, cfg)
    correct = float(equal)
    how = "hedged" if path == "hedged" else pred.how
    return RewardResult(correct, {"correct": correct},
                        {"parsed": answer, "how": how, "path": path, "gold": gold_answer})
