"""The fast equivalence layers of :mod:`rewards.math` (pure Python, no sympy).

:func:`equal` compares two extracted answers and returns ``True``/``False``, or ``None`` when no
layer can decide (the caller then asks sympy in the helper process). The layers, in order: the same
text; plain numbers (exact, a decimal comma, percent, the rounding rule); ranges (conditions read
as the sets they allow, :mod:`rewards.math_ranges`); relations (equations, inequalities,
labelled values, ``\\approx``, :mod:`rewards.math_relations`); structures (matrices, unions, sets,
records, tuples, intervals, lists, ratios, times of day; items from :mod:`rewards.math_items`);
text answers; the expression evaluator of :mod:`rewards.math_expr` with the rounding rule applied
term by term (:mod:`rewards.math_rounding`). The policies themselves are documented in
:mod:`rewards.math`.
"""

from __future__ import annotations

import re
from fractions import Fraction

from rewards import math_eval as me
from rewards import mathnorm as mn
from rewards.math_items import has_or, items_of
from rewards.math_labels import labelled, record_labels
from rewards.math_ranges import as_set, range_verdict
from rewards.math_relations import relation_verdict
from rewards.math_rounding import rounded_match, rounded_terms

__all__ = ["equal", "hedges", "has_or", "items_of", "rounded_match"]

_MATRIX = re.compile(r"^\(?\s*\\begin\{(?:pmatrix|bmatrix|matrix|array|smallmatrix)\}(?:\{[^{}]*\})?(.*?)"
                     r"\\end\{(?:pmatrix|bmatrix|matrix|array|smallmatrix)\}\s*\)?$", re.DOTALL)
_TIME = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?\s*(?:(a|p)\.?\s*m\.?)?$", re.IGNORECASE)
_TEXT = re.compile(r"[A-Za-z][A-Za-z .'-]*")
_HALF_OPEN = re.compile(r"\[[^\[\]()]*,[^\[\]()]*\)|\([^\[\]()]*,[^\[\]()]*\]")
_INFINITY = {"\\infty": 1, "+\\infty": 1, "-\\infty": -1, "\\infty^+": 1}
_ARTICLE = re.compile(r"^(?:an?|the)\s+(?=\w)")
MAX_DEPTH = 6
MAX_CHARS = 10_000


def hedges(answer: str) -> bool:
    """Does an answer offer alternatives ("5 or 6", ``5 \\lor 6``)? An "or" between conditions on
    one variable (``x < -1 or x > 2``) states a union, not alternatives."""
    s = mn.normalize(answer)
    return has_or(s) and as_set(s) is None


def equal(pred: str, gold: str, rel_tol: float = 1e-9, depth: int = 0) -> bool | None:
    """Compare two extracted answers (raw strings); ``None``: undecided (see the module docstring)."""
    p, g = mn.normalize(pred), mn.normalize(gold)
    if depth > MAX_DEPTH:
        return None
    if mn.key(p) == mn.key(g):
        return True
    if not p or not g or len(p) + len(g) > MAX_CHARS:
        return False  # (no final answer runs to thousands of characters: only the same text counts)
    if hedges(p) and not has_or(g) and len(items_of(g)[1]) <= 1:
        return False  # "5 or 6" against one gold: a hedge
    ip, ig = _INFINITY.get(mn.key(p)), _INFINITY.get(mn.key(g))
    if ip is not None or ig is not None:
        return ip == ig  # an interval's end: only the same infinity equals it
    verdict = number_verdict(p, g, pred, gold, rel_tol)
    if verdict is not None:
        return verdict
    if (mn.number(p) is None) != (mn.number(g) is None) and (_HALF_OPEN.search(p) or _HALF_OPEN.search(g)):
        return False  # a half-open interval is a set, never a number (``-[0,1)`` against ``1``)

    def eq(a: str, b: str) -> bool | None:
        return equal(a, b, rel_tol, depth + 1)

    verdict = range_verdict(p, g, gold, eq)
    if verdict is not None:
        return verdict
    for layer in (relation_verdict, structure_verdict):
        verdict = layer(p, g, eq)
        if verdict is not None:
            return verdict
    tp, tg = _TEXT.fullmatch(p) is not None, _TEXT.fullmatch(g) is not None
    if tp and tg and len(p) + len(g) > 2:
        return _words(p) == _words(g)
    if (tp and " " in p and mn.number(g) is not None) or (tg and " " in g and mn.number(p) is not None):
        return False  # words against a number
    return expression_verdict(p, g)


def _words(s: str) -> str:
    """A text answer without case, spaces or a leading article (``an ellipse`` = ``Ellipse``)."""
    return _ARTICLE.sub("", s.strip().lower()).replace(" ", "")


# ---- structures -------------------------------------------------------------------------------


def _matrix_cells(s: str) -> list[list[str]] | None:
    m = _MATRIX.match(s)
    if not m or "\\begin" in m.group(1):
        return None
    rows = [r for r in re.split(r"\\\\", m.group(1))]
    rows = [r for r in rows if r.strip()]
    cells = [[c.strip() for c in r.split("&")] for r in rows]
    return cells if cells and len({len(r) for r in cells}) == 1 else None


def _cases_rows(s: str) -> list[str] | None:
    """The equations of a ``\\begin{cases}`` system (its order does not matter), or ``None``."""
    m = re.fullmatch(r"\\begin\{cases\}(.*)\\end\{cases\}", s.strip(), re.DOTALL)
    if not m or "\\begin" in m.group(1):
        return None
    return [r.replace("&", "").strip() for r in re.split(r"\\\\", m.group(1)) if r.strip()]


def _match_unordered(ps: list[str], gs: list[str], eq) -> bool | None:
    if len(ps) != len(gs):
        return False
    remaining, undecided = list(gs), False
    for item in ps:
        hit = None
        for cand in remaining:
            verdict = eq(item, cand)
            if verdict:
                hit = cand
                break
            undecided |= verdict is None
        if hit is None:
            return None if undecided else False
        remaining.remove(hit)
    return True


def _match_set(ps: list[str], gs: list[str], eq) -> bool | None:
    """Unordered, and a value the prediction repeats counts once when the gold has no repeats
    (``(1,2),(2,1),(1,2)`` is the set ``{(1,2),(2,1)}``); a gold that repeats a value asks for it
    that many times (roots with multiplicity)."""
    if len(ps) > len(gs) and len({mn.key(x) for x in gs}) == len(gs):
        spelled = list({mn.key(x): x for x in reversed(ps)}.values())[::-1]  # the same text once
        if len(spelled) > 2 * len(gs) + 4:
            return False  # far more distinct items than the gold has: no set of repeats
        kept: list[str] = []
        for item in spelled:
            if all(eq(item, k) is not True for k in kept):
                kept.append(item)
        ps = kept
    return _match_unordered(ps, gs, eq)


def _record_verdict(kp: str, ip: list[str], kg: str, ig: list[str], eq) -> bool | None:
    """A record (items with different labels, :mod:`rewards.math_labels`) on either side."""
    if len(ip) != len(ig):
        return False
    if kp == kg == "record":
        pk, gk = record_labels(ip), record_labels(ig)
        if set(pk) == set(gk):  # the same labels: matched label by label, in any order
            by_label = dict(zip(pk, ip))
            return _match_ordered([by_label[k] for k in gk], ig, eq)
    if kg == "record" or kg not in ("set", "list"):
        verdict = _match_ordered(ip, ig, eq)
        if verdict is True or kp != "record":
            return verdict
        labels = [labelled(x)[0].strip() for x in ip]  # y = 3, x = 5 against (5, 3): by name
        if all(len(x) == 1 for x in labels) and labels != sorted(labels):
            return _match_ordered([x for _, x in sorted(zip(labels, ip))], ig, eq)
        return verdict
    return _match_set(ip, ig, eq)


def _match_ordered(ps: list[str], gs: list[str], eq) -> bool | None:
    if len(ps) != len(gs):
        return False
    verdicts = [eq(a, b) for a, b in zip(ps, gs)]
    return False if False in verdicts else (True if all(verdicts) else None)


def structure_verdict(p: str, g: str, eq) -> bool | None:
    """Matrices, unions, sets, tuples, intervals, lists, ratios and times (``None``: not one)."""
    cp, cg = _cases_rows(p), _cases_rows(g)
    if cp is not None or cg is not None:
        return _match_unordered(cp, cg, eq) if cp is not None and cg is not None else False
    mp, mg = _matrix_cells(p), _matrix_cells(g)
    if mp is not None or mg is not None:
        return _matrix_verdict(p, g, mp, mg, eq)
    if "\\cup" in p or "\\cup" in g:
        return _match_unordered(mn.split_top(p, "\\cup"), mn.split_top(g, "\\cup"), eq)
    (kp, ip), (kg, ig) = items_of(p), items_of(g)
    if kp == "one" and kg == "one":
        return _colon_verdict(p, g, eq)
    if kp == "one" or kg == "one":
        return False  # a list never equals a single answer
    if "record" in (kp, kg):
        return _record_verdict(kp, ip, kg, ig, eq)
    if kp == kg == "()" or (kp == kg and kp not in ("set", "list")):
        return _match_ordered(ip, ig, eq)
    if {kp, kg} <= {"set", "list"}:
        return _match_set(ip, ig, eq)
    if {kp, kg} == {"list", "()"}:
        return _match_ordered(ip, ig, eq)
    return False


def _matrix_verdict(p: str, g: str, mp, mg, eq) -> bool | None:
    if mp is not None and mg is not None:
        if len(mp) != len(mg) or len(mp[0]) != len(mg[0]):
            return False
        return _match_ordered([c for r in mp for c in r], [c for r in mg for c in r], eq)
    cells, other = (mp, g) if mp is not None else (mg, p)
    kind, items = items_of(other)
    if kind in ("()", "[]", "list") and (len(cells) == 1 or len(cells[0]) == 1):
        flat = [c for r in cells for c in r]
        return _match_ordered(flat, items, eq) if mp is not None else _match_ordered(items, flat, eq)
    return None  # e.g. a matrix sum: the evaluator decides


def _time_minutes(s: str) -> int | None:
    m = _TIME.match(s.replace("\\text", "").replace("{", "").replace("}", "").strip())
    if not m or int(m.group(2)) > 59:
        return None
    hours = int(m.group(1))
    if m.group(4):
        if hours > 12:
            return None
        hours = hours % 12 + (12 if m.group(4).lower() == "p" else 0)
    return hours * 60 + int(m.group(2))


def _colon_verdict(p: str, g: str, eq) -> bool | None:
    tp, tg = _time_minutes(p), _time_minutes(g)
    if tp is not None and tg is not None:
        return tp == tg
    rp, rg = mn.split_top(p, ":"), mn.split_top(g, ":")
    if len(rp) == 1 and len(rg) == 1:
        return None
    if len(rp) != len(rg) or not all(rp + rg):
        return False
    return _match_ordered(rp, rg, eq)  # a ratio is compared term by term: 6:8 is not 3:4


# ---- numbers ----------------------------------------------------------------------------------


def _numbers_equal(a: Fraction, b: Fraction, rel_tol: float) -> bool:
    return a == b or (rel_tol > 0 and abs(a - b) <= rel_tol * max(abs(a), abs(b)))


def number_verdict(p: str, g: str, p_raw: str, g_raw: str, rel_tol: float) -> bool | None:
    """Plain numbers: exact, a decimal comma, percent, the rounding rule (``None``: not numbers)."""
    a, b = mn.number(p), mn.number(g)
    if a is None and b is not None:
        a = mn.decimal_comma(p)
    elif b is None and a is not None:
        b = mn.decimal_comma(g)
    if a is None or b is None:
        return None
    candidates = [b]
    if mn.has_percent(g_raw):
        candidates.append(b / 100)
    if mn.has_percent(p_raw):
        a_pct = a / 100
        if any(_numbers_equal(a_pct, c, rel_tol) for c in candidates):
            return True
    if any(_numbers_equal(a, c, rel_tol) for c in candidates):
        return True
    p_dec, g_dec = mn.decimal_literal(p), mn.decimal_literal(g)
    if p_dec is not None and g_dec is None:
        return rounded_match(p, b, exact_is_decimal="." in g)
    if g_dec is not None and (p_dec is None or p_dec[1] < g_dec[1]):
        return rounded_match(g, a, exact_is_decimal="." in p and p_dec is None)
    return False


# ---- expressions ------------------------------------------------------------------------------


def expression_verdict(p: str, g: str) -> bool | None:
    """The evaluator, with the rounding rule when one side is a written decimal or holds one."""
    p, g = mn.canonical_thousands(p), mn.canonical_thousands(g)
    for dec, other in ((p, g), (g, p)):
        if mn.decimal_literal(dec) is not None and mn.number(other) is None:
            value = me.constant(other)
            if value is not None:
                return rounded_match(dec, value)
    verdict = me.same_value(p, g)
    if verdict is not True and "." in p + g and rounded_terms(p, g):
        return True
    return verdict
