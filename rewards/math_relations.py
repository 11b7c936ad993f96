"""Relations in final answers: equations, inequalities, assignments, ``\\approx`` (fast layer).

:func:`relation_verdict` is one layer of :func:`rewards.math_compare.equal`. Rules (the reasons are
in :mod:`rewards.math`'s docstring):

- ``\\approx``: ``x = 1/3 \\approx 0.33`` keeps ``x = 1/3``; ``x \\approx 11`` keeps ``11``;
- a chain ``x = 5+5+1 = 11`` is read as its first and last members, ``x = 11``;
- a prediction ``lhs = v`` against a gold without a relation is compared by ``v``; a gold
  ``x = v`` against a prediction without one by ``v``, but a gold equation (``7 = 11a+c``)
  never equals a bare expression;
- two equations are equal when ``lhs - rhs`` of one is a non-zero constant multiple of the other's
  (``3x-y+2=0`` vs ``y=3x+2``); two assignments to the same name compare their right sides;
- inequalities are equal when each ``lhs - rhs`` is a positive multiple of the other's with the
  same direction (``x < 1`` vs ``-x > -1``); a gold inequality in one variable also equals the
  interval it describes (``-2 \\le x \\le 7`` vs ``[-2, 7]``), but a gold interval asks for an
  interval: a predicted inequality does not match it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rewards import math_eval as me
from rewards import math_expr as mx
from rewards import mathnorm as mn

_RELS = ("\\approx", "\\leq", "\\geq", "\\neq", "=", "<", ">")
_SIMPLE_LHS = re.compile(r"^(?:[a-zA-Z]|\\[a-zA-Z]+)(?:_\{?\w+\}?)?(?:\([a-zA-Z]\))?'*$")
_FLIP = {">": "<", "\\geq": "\\leq"}
Eq = Callable[[str, str], "bool | None"]


def split_relations(s: str) -> tuple[list[str], list[str]]:
    """Top-level members and relation signs: ``a < b \\leq c`` -> ``([a, b, c], [<, \\leq])``."""
    parts, ops, depth, start, i = [], [], 0, 0, 0
    while i < len(s):
        ch = s[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            op = next((r for r in _RELS if s.startswith(r, i) and not (r[0] == "\\" and s[i + len(r):i + len(r) + 1].isalpha())), None)
            if op is not None:
                parts.append(s[start:i].strip())
                ops.append(op)
                i += len(op)
                start = i
                continue
        i += 1
    parts.append(s[start:].strip())
    return parts, ops


def _drop_approx(s: str) -> str:
    if "\\approx" not in s:
        return s
    parts = mn.split_top(s, "\\approx")
    return parts[0] if "=" in parts[0] else parts[-1]


def is_simple_lhs(s: str) -> bool:
    """``x``, ``f(x)``, ``x_1``, ``\\theta``: a name that an answer assigns to (not ``\\sin(x)``)."""
    m = _SIMPLE_LHS.match(s.strip())
    return bool(m) and not (s.startswith("\\") and re.match(r"\\([a-zA-Z]+)", s).group(1) in mx.FUNCS)


def relation_verdict(p: str, g: str, eq: Eq) -> bool | None:
    """Compare answers when either holds a relation (``None``: neither does)."""
    if len(mn.split_top(p)) > 1 or len(mn.split_top(g)) > 1:
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
        return eq(pp[-1], g)
    if go and g_eq and not po:
        return eq(p, gp[-1]) if len(gp) > 2 or is_simple_lhs(gp[0]) else False
    if p_eq and g_eq:
        return _equations(pp[0], pp[-1], gp[0], gp[-1], eq)
    if p_eq or g_eq:
        return False
    if not po:
        interval = to_interval(gp, go)
        return eq(p, interval) if interval is not None else False
    if not go:
        return False  # a gold interval asks for an interval, not an inequality
    return _inequalities(pp, po, gp, go)


def _equations(pl: str, pr: str, gl: str, gr: str, eq: Eq) -> bool | None:
    if mn.key(pl) == mn.key(gl) and eq(pr, gr):
        return True  # the same left side: the right sides decide (with the rounding rule)
    if is_simple_lhs(pl) and is_simple_lhs(gl):
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


def to_interval(parts: list[str], ops: list[str]) -> str | None:
    """The interval a one-variable inequality describes (``x > 3`` -> ``(3,\\infty)``), or ``None``."""
    if len(parts) == 2 and "\\neq" not in ops:
        var_left = is_simple_lhs(parts[0]) and not is_simple_lhs(parts[1])
        if not var_left and not is_simple_lhs(parts[1]):
            return None
        op = ops[0] if var_left else {"<": ">", ">": "<", "\\leq": "\\geq", "\\geq": "\\leq"}[ops[0]]
        c = parts[1] if var_left else parts[0]
        return {"<": f"(-\\infty,{c})", "\\leq": f"(-\\infty,{c}]", ">": f"({c},\\infty)",
                "\\geq": f"[{c},\\infty)"}[op]
    if len(parts) == 3 and is_simple_lhs(parts[1]) and "\\neq" not in ops:
        if set(ops) <= {"<", "\\leq"}:
            lo, hi, (o1, o2) = parts[0], parts[2], ops
        elif set(ops) <= {">", "\\geq"}:
            lo, hi, (o2, o1) = parts[2], parts[0], ops
        else:
            return None
        return ("[" if o1 == "\\leq" or o1 == "\\geq" else "(") + f"{lo},{hi}" + ("]" if o2 in ("\\leq", "\\geq") else ")")
    return None
