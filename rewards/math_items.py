"""How many values an answer gives, and how they are grouped (the structure layer's reading).

:func:`items_of` splits a normalised answer into its items and names its kind:

- ``set``: ``\\{a, b\\}``, ``\\emptyset`` (unordered);
- ``list``: items joined by ``,``, ``;`` (``-12;-11;-10``), "and", "or" (unordered);
- ``record``: a list whose items all carry different labels (``a = 1, b = 2``; ordered, see
  :mod:`rewards.math_labels`), or a tuple label with its tuple value (``(p, q) = (3, 2)``);
- a bracket pair: ``()``, ``[]``, ``(]``, ``[)`` (ordered; ``;`` separates coordinates when there is
  no comma: ``(0;-2;6)``);
- ``one``: a single value.

A top-level ``;`` groups more strongly than ``,``: ``p=5,q=2; p=7,q=2`` is two items, each a record.
``a \\pm b`` is the two items ``a+b``, ``a-b``.
"""

from __future__ import annotations

import re
from functools import lru_cache

from rewards import mathnorm as mn
from rewards.math_labels import record_labels, unpack_tuple

_AND = re.compile(r"\s*,?\s*(?<![a-zA-Z])and(?![a-zA-Z])\s*")
_OR = re.compile(r"\s*,?\s*(?<![a-zA-Z])or(?![a-zA-Z])\s*|\\(?:lor|vee)(?![a-zA-Z])")


def has_or(s: str) -> bool:
    """Does an answer join alternatives with "or"?"""
    return bool(_OR.search(s))


def split_or(s: str) -> list[str]:
    """The alternatives of ``a or b`` (one item when there is no "or")."""
    return [x.strip() for x in _OR.split(s) if x.strip()]


def _split_words(part: str) -> list[str]:
    pieces = [x for x in _AND.split(part) if x.strip()]
    return [y for x in pieces for y in split_or(x)]


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


def _coordinates(inner: str) -> list[str]:
    parts = mn.split_top(inner)
    return parts if len(parts) >= 2 else mn.split_top(inner, ";")


@lru_cache(maxsize=65536)
def items_of(s: str) -> tuple[str, tuple[str, ...]]:
    """``(kind, items)`` of a normalised answer (see the module docstring)."""
    s = mn.canonical_thousands(s.strip())
    if s == "\\emptyset":
        return "set", ()
    if s.startswith("\\{") and s.endswith("\\}"):
        inner = s[2:-2].strip()
        return "set", tuple(_expand_pm(_coordinates(inner))) if inner else ()
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]" and mn.encloses(s):
        parts = _coordinates(s[1:-1])
        if len(parts) >= 2:
            return s[0] + s[-1], tuple(parts)
    groups = mn.split_top(s, ";")
    if len(groups) >= 2 and all(groups):
        return "list", tuple(_expand_pm(groups))
    parts = [q for part in mn.split_top(s) for q in _split_words(part)]
    if len(parts) >= 2 and all(parts):
        if record_labels(parts) is not None:
            return "record", tuple(parts)
        return "list", tuple(_expand_pm(parts))
    unpacked = unpack_tuple(s) if "=" in s else None
    if unpacked is not None and record_labels(unpacked) is not None:
        return "record", tuple(unpacked)  # (p, q) = (3, 2) is the record p = 3, q = 2
    pm = _expand_pm([s])
    return ("list", tuple(pm)) if len(pm) == 2 else ("one", (s,))


def several(s: str) -> bool:
    """Is a normalised answer a bare list of answers (not one value, tuple, interval or set)?"""
    return items_of(s)[0] in ("list", "record")
