"""The rounding rule of :mod:`rewards.math`: when a written decimal equals an exact value.

:func:`rounded_match` is the rule for one number: ``decimal`` equals ``exact`` when it is that
value correctly rounded to its written places (and it carries at least 2 places or 3 significant
digits), or lies within 1e-5 relative of an irrational/periodic value.

:func:`rounded_terms` applies the same rule inside an expression, term by term: ``x + 1.414i``
equals ``x + \\sqrt2 i`` because both have the same shape and the decimal ``1.414`` stands where the
other side has the constant ``\\sqrt2``, which it rounds. Everything else in the two expressions
must be the same (``+`` and ``\\cdot`` may swap their operands, and ``u / c`` with a constant ``c``
reads as ``(1/c) \\cdot u``, so ``0.333x`` equals ``\\frac{x}{3}``): a rounded coefficient never
hides a different variable or operation (``y + 1.414i`` is not ``x + \\sqrt2 i``), and a coarse
decimal (``1.4``) is compared exactly.
"""

from __future__ import annotations

import re
from fractions import Fraction

from rewards import math_eval as me
from rewards import math_expr as mx
from rewards import mathnorm as mn

_DECIMAL = re.compile(r"(?<![\d.])\d*\.\d+(?![\d.])")
_COMMUTATIVE = ("add", "mul")
MAX_NODES = 200


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
    return _within(lit, exact, exact_is_decimal)


def _within(lit: tuple[Fraction, Fraction], exact: Fraction | complex, exact_is_decimal: bool = False) -> bool:
    value, half = lit
    if isinstance(exact, complex):
        if abs(exact.imag) > 1e-12 * max(1.0, abs(exact.real)):
            return False
        diff = abs(float(value) - exact.real)
        return diff <= float(half) * (1 + 1e-9) or diff <= 1e-5 * abs(exact.real)
    if abs(value - exact) <= half:
        return True
    return not exact_is_decimal and not _is_terminating(exact) and abs(value - exact) <= Fraction(1, 100000) * abs(exact)


def _decimals(s: str) -> dict[Fraction, tuple[Fraction, Fraction]]:
    """Each decimal written in ``s`` precisely enough for the rule, by its value."""
    out = {}
    for m in _DECIMAL.finditer(s):
        lit = mn.decimal_literal(m.group(0))
        if lit is not None:
            out[lit[0]] = lit
    return out


def _size(node: mx.Node) -> int:
    return 1 + sum(_size(c) for c in node[1:] if isinstance(c, tuple) and c and isinstance(c[0], str))


def _leaf_rounds(leaf: mx.Node, other: mx.Node, decimals: dict) -> bool:
    if leaf[0] != "num" or leaf[1] not in decimals or mx.variables(other):
        return False
    points = me.values_at((other,))
    value = points[0][0] if points else None
    return isinstance(value, (Fraction, complex)) and _within(decimals[leaf[1]], value)


def _as_product(node: mx.Node) -> mx.Node:
    """``u / c`` with a constant ``c`` as ``(1/c) \\cdot u`` (``\\frac{x}{3}`` against ``0.333x``)."""
    if node[0] == "div" and not mx.variables(node[2]) and mx.variables(node[1]):
        return ("mul", ("div", ("num", Fraction(1)), node[2]), node[1])
    return node


def _align(a: mx.Node, b: mx.Node, decimals: dict) -> bool:
    if a == b:
        return True
    if (a[0] == "div") != (b[0] == "div"):
        a, b = _as_product(a), _as_product(b)
    if _leaf_rounds(a, b, decimals) or _leaf_rounds(b, a, decimals):
        return True
    if a[0] != b[0] or len(a) != len(b) or a[0] in ("num", "var", "const", "matrix"):
        return False
    if a[0] in _COMMUTATIVE and _align(a[1], b[2], decimals) and _align(a[2], b[1], decimals):
        return True
    for x, y in zip(a[1:], b[1:]):
        if isinstance(x, tuple) and x and isinstance(x[0], str) and isinstance(y, tuple):
            if not _align(x, y, decimals):
                return False
        elif x != y:
            return False
    return True


def rounded_terms(p: str, g: str) -> bool:
    """Are ``p`` and ``g`` the same expression up to decimals that round the other side's
    constants (see the module docstring)?"""
    decimals = {**_decimals(g), **_decimals(p)}
    if not decimals:
        return False
    try:
        a, b = mx.parse(p), mx.parse(g)
    except (mx.NotEvaluable, ValueError, ZeroDivisionError, RecursionError):
        return False
    if _size(a) + _size(b) > MAX_NODES:
        return False
    return _align(a, b, decimals)
