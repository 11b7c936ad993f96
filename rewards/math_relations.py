"""Relations in final answers: equations, inequalities, labelled values, ``\\approx`` (fast layer).

:func:`relation_verdict` is one layer of :func:`rewards.math_compare.equal`. Rules (the reasons are
in :mod:`rewards.math`'s docstring):

- ``\\approx``: ``x = 1/3 \\approx 0.33`` keeps ``x = 1/3``; ``x \\approx 11`` keeps ``11``;
- a chain ``x = 5+5+1 = 11`` is read as its first and last members, ``x = 11``;
- a prediction ``lhs = v`` against a gold without a relation is compared by ``v``; a gold
  ``label = v`` (:mod:`rewards.math_labels`: ``x = 4``, ``(p,q) = (3,2)``, ``|AB| = 1``,
  ``V_1:V_2 = 11:21``) against a prediction without one by ``v``, but a gold equation
  (``7 = 11a+c``, ``x + z = 1``) never equals a bare expression;
- two equations are equal when ``lhs - rhs`` of one is a non-zero constant multiple of the other's
  (``3x-y+2=0`` vs ``y=3x+2``); two assignments to plain names, or to the same label, compare their
  right sides; two definitions of a function compare with their bound variables renamed
  (``f(x) = x^2`` equals ``f(t) = t^2``);
- inequalities are equal when each ``lhs - rhs`` is a positive multiple of the other's with the
  same direction (``x < 1`` vs ``-x > -1``); a gold inequality against a set is the business of
  :mod:`rewards.math_ranges`, and a gold interval asks for an interval: a predicted inequality does
  not match it.
"""

from __future__ import annotations

from collections.abc import Callable

from rewards import math_eval as me
from rewards import math_expr as mx
from rewards import mathnorm as mn
from rewards.math_items import several
from rewards.math_labels import bound_variables, is_label, is_simple_lhs, label_key, labelled, rename_bound
from rewards.math_ranges import as_set, split_top_level

_RELS = ("\\approx", "\\leq", "\\geq", "\\neq", "=", "<", ">")
_FLIP = {">": "<", "\\geq": "\\leq"}
Eq = Callable[[str, str], "bool | None"]


def split_relations(s: str) -> tuple[list[str], list[str]]:
    """Top-level members and relation signs: ``a < b \\leq c`` -> ``([a, b, c], [<, \\leq])``."""
    return split_top_level(s, _RELS)


def _drop_approx(s: str) -> str:
    if "\\approx" not in s:
        return s
    parts = mn.split_top(s, "\\approx")
    return parts[0] if "=" in parts[0] else parts[-1]


def relation_verdict(p: str, g: str, eq: Eq) -> bool | None:
    """Compare answers when either holds a relation (``None``: neither does)."""
    if several(p) or several(g):
        return None  # a list (of assignments): the structure layer compares item by item
    had_approx = "\\approx" in p + g
    p, g = _drop_approx(p), _drop_approx(g)
    (pp, po), (gp, go) = split_relations(p), split_relations(g)
    if not po and not go:
        return eq(p, g) if had_approx else None
    if any(not x for x in pp + gp):
        return False
    p_eq, g_eq = bool(po) and set(po) <= {"="}, bool(go) and set(go) <= {"="}
    if po and p_eq and not go:
        return _value_against(pp[0], pp[-1], g, lambda value, bare: eq(value, bare))
    if go and g_eq and not po:
        if len(gp) > 2:
            return eq(p, gp[-1])
        if not labelled(f"{gp[0]}={gp[-1]}"):
            return False
        return _value_against(gp[0], gp[-1], p, lambda value, bare: eq(bare, value))
    if p_eq and g_eq:
        return _equations(pp[0], pp[-1], gp[0], gp[-1], eq)
    if p_eq or g_eq:
        return False
    if not po:
        found = as_set(g)
        return eq(p, found[1]) if found is not None else False
    if not go:
        return False  # a gold interval asks for an interval, not an inequality
    return _inequalities(pp, po, gp, go)


def _value_against(label: str, value: str, bare: str, eq: Eq) -> bool | None:
    """``label = value`` against an answer without a relation: the values decide (``eq(value,
    bare)`` keeps the caller's prediction/gold order); a function label's bound variable may carry
    another name in the bare answer (``f(n) = n^2`` vs ``x^2``)."""
    verdict = eq(value, bare)
    bound = bound_variables(label)
    if verdict is True or bound is None or len(bound) != 1:
        return verdict
    try:
        names = sorted(mx.variables(mx.parse(bare)))
    except (mx.NotEvaluable, ValueError, ZeroDivisionError, RecursionError):
        return verdict
    if len(names) != 1 or names == bound:
        return verdict
    renamed = rename_bound(bare, names, value, bound)
    return True if renamed else verdict


def _equations(pl: str, pr: str, gl: str, gr: str, eq: Eq) -> bool | None:
    pb, gb = bound_variables(pl), bound_variables(gl)
    if pb is not None and gb is not None and pb != gb and label_key(pl) == label_key(gl):
        renamed = rename_bound(pr, pb, gr, gb)  # f(t) = t^2 against f(x) = x^2
        if renamed is not None:
            return renamed
    if mn.key(pl) == mn.key(gl) and eq(pr, gr):
        return True  # the same left side: the right sides decide (with the rounding rule)
    same_label = is_label(pl) and label_key(pl) == label_key(gl)
    if (is_simple_lhs(pl) and is_simple_lhs(gl)) or same_label:
        verdict = eq(pr, gr)
        if verdict is not None or mn.key(pl) == mn.key(gl):
            return verdict
    try:
        dp = ("sub", mx.parse(pl), mx.parse(pr))
        dg = ("sub", mx.parse(gl), mx.parse(gr))
    except (mx.NotEvaluable, ValueError, ZeroDivisionError, RecursionError):
        return None
    return _proportional(dp, dg, positive=False)


def _proportional(a: mx.Node, b: mx.Node, positive: bool) -> bool | None:
    """Is ``a`` a constant non-zero (``positive``: positive) multiple of ``b`` at the sample points?"""
    if not (mx.variables(a) | mx.variables(b)):
        return None
    points = me.values_at((a, b), trials=4)
    if len(points) < 2:
        return None
    ratios = []
    for va, vb in points:
        if isinstance(va, mx.Matrix) or isinstance(vb, mx.Matrix) or me.close(vb, 0):
            return None
        ratios.append(complex(va) / complex(vb))
    first = ratios[0]
    if me.close(first, 0) or not all(me.close(r, first, 1e-8) for r in ratios):
        return False
    return not positive or (abs(first.imag) < 1e-9 and first.real > 0)


def _pairs(parts: list[str], ops: list[str]) -> list[tuple[mx.Node, str]] | None:
    out = []
    try:
        for left, op, right in zip(parts, ops, parts[1:]):
            a, b = mx.parse(left), mx.parse(right)
            out.append((("sub", b, a), _FLIP[op]) if op in _FLIP else (("sub", a, b), op))
    except (mx.NotEvaluable, ValueError, ZeroDivisionError, RecursionError):
        return None
    return out


def _inequalities(pp: list[str], po: list[str], gp: list[str], go: list[str]) -> bool | None:
    a, b = _pairs(pp, po), _pairs(gp, go)
    if a is None or b is None:
        return None
    if len(a) != len(b):
        return False
    for order in (b, b[::-1]):
        verdicts = [oa == ob and _proportional(na, nb, positive=oa != "\\neq") for (na, oa), (nb, ob) in zip(a, order)]
        if all(v is True for v in verdicts):
            return True
        if None in verdicts:
            return None
    return False
