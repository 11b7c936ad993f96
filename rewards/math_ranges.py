"""Ranges: a condition on one variable read as the set of values it allows (fast layer).

:func:`as_set` turns a one-variable condition into intervals in interval notation:

- ``x > 3`` -> ``(3,\\infty)``; ``-2 \\le x < 7`` -> ``[-2,7)``; ``x \\neq 3`` -> ``(-\\infty,3) \\cup (3,\\infty)``;
- ``1 \\le |z| \\le \\frac32`` -> ``[-\\frac32,-1] \\cup [1,\\frac32]``; ``|t| < 3`` -> ``(-3,3)``;
  ``|t| \\ge 1`` -> ``(-\\infty,-1] \\cup [1,\\infty)`` (bounds of ``|v|`` must be numbers);
- alternatives joined by "or" / ``\\lor`` / ``\\cup``: the union of theirs (same variable);
- a set-builder ``\\{x \\mid x > 2\\}``: the set of its condition.

:func:`range_verdict` (a layer of :func:`rewards.math_compare.equal`) compares through those sets:

- a gold condition accepts the set it allows (``-2 \\le x \\le 7`` vs ``[-2, 7]``), and an
  equivalent condition on the same variable (``x < -1 or x > 2`` vs ``x \\notin [-1, 2]``-style
  unions);
- a gold written as a membership (``x \\in [-2, 7]``) also accepts a condition on that variable
  (``-2 \\le x \\le 7``): the gold itself is a statement about ``x``;
- a gold written as a bare interval (``[-2, 7]``) asks for interval notation: a condition does
  not match it (:mod:`rewards.math_relations`).

Open and closed ends always count (``(1, 4]`` is not ``[1, 4]``). A prediction's condition on
``|v|`` is read only against a gold that has one too: ``|x| \\le 7`` may be the problem's own
condition copied back unsolved, so it never matches a gold ``x \\in [-7, 7]`` or ``-7 \\le x \\le 7``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction

from rewards import math_eval as me
from rewards import mathnorm as mn
from rewards.math_items import has_or, split_or
from rewards.math_labels import is_simple_lhs

_RELS = ("\\leq", "\\geq", "\\neq", "<", ">")
_BUILDER = re.compile(r"\\\{\s*([a-zA-Z])\s*(?:\\mid|\||:)\s*(.+?)\s*\\\}")
_FLIP = {"<": ">", ">": "<", "\\leq": "\\geq", "\\geq": "\\leq", "\\neq": "\\neq"}
Eq = Callable[[str, str], "bool | None"]


def split_inequality(s: str) -> tuple[list[str], list[str]]:
    """Top-level members and signs of an inequality chain (``=`` is not split here)."""
    return split_top_level(s, _RELS)


def split_top_level(s: str, rels: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Members of ``s`` between the signs ``rels`` found outside brackets, and those signs (in order;
    a longer sign must come before its prefix; ``\\leq`` is not found inside ``\\leqslant``)."""
    parts, ops, depth, start, i = [], [], 0, 0, 0
    while i < len(s):
        ch = s[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            op = next((r for r in rels if s.startswith(r, i) and not (r[0] == "\\" and s[i + len(r):i + len(r) + 1].isalpha())), None)
            if op is not None:
                parts.append(s[start:i].strip())
                ops.append(op)
                i += len(op)
                start = i
                continue
        i += 1
    parts.append(s[start:].strip())
    return parts, ops


def _neg(c: str) -> str:
    c = c.strip()
    if c.startswith("-") and mn.number(c[1:]) is not None:
        return c[1:]
    return f"-{c}" if mn.number(c) is not None or c.startswith("\\frac") or c.isalnum() else f"-({c})"


def _half_line(op: str, c: str) -> str:
    """The values ``v op c`` allows (``v`` on the left)."""
    return {"<": f"(-\\infty,{c})", "\\leq": f"(-\\infty,{c}]", ">": f"({c},\\infty)", "\\geq": f"[{c},\\infty)",
            "\\neq": f"(-\\infty,{c}) \\cup ({c},\\infty)"}[op]


def _abs_var(s: str) -> str | None:
    s = s.strip()
    if len(s) > 2 and s[0] == "|" and s[-1] == "|" and is_simple_lhs(s[1:-1]):
        return s[1:-1].strip()
    return None


def _real(c: str) -> Fraction | float | None:
    v = me.constant(c)
    if isinstance(v, complex):
        return v.real if abs(v.imag) < 1e-12 else None
    return v


def _abs_set(op: str, c: str) -> str | None:
    """The values ``|v| op c`` allows, for a number ``c``."""
    v = _real(c)
    if v is None or v < 0 or (v == 0 and op in ("<", "\\leq")):
        return None
    if op in ("<", "\\leq"):
        lo, hi = ("(", ")") if op == "<" else ("[", "]")
        return f"{lo}{_neg(c)},{c}{hi}"
    if op == "\\neq":
        return f"(-\\infty,{_neg(c)}) \\cup ({_neg(c)},{c}) \\cup ({c},\\infty)" if v > 0 else _half_line("\\neq", c)
    below = _half_line("<" if op == ">" else "\\leq", _neg(c))
    return f"{below} \\cup {_half_line(op, c)}"


def _abs_band(lo: str, o1: str, o2: str, hi: str) -> str | None:
    """The values ``lo o1 |v| o2 hi`` allows (``o1``, ``o2`` are ``<`` or ``\\leq``)."""
    a, b = _real(lo), _real(hi)
    if a is None or b is None or b <= 0 or a >= b:
        return None
    close = "]" if o2 == "\\leq" else ")"
    if a < 0 or (a == 0 and o1 == "\\leq"):
        return f"{'[' if close == ']' else '('}{_neg(hi)},{hi}{close}"
    inner_l, inner_r = ("[", "]") if o1 == "\\leq" else ("(", ")")
    outer_l = "[" if close == "]" else "("
    return f"{outer_l}{_neg(hi)},{_neg(lo)}{inner_r} \\cup {inner_l}{lo},{hi}{close}"


def _one_condition(s: str, bars: bool) -> tuple[str, str] | None:
    parts, ops = split_inequality(s)
    if len(parts) == 2:
        for var_at, other in ((0, 1), (1, 0)):
            op = ops[0] if var_at == 0 else _FLIP[ops[0]]
            if is_simple_lhs(parts[var_at]) and not is_simple_lhs(parts[other]) and _abs_var(parts[other]) is None:
                return parts[var_at], _half_line(op, parts[other])
            if bars and (v := _abs_var(parts[var_at])) is not None and (found := _abs_set(op, parts[other])) is not None:
                return v, found
        return None
    if len(parts) != 3 or "\\neq" in ops:
        return None
    if set(ops) <= {">", "\\geq"}:
        parts, ops = parts[::-1], [_FLIP[o] for o in ops[::-1]]
    if not set(ops) <= {"<", "\\leq"}:
        return None
    lo, mid, hi = parts
    if bars and (v := _abs_var(mid)) is not None:
        band = _abs_band(lo, ops[0], ops[1], hi)
        return (v, band) if band is not None else None
    if not is_simple_lhs(mid) or is_simple_lhs(lo) or is_simple_lhs(hi):
        return None
    return mid, ("[" if ops[0] == "\\leq" else "(") + f"{lo},{hi}" + ("]" if ops[1] == "\\leq" else ")")


def as_set(s: str, bars: bool = True) -> tuple[str, str] | None:
    """``(variable, intervals)`` of a one-variable condition (normalised text), else ``None``;
    a set-builder ``\\{x \\mid x > 2\\}`` is its condition; ``bars=False`` leaves conditions on
    ``|v|`` unread."""
    if (m := _BUILDER.fullmatch(s.strip())) is not None:
        found = as_set(m.group(2), bars)
        return found if found is not None and found[0] == m.group(1) else None
    alternatives = [a for part in split_or(s) for a in mn.split_top(part, "\\cup")] if (has_or(s) or "\\cup" in s) else [s]
    found = [_one_condition(a, bars) for a in alternatives]
    if not found or any(f is None for f in found) or len({f[0] for f in found}) != 1:
        return None
    return found[0][0], " \\cup ".join(f[1] for f in found)


def is_condition(s: str) -> bool:
    """Does a normalised answer state a condition (an inequality, a set-builder) rather than a value?"""
    return len(split_inequality(s)[1]) > 0 or _BUILDER.fullmatch(s.strip()) is not None


def range_verdict(p: str, g: str, g_raw: str, eq: Eq) -> bool | None:
    """Compare through the sets conditions allow (``None``: no condition involved, or two
    conditions this layer cannot relate; see the module docstring)."""
    if not (is_condition(p) or is_condition(g)):
        return None
    p_set, g_set = as_set(p, bars="|" in g), as_set(g)
    if g_set is not None:
        if p_set is not None:
            return eq(p_set[1], g_set[1]) if p_set[0] == g_set[0] else None
        return None if is_condition(p) else eq(p, g_set[1])
    if p_set is None or is_condition(g):
        return None
    if _BUILDER.fullmatch(p.strip()) is not None:
        return eq(p_set[1], g)  # a set-builder is set notation: {x | x > 2} is (2, \infty)
    var = mn.membership(g_raw)
    if var is not None:
        return eq(p_set[1], g) if p_set[0] == var else False
    return None
