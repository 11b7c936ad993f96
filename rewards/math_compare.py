"""The fast equivalence layers of :mod:`rewards.math` (pure Python, no sympy).

:func:`equal` compares two extracted answers and returns ``True``/``False``, or ``None`` when no
layer can decide (the caller then asks sympy in the helper process). The layers, in order: the same
text; relations (equations, inequalities, ``x = 4`` assignments, ``\\approx``); structures (matrices,
unions, sets, tuples, intervals, lists, ``\\pm``, ratios, times of day); plain numbers (exact, a
decimal comma, percent, the rounding rule); text answers; the expression evaluator of
:mod:`rewards.math_expr`. The policies themselves are documented in :mod:`rewards.math`.
"""

from __future__ import annotations

import re
from fractions import Fraction

from rewards import math_eval as me
from rewards import math_expr as mx
from rewards import mathnorm as mn
from rewards.math_relations import relation_verdict

_MATRIX = re.compile(r"^\(?\s*\\begin\{(?:pmatrix|bmatrix|matrix|array|smallmatrix)\}(?:\{[^{}]*\})?(.*?)"
                     r"\\end\{(?:pmatrix|bmatrix|matrix|array|smallmatrix)\}\s*\)?$", re.DOTALL)
_TIME = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?\s*(?:(a|p)\.?\s*m\.?)?$", re.IGNORECASE)
_AND = re.compile(r"\s*,?\s*(?<![a-zA-Z])and(?![a-zA-Z])\s*")
_OR = re.compile(r"\s*,?\s*(?<![a-zA-Z])or(?![a-zA-Z])\s*|\\(?:lor|vee)(?![a-zA-Z])")
_TEXT = re.compile(r"[A-Za-z][A-Za-z .'-]*")
MAX_DEPTH = 6
MAX_CHARS = 10_000


def has_or(s: str) -> bool:
    """Does an answer join alternatives with "or" (a hedge against a single gold)?"""
    return bool(_OR.search(s))


def equal(pred: str, gold: str, rel_tol: float = 1e-9, depth: int = 0) -> bool | None:
    """Compare two extracted answers (raw strings); ``None``: undecided (see the module docstring)."""
    p, g = mn.normalize(pred), mn.normalize(gold)
    if depth > MAX_DEPTH:
        return None
    if mn.key(p) == mn.key(g):
        return True
    if not p or not g or len(p) + len(g) > MAX_CHARS:
        return False  # (no final answer runs to thousands of characters: only the same text counts)
    if has_or(p) and not has_or(g) and len(items_of(g)[1]) <= 1:
        return False  # "5 or 6" against one gold: a hedge
    verdict = number_verdict(p, g, pred, gold, rel_tol)
    if verdict is not None:
        return verdict
    for layer in (relation_verdict, structure_verdict):
        verdict = layer(p, g, lambda a, b: equal(a, b, rel_tol, depth + 1))
        if verdict is not None:
            return verdict
    tp, tg = _TEXT.fullmatch(p) is not None, _TEXT.fullmatch(g) is not None
    if tp and tg and len(p) + len(g) > 2:
        return p.lower().replace(" ", "") == g.lower().replace(" ", "")
    if (tp and " " in p and mn.number(g) is not None) or (tg and " " in g and mn.number(p) is not None):
        return False  # words against a number
    return expression_verdict(p, g)


# ---- structures -------------------------------------------------------------------------------


def items_of(s: str) -> tuple[str, list[str]]:
    """``(kind, items)``: kind ``set`` (``\\{..\\}``), ``list`` (bare, "and"), a bracket pair
    (``()``, ``[)``...) or ``one``."""
    s = mn.canonical_thousands(s.strip())
    if s.startswith("\\{") and s.endswith("\\}"):
        inner = s[2:-2].strip()
        return "set", _expand_pm(mn.split_top(inner)) if inner else []
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]" and mn.encloses(s):
        parts = mn.split_top(s[1:-1])
        if len(parts) >= 2:
            return s[0] + s[-1], parts
    parts = [q for part in mn.split_top(s) for q in _split_words(part)]
    if len(parts) >= 2 and all(parts):
        return "list", _expand_pm(parts)
    pm = _expand_pm([s])
    return ("list", pm) if len(pm) == 2 else ("one", [s])


def _split_words(part: str) -> list[str]:
    pieces = [x for x in _AND.split(part) if x.strip()]
    return [y.strip() for x in pieces for y in _OR.split(x) if y.strip()]


def _expand_pm(items: list[str]) -> list[str]:
    out = []
    for item in items:
        a, sep, b = item.partition("\\pm")
        if sep and b.strip() and "\\pm" not in b:
            a, b = a.strip(), b.strip()
            out += [f"{a}+{b}", f"{a}-{b}"] if a else [b, f"-{b}"]
        else:
            out.append(item)
    return out


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
    if kp == kg == "()" or (kp == kg and kp not in ("set", "list")):
        return _match_ordered(ip, ig, eq)
    if {kp, kg} <= {"set", "list"}:
        return _match_unordered(ip, ig, eq)
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


def _is_terminating(v: Fraction) -> bool:
    d = v.denominator
    for f in (2, 5):
        while d % f == 0:
            d //= f
    return d == 1


def rounded_match(decimal: str, exact: Fraction | complex, exact_is_decimal: bool = False) -> bool:
    """The rounding rule: ``decimal`` is ``exact`` correctly rounded to its written places (at least
    2 places or 3 significant digits), or within 1e-5 relative of an irrational/periodic value."""
    lit = mn.decimal_literal(decimal)
    if lit is None:
        return False
    value, half = lit
    if isinstance(exact, complex):
        if abs(exact.imag) > 1e-12 * max(1.0, abs(exact.real)):
            return False
        diff = abs(float(value) - exact.real)
        return diff <= float(half) * (1 + 1e-9) or diff <= 1e-5 * abs(exact.real)
    if abs(value - exact) <= half:
        return True
    return not exact_is_decimal and not _is_terminating(exact) and abs(value - exact) <= Fraction(1, 100000) * abs(exact)


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


def _constant(s: str) -> Fraction | complex | None:
    try:
        node = mx.parse(s)
    except (mx.NotEvaluable, ValueError, ZeroDivisionError, RecursionError):
        return None
    if mx.variables(node):
        return None
    points = me.values_at((node,))
    value = points[0][0] if points else None
    return value if isinstance(value, (Fraction, complex)) else None


def expression_verdict(p: str, g: str) -> bool | None:
    """The evaluator, with the rounding rule when one side is a written decimal."""
    p, g = mn.canonical_thousands(p), mn.canonical_thousands(g)
    for dec, other in ((p, g), (g, p)):
        if mn.decimal_literal(dec) is not None and mn.number(other) is None:
            value = _constant(other)
            if value is not None:
                return rounded_match(dec, value)
    return me.same_value(p, g)
