"""Evaluating and comparing expression trees of :mod:`rewards.math_expr` (the randomised identity test).

:func:`evaluate` computes a tree for one assignment of its variables. Arithmetic stays exact
(``Fraction``) while it can (``+ - * /``, integer powers, perfect squares and cubes, factorials,
sums) and falls back to complex floating point (``cmath``) for ``\\pi``, roots, trigonometry and
logarithms. :func:`same_value` decides equality of two expressions by evaluating both at a few fixed
pseudo-random points: polynomials and rational functions are compared exactly, everything else to
1e-9 relative. Indexed names (``F_{n-k-1}``) are functions of their evaluated index.
"""

from __future__ import annotations

import cmath
import math
import zlib
from fractions import Fraction
from typing import Any

from rewards.math_expr import Malformed, Matrix, Node, NotEvaluable, Value, parse, variables

__all__ = ["evaluate", "close", "sample_envs", "values_at", "same_value", "constant"]


def _c(v: Value) -> complex:
    if isinstance(v, Matrix):
        raise NotEvaluable("matrix where a number is needed")
    return complex(v)


def _exact_pow(b: Fraction, e: Fraction) -> Fraction | None:
    if e.denominator == 1 and abs(e) <= 4096 and (b != 0 or e > 0):
        bits = max(b.numerator.bit_length(), b.denominator.bit_length())
        if bits * abs(e.numerator) <= 20000:
            return b ** int(e)
    if e.denominator in (2, 3) and b >= 0:
        n, d = b.numerator, b.denominator
        rn, rd = round(n ** (1 / e.denominator)), round(d ** (1 / e.denominator))
        if rn ** e.denominator == n and rd ** e.denominator == d:
            return _exact_pow(Fraction(rn, rd), Fraction(e.numerator))
    return None


def _arith(op: str, a: Value, b: Value) -> Value:
    if isinstance(a, Matrix) or isinstance(b, Matrix):
        return _matrix_arith(op, a, b)
    if op == "add":
        return a + b
    if op == "sub":
        return a - b
    if op == "mul":
        return a * b
    if b == 0:
        raise ZeroDivisionError
    return a / b


def _matrix_arith(op: str, a: Value, b: Value) -> Matrix:
    if isinstance(a, Matrix) and isinstance(b, Matrix):
        if op in ("add", "sub"):
            if a.shape != b.shape:
                raise NotEvaluable("shapes differ")
            return Matrix(tuple(_arith(op, x, y) for x, y in zip(ra, rb)) for ra, rb in zip(a, b))
        if op == "mul" and a.shape[1] == b.shape[0]:
            cols = list(zip(*b))
            return Matrix(tuple(sum((x * y for x, y in zip(row, col)), Fraction(0)) for col in cols) for row in a)
        raise NotEvaluable("matrix operation")
    if op == "mul":
        m, s = (a, b) if isinstance(a, Matrix) else (b, a)
        return Matrix(tuple(x * s for x in row) for row in m)
    if op == "div" and isinstance(a, Matrix):
        return Matrix(tuple(_arith("div", x, b) for x in row) for row in a)
    raise NotEvaluable("matrix operation")


_CONST = {"pi": complex(math.pi), "e": complex(math.e), "i": 1j}
_CFUNCS: dict[str, Any] = {"sin": cmath.sin, "cos": cmath.cos, "tan": cmath.tan, "arcsin": cmath.asin,
                           "arccos": cmath.acos, "arctan": cmath.atan, "sinh": cmath.sinh, "cosh": cmath.cosh,
                           "tanh": cmath.tanh, "ln": cmath.log, "log": cmath.log, "exp": cmath.exp,
                           "sec": lambda z: 1 / cmath.cos(z), "csc": lambda z: 1 / cmath.sin(z),
                           "cot": lambda z: 1 / cmath.tan(z)}


def evaluate(node: Node, env: dict[str, Fraction]) -> Value:
    """The value of a tree with its variables set from ``env`` (raises on any failure)."""
    op = node[0]
    if op == "num":
        return node[1]
    if op == "var":
        return env[node[1]]
    if op == "const":
        return _CONST[node[1]]
    if op in ("add", "sub", "mul", "div"):
        return _arith(op, evaluate(node[1], env), evaluate(node[2], env))
    if op == "neg":
        v = evaluate(node[1], env)
        return _matrix_arith("mul", v, Fraction(-1)) if isinstance(v, Matrix) else -v
    if op == "matrix":
        return Matrix(tuple(evaluate(c, env) for c in row) for row in node[1])
    if op == "idx":
        index = node[2][1] if node[2][0] == "var" and node[2][1] not in env else evaluate(node[2], env)
        name = f"{node[1]}_{index}"
        return env.get(name) or Fraction(50 + zlib.crc32(f"{name}/{env.get('__t', 0)}".encode()) % 200, 100)
    if op in ("sum", "prod"):
        return _big_operator(node, env)
    return _evaluate_function(op, node, env)


def _big_operator(node: Node, env: dict[str, Fraction]) -> Value:
    op, var, lo, hi, body = node
    a, b = evaluate(lo, env), evaluate(hi, env)
    if not (isinstance(a, Fraction) and isinstance(b, Fraction) and a.denominator == b.denominator == 1 and b - a <= 2000):
        raise NotEvaluable("bounds")
    total: Value = Fraction(0 if op == "sum" else 1)
    for k in range(int(a), int(b) + 1):
        v = evaluate(body, {**env, var: Fraction(k)})
        total = _arith("add" if op == "sum" else "mul", total, v)
    return total


def _evaluate_function(op: str, node: Node, env: dict[str, Fraction]) -> Value:
    if op == "pow":
        b, e = evaluate(node[1], env), evaluate(node[2], env)
        if isinstance(b, Fraction) and isinstance(e, Fraction) and (exact := _exact_pow(b, e)) is not None:
            return exact
        base, power = _c(b), _c(e)
        if abs(power) > 2000:
            if abs(power.imag) < 1e-12 and (abs(base) - 1) * power.real > 0 and abs(abs(base) - 1) > 1e-3:
                raise OverflowError("astronomically large")
            raise NotEvaluable("exponent too large")
        return base ** power
    if op in ("sqrt", "root"):
        x = evaluate(node[-1], env)
        n = evaluate(node[1], env) if op == "root" else Fraction(2)
        if isinstance(x, Fraction) and isinstance(n, Fraction) and n.denominator == 1 and n > 0:
            if (exact := _exact_pow(x, 1 / n)) is not None:
                return exact
        return _c(x) ** (1 / _c(n))
    if op == "fn":
        return _CFUNCS[node[1]](_c(evaluate(node[2], env)))
    x = evaluate(node[1], env)
    if op == "abs":
        return abs(x) if isinstance(x, Fraction) else complex(abs(_c(x)))
    if op == "deg":
        return _c(x) * math.pi / 180
    if op == "pct":
        return x / 100
    if op == "fact":
        if isinstance(x, Fraction) and x.denominator == 1 and x > 1000:
            raise OverflowError("astronomically large")
        if not (isinstance(x, Fraction) and x.denominator == 1 and 0 <= x <= 1000):
            raise NotEvaluable("factorial")
        return Fraction(math.factorial(int(x)))
    if op == "binom":
        k = evaluate(node[2], env)
        if not (isinstance(x, Fraction) and isinstance(k, Fraction) and x.denominator == k.denominator == 1 and 0 <= x <= 5000):
            raise NotEvaluable("binomial")
        return Fraction(math.comb(int(x), int(k)) if 0 <= k <= x else 0)
    raise NotEvaluable(op)


def close(a: Value, b: Value, rel: float = 1e-9) -> bool:
    """Equal values: exact for two fractions, else within ``rel`` (matrices cell by cell)."""
    if isinstance(a, Matrix) or isinstance(b, Matrix):
        return (isinstance(a, Matrix) and isinstance(b, Matrix) and a.shape == b.shape
                and all(close(x, y, rel) for ra, rb in zip(a, b) for x, y in zip(ra, rb)))
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        return a == b
    try:
        a, b = complex(a), complex(b)
    except OverflowError:  # an exact value beyond 1e308 against a float one
        return False
    if not (cmath.isfinite(a) and cmath.isfinite(b)):
        return False
    return abs(a - b) <= rel * max(abs(a), abs(b)) or abs(a - b) <= 1e-12


def sample_envs(names: frozenset[str], trials: int = 3, integers: bool = False) -> list[dict[str, Fraction]]:
    """Fixed pseudo-random points (values in [0.5, 2.5), or integers in [3, 12]; deterministic)."""
    if integers:
        return [{"__t": Fraction(t), **{n: Fraction(3 + zlib.crc32(f"{n}/{t}".encode()) % 10) for n in names}}
                for t in range(trials)]
    return [{"__t": Fraction(t), **{n: Fraction(50 + zlib.crc32(f"{n}/{t}".encode()) % 200, 100) for n in names}}
            for t in range(trials)]


def values_at(nodes: tuple[Node, ...], trials: int = 3) -> list[tuple[Value, ...]]:
    """The values of several trees at the shared sample points; points that fail are skipped."""
    names = frozenset().union(*(variables(n) for n in nodes))
    for integers in (False, True):
        out = []
        for env in sample_envs(names, trials if names else 1, integers):
            try:
                out.append(tuple(evaluate(n, env) for n in nodes))
            except (ArithmeticError, ValueError, TypeError, NotEvaluable, KeyError):
                continue
        if out or not names:
            return out
    return []


def constant(s: str) -> Fraction | complex | None:
    """The value of an expression without variables (``2\\sqrt{3}``), or ``None``."""
    try:
        node = parse(s)
    except (NotEvaluable, ValueError, ZeroDivisionError, RecursionError):
        return None
    if variables(node):
        return None
    points = values_at((node,))
    value = points[0][0] if points else None
    return value if isinstance(value, (Fraction, complex)) else None


def same_value(a: str, b: str) -> bool | None:
    """Are two expressions identical functions of their variables? ``None``: cannot tell."""
    try:
        na, nb = parse(a), parse(b)
    except Malformed:
        return False
    except (NotEvaluable, ValueError, ZeroDivisionError, RecursionError):
        return None
    points = values_at((na, nb))
    if not points:
        return _one_side_overflows(na, nb)
    return all(close(x, y) for x, y in points)


def _one_side_overflows(na: Node, nb: Node) -> bool | None:
    """``False`` when one constant is astronomically large (beyond 1e308) and the other finite."""
    if variables(na) or variables(nb):
        return None
    outcomes = []
    for node in (na, nb):
        try:
            v = evaluate(node, {})
            outcomes.append("finite" if not isinstance(v, complex) or cmath.isfinite(v) else "huge")
        except OverflowError:
            outcomes.append("huge")
        except (ArithmeticError, ValueError, TypeError, NotEvaluable, KeyError):
            return None
    return False if sorted(outcomes) == ["finite", "huge"] else None
