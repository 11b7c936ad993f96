"""Fast, pure-Python reading of final math answers: normalisation, plain numbers, structures.

This is the fast path of :mod:`rewards.math`. It decides most comparisons without sympy:

- :func:`normalize` turns an answer string into a canonical LaTeX-ish form (``\\dfrac`` -> ``\\frac``,
  no ``\\left``/``\\right``, no ``$``, degrees, percent signs, currency, unit words and ``\\text{}``
  wrappers removed, thousands separators resolved, an ``x =`` assignment prefix dropped);
- :func:`number` reads integers, decimals, ``1,234``, ``a/b``, ``\\frac{a}{b}``, mixed numbers
  (``7 3/4``, ``7\\frac{3}{4}``) and scientific notation (``1.5e3``, ``1.5\\times 10^{3}``) as exact
  ``Fraction``;
- :func:`structure` reads tuples, intervals, sets, bare lists and ratios ``a:b``;
- :func:`fast_equal` compares two normalised answers and returns ``None`` when it cannot decide,
  in which case the caller asks sympy (see :mod:`rewards._sympy_worker`).

Deliberate readings (each a known defect of Math-Verify 0.9): ``20:34`` is a ratio compared term by
term (not reduced to ``10/17``); ``7 3/4`` is the mixed number 31/4; ``(1,000,2)`` is the pair
(1000, 2) (a comma followed by exactly three digits and no space is a thousands separator; when that
reading fails to match, the other reading is tried too); unit words are dropped, never turned into
symbols.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

_SIMPLE_REPLACE = [
    ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\displaystyle", ""), ("~", " "), ("{,}", ","), ("\\%", ""), ("%", ""),
    ("\\$", ""), ("$", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("\\circ", ""), ("°", ""),
    ("\u2212", "-"), ("\\varnothing", "\\emptyset"), ("\\le ", "\\leq "), ("\\ge ", "\\geq "),
    ("\\mathbf", ""), ("\\cdot10^", "\\times10^"),
]
_SPACING = re.compile(r"(?<!\\)\\[,;:! ]")
_LEFT_RIGHT = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![a-zA-Z])")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|textit|mbox|mathrm|operatorname)\s*\{([^{}]*)\}")
_UNIT_TAIL = re.compile(r"^(.*?[\d}.])\s*((?:[a-zA-Z]{2,}\.?|\^\{?[23]\}?|/)(?:\s*(?:[a-zA-Z]{2,}\.?|\^\{?[23]\}?|/))*)$")
_NOT_UNITS = {"or", "and", "pi", "sqrt", "frac", "infty", "cup", "cap", "in", "to", "times", "cdot"}
_ASSIGN = re.compile(r"^[a-zA-Z](?:_\{?\w+\}?)?\s*(?:=|\\in)\s*(?=[^=]*$)")
_CHOICE = re.compile(r"^\(([A-E])\)$")
_THOUSANDS = re.compile(r"(?<![\d.])([1-9]\d{0,2}(?:,\d{3})+)(?![\d.])")
_THOUSANDS_OK = re.compile(r"(?<![\d.])[1-9]\d{0,2}(?:,\d{3})+(?![\d.])")
_WS = re.compile(r"\s+")

_DEC = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)"
_DEC_RE = re.compile(_DEC)
_SCI_RE = re.compile(rf"({_DEC})(?:[eE]|\\times\s*10\s*\^|\*10\^|\*\*)\{{?([-+]?\d+)\}}?")
_SLASH_RE = re.compile(rf"({_DEC})\s*/\s*({_DEC})")
_FRAC_RE = re.compile(r"([-+]?)\\frac\s*(?:\{\s*([-+]?\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))")
_MIXED_RE = re.compile(r"([-+]?)(\d+)\s*(?:\s(\d+)\s*/\s*(\d+)|\\frac\s*\{(\d+)\}\s*\{(\d+)\})")
_OPEN, _CLOSE = "([{", ")]}"


def _unwrap_text(s: str) -> str:
    """Drop unit ``\\text{}`` after a number, then unwrap the remaining ``\\text{X}`` to ``X``."""
    m = re.fullmatch(r"(.*?[\d}])\s*((?:\\(?:text|mbox|mathrm)\s*\{[^{}]*\}\s*(?:\^\{?[23]\}?)?\s*)+)", s)
    if m and re.search(r"[a-zA-Z]{1,}", m.group(2)) and not re.search(r"\b(or|and)\b", m.group(2)):
        s = m.group(1)
    return _TEXT_CMD.sub(lambda t: t.group(1), s)


def _drop_unit_words(s: str) -> str:
    """``12 inches`` -> ``12``; ``5 cm^2`` -> ``5``; ``2 x`` and ``3 or 4`` stay as they are."""
    m = _UNIT_TAIL.match(s)
    if not m:
        return s
    words = {w.lower().rstrip(".") for w in re.findall(r"[a-zA-Z]{2,}\.?", m.group(2))}
    if not words or words & _NOT_UNITS or "\\" in m.group(2) or m.group(1).endswith("\\"):
        return s
    return m.group(1).strip()


@lru_cache(maxsize=65536)
def normalize(answer: str) -> str:
    """Canonical form of one final answer (see the module docstring). Idempotent."""
    s = answer.strip()
    for old, new in _SIMPLE_REPLACE:
        if old in s:
            s = s.replace(old, new)
    s = _SPACING.sub(lambda m: " " if m.group(0) == "\\ " else "", s)
    s = _LEFT_RIGHT.sub("", s)
    s = _unwrap_text(s).strip()
    s = s.strip().rstrip(".").strip()
    s = re.sub(r"\\?\s*(?:degrees?|deg)\s*$", "", s).strip() if re.search(r"\d\s*(?:degrees?|deg)$", s) else s
    s = _drop_unit_words(s)
    s = _ASSIGN.sub("", s) if s.count("=") <= 1 else s
    s = _WS.sub(" ", s).strip()
    m = _CHOICE.match(s)
    return m.group(1) if m else s


def key(s: str) -> str:
    """A whitespace-free comparison key of a normalised answer."""
    return _WS.sub("", s)


def canonical_thousands(s: str, *, as_separators: bool = False) -> str:
    """``1,000`` -> ``1000`` (or, with ``as_separators``, leave commas as list separators)."""
    return s if as_separators else _THOUSANDS.sub(lambda m: m.group(1).replace(",", ""), s)


def has_ambiguous_commas(s: str) -> bool:
    """True when ``s`` holds a ``d,ddd`` group that could also be read as two list items."""
    return bool(_THOUSANDS_OK.search(s))


def _frac(num: str, den: str) -> Fraction | None:
    try:
        d = Fraction(den)
        return Fraction(num) / d if d != 0 else None
    except (ValueError, ZeroDivisionError):
        return None


@lru_cache(maxsize=65536)
def _to_number(s: str) -> Fraction | None:
    """Read a normalised answer as an exact number, or ``None`` when it is not a plain number."""
    s = key(canonical_thousands(s))
    if not s or len(s) > 200:
        return None
    if _DEC_RE.fullmatch(s):
        return Fraction(s.rstrip("."))
    if m := _SCI_RE.fullmatch(s):
        exp = int(m.group(2))
        return Fraction(m.group(1)) * Fraction(10) ** exp if abs(exp) < 400 else None
    if m := _SLASH_RE.fullmatch(s):
        return _frac(m.group(1), m.group(2))
    if m := _FRAC_RE.fullmatch(s):
        value = _frac(m.group(2) or m.group(3), m.group(4) or m.group(5))
        return -value if value is not None and m.group(1) == "-" else value
    s_spaced = _WS.sub(" ", s)
    if m := _MIXED_RE.fullmatch(s_spaced):
        num, den = (m.group(3), m.group(4)) if m.group(3) else (m.group(5), m.group(6))
        part = _frac(num, den)
        if part is None or not 0 < part < 1:
            return None
        value = int(m.group(2)) + part
        return -value if m.group(1) == "-" else value
    return None


def _mixed_spaced(s: str) -> Fraction | None:
    """Mixed numbers need their space (``7 3/4``), which :func:`_to_number`'s key drops."""
    m = _MIXED_RE.fullmatch(_WS.sub(" ", canonical_thousands(s).strip()))
    if not m or not m.group(3):
        return None
    part = _frac(m.group(3), m.group(4))
    if part is None or not 0 < part < 1:
        return None
    value = int(m.group(2)) + part
    return -value if m.group(1) == "-" else value


def number(s: str) -> Fraction | None:
    """:func:`_to_number`, also reading space-separated mixed numbers such as ``7 3/4``."""
    return _mixed_spaced(s) if re.search(r"\d\s+\d+\s*/", s) else _to_number(s)


def split_top(s: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside brackets and braces."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(s):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(s[start:i])
            start = i + 1
    parts.append(s[start:])
    return [p.strip() for p in parts]


def _encloses(s: str) -> bool:
    """True when the bracket opening ``s`` closes at its last character."""
    depth = 0
    for i, ch in enumerate(s):
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
            if depth == 0:
                return i == len(s) - 1
    return False


def _expand_pm(item: str) -> tuple[str, ...]:
    """``a \\pm b`` -> ``(a+b, a-b)``; anything else -> ``(item,)``."""
    parts = item.split("\\pm")
    if len(parts) != 2 or not parts[1].strip():
        return (item,)
    a, b = parts[0].strip(), parts[1].strip()
    return (f"{a}+{b}", f"{a}-{b}") if a else (b, f"-{b}")


@lru_cache(maxsize=65536)
def structure(s: str) -> tuple[str, tuple[str, ...]] | None:
    """``(kind, items)`` for tuples/intervals ``"()"``, ``"[)"``..., sets ``"set"``, ratios ``":"``."""
    if s.startswith("\\{") and s.endswith("\\}"):
        return "set", tuple(i for item in split_top(s[2:-2]) for i in _expand_pm(item))
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]" and _encloses(s):
        items = split_top(s[1:-1])
        return (s[0] + s[-1], tuple(items)) if len(items) >= 2 else None
    items = split_top(s)
    if len(items) >= 2 and all(items):
        return "set", tuple(i for item in items for i in _expand_pm(item))
    if len(pm := _expand_pm(s)) == 2:
        return "set", pm
    ratio = split_top(s, ":")
    if len(ratio) == 2 and all(number(r) is not None for r in ratio):
        return ":", tuple(ratio)
    return None


def _is_text(s: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z][A-Za-z .'-]+", s))


def _numbers_equal(a: Fraction, b: Fraction, rel_tol: float) -> bool:
    if a == b:
        return True
    return rel_tol > 0 and abs(a - b) <= rel_tol * max(abs(a), abs(b))


def fast_equal(pred: str, gold: str, rel_tol: float = 1e-9) -> bool | None:
    """Compare two normalised answers; ``None`` means "cannot tell without sympy"."""
    if key(pred) == key(gold):
        return True
    a, b = number(pred), number(gold)
    if a is not None and b is not None:
        return _numbers_equal(a, b, rel_tol)
    if _is_text(pred) or _is_text(gold):
        if _is_text(pred) and _is_text(gold):
            return pred.lower().replace(" ", "") == gold.lower().replace(" ", "")
        if a is not None or b is not None:
            return False
    sp, sg = structure(canonical_thousands(pred)), structure(canonical_thousands(gold))
    if sp is None or sg is None:
        one = sp or sg
        if one is not None and (one[0] in (":", "set") or a is not None or b is not None):
            return False  # a number, ratio or list never equals a single other answer
        return None
    return _structures_equal(sp, sg, rel_tol)


def _structures_equal(sp: tuple[str, tuple[str, ...]], sg: tuple[str, tuple[str, ...]],
                      rel_tol: float) -> bool | None:
    (kp, ip), (kg, ig) = sp, sg
    if kp != kg or len(ip) != len(ig):
        return False if ":" in (kp, kg) or "set" not in (kp, kg) else None
    if kp == "set":
        remaining = list(ig)
        for item in ip:
            match = next((g for g in remaining if fast_equal(item, g, rel_tol) is True), None)
            if match is None:
                return None
            remaining.remove(match)
        return True
    verdicts = [fast_equal(p, g, rel_tol) for p, g in zip(ip, ig)]
    if False in verdicts:
        return False
    return True if all(verdicts) else None
