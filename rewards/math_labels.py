"""Labelled answers: ``(p,q)=(3,2)``, ``AB=4``, ``V_1:V_2=11:21``, ``|AB|=1``, ``f(n)=2n+1``.

A *label* is the left side of an answer's ``=`` when it names what the answer gives instead of
constraining it:

- a name: ``x``, ``a_{37}``, ``\\alpha``, ``x'``, ``f(x)``, ``f(2)``, ``P(A)``, ``f^{-1}(x)``;
- a product of names or a name with a mark: ``AB``, ``xy``, ``m\\angle A``, ``\\angle BAC``,
  ``S_{\\triangle ABC}``, ``\\overline{AB}``, ``\\sin x``, words such as ``Area``;
- any of those between bars: ``|AB|``, ``|\\vec{v}|``, ``\\|v\\|``;
- a ratio or quotient of those: ``V_1:V_2``, ``a:b:c``, ``\\frac{NO}{BO}``, ``a/b``;
- a tuple of those: ``(p, q)``, ``(x, y, z)``.

A number, a sum or a power is no label: ``7 = 11a + c`` is an equation, ``x + z = 1`` and
``x^2 = 4`` are constraints. A label never turns a value right or wrong: the value decides.

Beyond a plain name (or a tuple of plain names), a label must carry a value without variables
(``AB = CD`` relates two lengths; it does not give one). A list whose items all carry *different*
labels (``a = 1, b = 2``) is a *record*: its order is its meaning (``2, 1`` is wrong for it), and
two records with the same labels are matched label by label (``a_{37} = 19, a_3 = 2`` equals
``a_3 = 2, a_{37} = 19``). Labels that apply a function to plain variables (``f(x)``, ``W(n)``)
or index a sequence by one (``a_n``) are the same label whatever the variables are called;
:func:`rename_bound` compares such definitions with their bound variables renamed (``f(x) = x^2``
equals ``f(t) = t^2``, not ``f(t) = x^2``).
"""

from __future__ import annotations

import re
from functools import lru_cache

from rewards import math_eval as me
from rewards import math_expr as mx
from rewards import mathnorm as mn

_MARKS = {"angle", "measuredangle", "triangle", "overline", "vec", "hat", "bar", "widehat", "overrightarrow",
          "overleftrightarrow", "tilde", "dot", "mathrm", "mathit", "operatorname", "ell"}
_ALLOWED = _MARKS | mx.FUNCS | mx.GREEK
_DECOR = r"\\(?:overline|vec|hat|bar|widehat|overrightarrow|overleftrightarrow|tilde|dot|mathrm|mathit|operatorname)\s*\{[^{}]*\}"
_ATOM = (rf"(?:{_DECOR}|\\[A-Za-z]+|[A-Za-z])(?:_\s*(?:\{{[^{{}}]*\}}|[A-Za-z0-9]))?'*"
         r"(?:\^\s*(?:\{\s*-1\s*\}|\{\s*\*\s*\}|\*))?(?:\s*\([^()=+\-*/^]*\))?")
_TERM = re.compile(rf"(?:{_ATOM}\s*)+")
_SIMPLE = re.compile(r"^(?:[a-zA-Z]|\\[a-zA-Z]+)(?:_\{?\w+\}?)?(?:\([a-zA-Z](?:,\s*[a-zA-Z])*\))?'*$")
_APPLY = re.compile(r"^((?:[a-zA-Z]|\\[a-zA-Z]+)(?:\^\{-1\})?)\(([a-z](?:,[a-z])*)\)$")
_INDEXED = re.compile(r"^([a-zA-Z])_\{?([a-z])\}?$")
_RELATION_SIGNS = ("<", ">", "\\leq", "\\geq", "\\neq", "\\approx")
MAX_LABEL = 80


def is_simple_lhs(s: str) -> bool:
    """``x``, ``f(x)``, ``f(x, y)``, ``x_1``, ``\\theta``: a plain name an answer assigns to (not ``\\sin(x)``)."""
    s = s.strip()
    if not _SIMPLE.match(s):
        return False
    command = re.match(r"\\([a-zA-Z]+)", s)
    return command is None or command.group(1) not in mx.FUNCS | {"infty", "pi", "emptyset"}


def _is_term(s: str) -> bool:
    s = s.strip()
    for left, right in (("\\|", "\\|"), ("|", "|")):
        if s.startswith(left) and s.endswith(right) and len(s) > len(left) + len(right):
            s = s[len(left):-len(right)].strip()
            break
    if not s or not _TERM.fullmatch(s):
        return False
    return all(c in _ALLOWED for c in re.findall(r"\\([A-Za-z]+)", s))


def _frac_parts(s: str) -> tuple[str, str] | None:
    if not s.startswith("\\frac"):
        return None
    rest = s[5:].strip()
    if not rest.startswith("{"):
        return None
    depth, cut = 0, -1
    for i, ch in enumerate(rest):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0:
            cut = i
            break
    second = rest[cut + 1:].strip()
    if cut < 0 or not (second.startswith("{") and second.endswith("}") and mn.encloses(second)):
        return None
    return rest[1:cut], second[1:-1]


@lru_cache(maxsize=16384)
def is_label(s: str) -> bool:
    """Does ``s`` (the left side of an ``=``) name what the answer gives? (see the module docstring)"""
    s = s.strip()
    if not s or len(s) > MAX_LABEL:
        return False
    if s[0] == "(" and s[-1] == ")" and mn.encloses(s):
        parts = mn.split_top(s[1:-1])
        return len(parts) >= 2 and all(_is_term(p) for p in parts)
    for sep in (":", "/"):
        parts = mn.split_top(s, sep)
        if len(parts) >= 2:
            return all(_is_term(p) for p in parts)
    frac = _frac_parts(s)
    if frac is not None:
        return _is_term(frac[0]) and _is_term(frac[1])
    return _is_term(s)


def _plain(label: str) -> bool:
    """A plain name or a tuple of plain names: its value may hold variables (``y = 2x + 1``)."""
    s = label.strip()
    if s[:1] == "(" and s[-1:] == ")" and mn.encloses(s):
        return all(is_simple_lhs(p) for p in mn.split_top(s[1:-1]))
    return is_simple_lhs(s)


def _is_value(rhs: str) -> bool:
    """No variables: letters appear only inside commands (``\\sqrt``, ``\\pi``) or as ``e``/``i``."""
    return not re.search(r"[A-DF-HJ-Za-df-hj-z]", re.sub(r"\\[A-Za-z]+", "", rhs))


@lru_cache(maxsize=16384)
def labelled(item: str) -> tuple[str, str] | None:
    """``(label, value)`` of an item ``label = value`` (normalised text), else ``None``."""
    parts = mn.split_top(item, "=")
    if len(parts) != 2 or not parts[0] or not parts[1] or any(r in item for r in _RELATION_SIGNS):
        return None
    label, value = parts
    if not is_label(label) or not (_plain(label) or _is_value(mn.normalize(value))):
        return None
    return label, value


def unpack_tuple(item: str) -> list[str] | None:
    """``(p, q) = (3, 2)`` -> ``[p=3, q=2]`` (a tuple label with a tuple of as many values)."""
    found = labelled(item)
    if found is None or not (found[0].strip().startswith("(") and found[1].strip()[:1] in "(["):
        return None
    label, value = found[0].strip(), found[1].strip()
    if not (value[-1:] in ")]" and mn.encloses(value)):
        return None
    names, values = mn.split_top(label[1:-1]), mn.split_top(value[1:-1])
    if len(names) != len(values) or not all(values):
        return None
    return [f"{n}={v}" for n, v in zip(names, values)]


def label_key(label: str) -> str:
    """The label up to spacing, braces of one-character subscripts and the names of bound
    variables (``f(x)`` and ``f(t)`` are one label, ``P(A)`` and ``P(B)`` two)."""
    k = re.sub(r"_\{(\w)\}", r"_\1", mn.key(label))
    m = _APPLY.match(k)
    if m:
        return f"{m.group(1)}({m.group(2).count(',') + 1})"
    m = _INDEXED.match(k)
    return f"{m.group(1)}_(1)" if m else k


def record_labels(items: list[str]) -> list[str] | None:
    """The label keys of a record (every item labelled, all labels different), else ``None``."""
    found = [labelled(x) for x in items]
    if len(items) < 2 or any(f is None for f in found):
        return None
    keys = [label_key(f[0]) for f in found]
    return keys if len(set(keys)) == len(keys) else None


def bound_variables(label: str) -> list[str] | None:
    """The plain variables a function or sequence label binds (``f(x, y)`` -> ``[x, y]``,
    ``a_n`` -> ``[n]``), else ``None``."""
    k = mn.key(label)
    if m := _APPLY.match(k):
        return m.group(2).split(",")
    m = _INDEXED.match(k)
    return [m.group(2)] if m else None


def _rename(node: mx.Node, names: dict[str, str]) -> mx.Node:
    if node[0] == "var":
        return ("var", names.get(node[1], node[1]))
    if node[0] == "matrix":
        return ("matrix", tuple(tuple(_rename(c, names) for c in row) for row in node[1]))
    return tuple(_rename(c, names) if isinstance(c, tuple) and c and isinstance(c[0], str) else c for c in node)


def rename_bound(p_value: str, p_vars: list[str], g_value: str, g_vars: list[str]) -> bool | None:
    """Are ``p_value`` (in ``p_vars``) and ``g_value`` (in ``g_vars``) the same function once the
    bound variables are renamed position by position? ``None``: cannot tell."""
    if len(p_vars) != len(g_vars):
        return False
    try:
        p_node, g_node = mx.parse(p_value), mx.parse(g_value)
    except (mx.NotEvaluable, ValueError, ZeroDivisionError, RecursionError):
        return None
    fresh = [f"__bound{i}" for i in range(len(g_vars))]
    p_node = _rename(p_node, dict(zip(p_vars, fresh)))
    g_node = _rename(g_node, dict(zip(g_vars, fresh)))
    points = me.values_at((p_node, g_node))
    if not points:
        return None
    return all(me.close(a, b) for a, b in points)
