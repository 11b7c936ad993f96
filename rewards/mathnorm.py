"""Fast, pure-Python reading of final math answers: normalisation and plain numbers.

- :func:`normalize` turns an answer string into a canonical LaTeX-ish form: ``\\dfrac`` ->
  ``\\frac``; no ``$``, ``\\left``/``\\right``, spacing commands; LaTeX number spacing
  (``12,\\!500``, ``14{,}916``, ``12\\,500``) joined; over-escaped commands (``\\\\frac``) fixed;
  a trailing degree sign, percent sign or word (``percent``, ``pct``), currency signs and unit words
  (``cm^2``, ``square units``, ``\\text{ miles}``) removed; ``\\text{}`` unwrapped; a leading
  ``x \\in`` dropped (:func:`membership` still tells it was there); relations spelled one way
  (``\\leq``, ``\\geq``, ``\\neq``); ``(C)`` -> ``C``; minerva's shorthand TeX expanded
  (``\\fracab`` -> ``\\frac{a}{b}``, ``\\fracabc`` -> ``\\frac{a}{b}c``, ``\\sqrtx`` -> ``\\sqrt{x}``);
  a connector that lost its spaces (``W(x)=1orW(x)=-1``, ``\\text{or}``) spaced again; a trailing
  quantifier dropped (``f(x) = x for all x``, ``\\forall x \\in \\mathbb{R}``); ``f \\equiv 0`` read as
  ``f = 0`` unless a modulus makes it a congruence (``\\pmod 5`` -> ``\\pmod{5}``); ``\\mathbb{R}`` and
  "all real numbers" as ``(-\\infty,\\infty)``, "infinity" as ``\\infty``.
- :func:`number` also reads the number words zero to twenty, the tens and "hundred".
- :func:`number` reads integers, decimals, ``1,234.5``, ``1 000``, ``a/b``, ``\\frac{a}{b}``, mixed
  numbers (``7 3/4``, ``7\\frac{3}{4}``) and scientific notation as an exact ``Fraction``.
- :func:`decimal_literal` tells how precisely a decimal was written (for the rounding rule).
- :func:`split_top` splits on a separator outside brackets.

Deliberate readings: ``7 3/4`` is the mixed number 31/4 (only with a proper fraction part);
``(1,000,2)`` is the pair (1000, 2) when that reading is needed (a comma followed by exactly three
digits and no space is a thousands separator); unit words are dropped, never turned into symbols;
a short unit needs a space (``10 cm`` is 10, ``10cm`` is the product 10·c·m).
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

_SIMPLE_REPLACE = [
    ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\cfrac", "\\frac"), ("\\displaystyle", ""), ("~", " "),
    ("{,}", ","), ("\\%", "%"), ("\\$", ""), ("$", ""), ("€", ""), ("£", ""), ("¥", ""), ("\u2212", "-"),
    ("\\varnothing", "\\emptyset"), ("\\mathbf", ""), ("\\cdot10^", "\\times10^"), ("\\textnormal", "\\text"),
    ("\\leqslant", "\\leq"), ("\\geqslant", "\\geq"), ("<=", "\\leq "), (">=", "\\geq "), ("!=", "\\neq "),
    ("\\lt", "<"), ("\\gt", ">"), ("\\dots", "\\ldots"), ("\\cdots", "\\ldots"), ("²", "^2"), ("³", "^3"),
    ("\\lvert", "|"), ("\\rvert", "|"), ("\\vert", "|"), ("+\\infty", "\\infty"), ("\\infin", "\\infty"),
    ("π", "\\pi "), ("√", "\\sqrt"), ("×", "\\times "), ("÷", "\\div "), ("·", "\\cdot "), ("≤", "\\leq "),
    ("≥", "\\geq "), ("≠", "\\neq "), ("∞", "\\infty "), ("\\qquad", " "), ("\\quad", " "),
]
_REL_WORDS = [(re.compile(r"\\le(?![a-zA-Z])"), "\\leq"), (re.compile(r"\\ge(?![a-zA-Z])"), "\\geq"),
              (re.compile(r"\\ne(?![a-zA-Z])"), "\\neq")]
_NUM_SPACING = re.compile(r"(\d)\s*(?:,\\!|\{\s*,\s*\}|,\s*\\!)\s*(?=\d)")
_SPACING = re.compile(r"(?<!\\)\\[,;:! ]")
_LEFT_RIGHT = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg|bigl|bigr|Bigl|Bigr)(?![a-zA-Z])\.?")
_TEXT_CMD = re.compile(r"\\(?:text|textbf|textit|mbox|mathrm|operatorname|textrm|mathit)\s*\{([^{}]*)\}")
_UNIT_TAIL = re.compile(r"^(.*?[\d}.)])((?:\s+[a-zA-Z]{1,}\.?|\s*[a-zA-Z]{4,}\.?)(?:\s*(?:[a-zA-Z]{2,}\.?|\^\{?[23]\}?|/))*"
                        r"(?:\s*\^\{?[23]\}?)?)$")
_NOT_UNITS = {"or", "and", "pi", "sqrt", "frac", "infty", "cup", "cap", "in", "to", "times", "cdot", "i", "e",
              "x", "y", "z", "n", "k", "a", "b", "c", "d", "t", "r", "s", "p", "q", "m", "pm", "mp", "ldots"}
_IN_PREFIX = re.compile(r"^([a-zA-Z](?:_\{?\w+\}?)?)\s*\\in\s*")
_SHORT_FRAC = re.compile(r"\\frac([A-Za-z])([A-Za-z0-9])")
_SHORT_SQRT = re.compile(r"\\sqrt([A-Za-z])")
_NUMBER_WORDS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())} | {"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
                                                     "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100}
_REALS = re.compile(r"\\mathbb\s*\{?\s*R\s*\}?|\\R(?![a-zA-Z])|(?<![a-zA-Z])all real numbers(?![a-zA-Z])")
_INFINITY_WORD = re.compile(r"(?<![a-zA-Z\\])infinity(?![a-zA-Z])")
_QUANTIFIER = re.compile(r"(?<=\S)\s*,?\s*(?:\\forall|\bfor\s+(?:all|every|any|each)\b|,\s*[a-zA-Z]\s*\\in\s*\\mathbb\s*\{?[RNZQC]\}?\s*$).*$")
_MOD_ARG = re.compile(r"\\(p?mod)\s+(\w+)")
_GLUED = re.compile(r"(?<=[\d)\]}|])\s*(or|and)\s*(?=[A-Z(\\]|[a-z](?![a-z]))")
_CHOICE = re.compile(r"^\(([A-E])\)$")
_THOUSANDS = re.compile(r"(?<![\d.,])([1-9]\d{0,2}(?:,\d{3})+)(?![\d])")
_SPACE_THOUSANDS = re.compile(r"(?<![\d.])([1-9]\d{0,2}(?: \d{3})+)(?![\d./])")
_PERCENT_WORD = re.compile(r"(\d|\})\s*(?:\\%|%|percent(?:age)?|pct)\s*$")
_WS = re.compile(r"\s+")
_BARE_WORDS = re.compile(r"(?<![\\a-zA-Z])(sqrt|pi)(?![a-zA-Z])")
_REPEATING = re.compile(r"([-+]?)(\d*)\.(\d*)\\overline\{(\d+)\}")

_DEC = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)"
_DEC_RE = re.compile(_DEC)
_SCI_RE = re.compile(rf"({_DEC})(?:[eE]|\\times\s*10\s*\^|\*10\^|\*\*|\\cdot\s*10\s*\^)\{{?([-+]?\d+)\}}?")
_SLASH_RE = re.compile(rf"({_DEC})\s*/\s*({_DEC})")
_FRAC_RE = re.compile(r"([-+]?)\\frac\s*(?:\{\s*([-+]?\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))")
_MIXED_RE = re.compile(r"([-+]?)(\d+)\s*(?:\s(\d+)\s*/\s*(\d+)|\\frac\s*\{(\d+)\}\s*\{(\d+)\}|\\frac(\d)(\d))")
_OPEN, _CLOSE = "([{", ")]}"


def _unwrap_text(s: str) -> str:
    """Drop unit ``\\text{}`` after a number, then unwrap the remaining ``\\text{X}`` to ``X``."""
    m = re.fullmatch(r"(.*?[\d}])\s*((?:\\(?:text|mbox|mathrm)\s*\{[^{}]*\}\s*(?:\^\{?[23]\}?)?\s*)+)", s)
    if m and re.search(r"[a-zA-Z]{2,}", m.group(2)) and not re.search(r"[aApP]\.?\s*[mM]\.?\}", m.group(2)) and not re.search(r"\b(or|and)\b|\\", m.group(2).replace("\\text", "")
                                                                       .replace("\\mbox", "").replace("\\mathrm", "")):
        s = m.group(1)
    return _TEXT_CMD.sub(lambda t: t.group(1), s)


def _drop_unit_words(s: str) -> str:
    """``12 inches`` -> ``12``; ``5 cm^2`` -> ``5``; ``10weeks`` -> ``10``; ``2 x``, ``3 or 4`` stay."""
    m = _UNIT_TAIL.match(s)
    if not m:
        return s
    words = {w.lower().rstrip(".") for w in re.findall(r"[a-zA-Z]+\.?", m.group(2))}
    if not words or words & _NOT_UNITS or "\\" in m.group(2) or m.group(1).endswith("\\"):
        return s
    return m.group(1).strip()


def _fix_escapes(s: str) -> str:
    """``\\\\frac`` (an over-escaped command) -> ``\\frac``; all-doubled text is halved."""
    if "\\\\" not in s:
        return s
    if re.search(r"(?<!\\)\\\\[a-zA-Z]", s) and not re.search(r"(?<!\\)\\[a-zA-Z]", s):
        return s.replace("\\\\", "\\")
    return re.sub(r"(?<!\\)\\\\(?=(?:frac|dfrac|sqrt|le|ge|text|pi|left|right|cdot|times)(?![a-zA-Z]))", r"\\", s)


def _strip_delims(s: str) -> str:
    s = s.strip()
    for a, b in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if s.startswith(a) and s.endswith(b) and len(s) >= len(a) + len(b):
            s = s[len(a):len(s) - len(b)].strip()
    return s


def unglue_connectors(s: str) -> str:
    """``1orW(x)=-1`` -> ``1 or W(x)=-1``: an "or"/"and" that lost its spaces between a value and
    the next item (a digit or bracket before it; a capital, a bracket, a command or a one-letter
    name after it, so ``10oranges`` and ``2and3`` stay words)."""
    return _GLUED.sub(lambda m: f" {m.group(1)} ", s) if ("or" in s or "and" in s) else s


@lru_cache(maxsize=65536)
def _normalize_body(answer: str) -> str:
    s = _fix_escapes(_strip_delims(answer.strip().strip("*")))
    s = _NUM_SPACING.sub(r"\1,", s)
    for old, new in _SIMPLE_REPLACE:
        if old in s:
            s = s.replace(old, new)
    for pattern, new in _REL_WORDS:
        s = pattern.sub(lambda _m, n=new: n, s)
    s = _BARE_WORDS.sub(r"\\\1", s) if ("sqrt" in s or "pi" in s) else s
    if "\\frac" in s or "\\sqrt" in s:
        s = _SHORT_SQRT.sub(r"\\sqrt{\1}", _SHORT_FRAC.sub(r"\\frac{\1}{\2}", s))
    s = _SPACING.sub(lambda m: " " if m.group(0) == "\\ " else "", s)
    s = _LEFT_RIGHT.sub("", s)
    s = unglue_connectors(_unwrap_text(s)).strip()
    if "for" in s or "\\forall" in s or "\\mathbb" in s:
        s = _QUANTIFIER.sub("", s).strip()  # f(x) = x for all x: the quantifier is no part of the value
    if "R" in s or "real" in s:
        s = _REALS.sub(lambda _m: "(-\\infty,\\infty)", s)
    if "infinity" in s:
        s = _INFINITY_WORD.sub(lambda _m: "\\infty", s)
    if "mod" in s:
        s = _MOD_ARG.sub(r"\\\1{\2}", s)
    elif "\\equiv" in s:
        s = s.replace("\\equiv", "=")  # f \equiv 0 (an identity; with a modulus it is a congruence)
    s = re.sub(r"(?<!\.)[.,;:]\s*$", "", s).strip() if not s.endswith("\\ldots") else s
    s = _PERCENT_WORD.sub(r"\1", s).strip()
    s = re.sub(r"\s*(?:\^\s*\{?\\circ\}?|°|\\circ|\\?\s*degrees?)\s*$", "", s).strip()
    s = _drop_unit_words(s)
    return _WS.sub(" ", s).strip()


@lru_cache(maxsize=65536)
def normalize(answer: str) -> str:
    """Canonical form of one final answer (see the module docstring). Idempotent."""
    s = _IN_PREFIX.sub("", _normalize_body(answer)).strip()
    if s.startswith("{") and s.endswith("}") and _encloses(s):
        s = s[1:-1].strip()
    m = _CHOICE.match(s)
    return m.group(1) if m else s


def membership(answer: str) -> str | None:
    """The variable of an answer written as a membership statement (``x \\in [-2, 7]`` -> ``x``)."""
    m = _IN_PREFIX.match(_normalize_body(answer))
    return m.group(1).replace("{", "").replace("}", "") if m else None


def has_percent(raw: str) -> bool:
    """Was the answer written as a percentage (``28\\%``, ``28 percent``, ``28 pct``)?"""
    return "%" in raw or bool(re.search(r"\d\s*(?:percent|pct)", raw))


def key(s: str) -> str:
    """A whitespace-free comparison key of a normalised answer."""
    return _WS.sub("", s)


def canonical_thousands(s: str) -> str:
    """``1,000`` -> ``1000``; ``1 000`` -> ``1000``."""
    s = _THOUSANDS.sub(lambda m: m.group(1).replace(",", ""), s)
    return _SPACE_THOUSANDS.sub(lambda m: m.group(1).replace(" ", ""), s)


def _frac(num: str, den: str) -> Fraction | None:
    try:
        d = Fraction(den)
        return Fraction(num) / d if d != 0 else None
    except (ValueError, ZeroDivisionError):
        return None


def _mixed(m: re.Match) -> Fraction | None:
    num, den = next((m.group(i), m.group(i + 1)) for i in (3, 5, 7) if m.group(i))
    part = _frac(num, den)
    if part is None or not 0 <= part < 1:
        return None
    value = int(m.group(2)) + part
    return -value if m.group(1) == "-" else value


@lru_cache(maxsize=65536)
def number(s: str) -> Fraction | None:
    """Read a normalised answer as an exact number, or ``None`` when it is not a plain number."""
    s = canonical_thousands(s.strip())
    if s.lower() in _NUMBER_WORDS:
        return Fraction(_NUMBER_WORDS[s.lower()])
    if not s or len(s) > 120 or not re.search(r"\d", s):
        return None
    if m := _MIXED_RE.fullmatch(_WS.sub(" ", s)):
        return _mixed(m)
    s = key(s)
    if _DEC_RE.fullmatch(s):
        return Fraction(s.rstrip("."))
    if m := _SCI_RE.fullmatch(s):
        exp = int(m.group(2))
        return Fraction(m.group(1)) * Fraction(10) ** exp if abs(exp) < 400 else None
    if m := _SLASH_RE.fullmatch(s):
        return _frac(m.group(1), m.group(2))
    if m := _REPEATING.fullmatch(s):  # 0.1\overline{6} = 1/6
        sign, whole, fixed, period = m.groups()
        value = Fraction(int(whole or 0)) + Fraction(int(fixed or 0), 10 ** len(fixed)) + Fraction(
            int(period), (10 ** len(period) - 1) * 10 ** len(fixed))
        return -value if sign == "-" else value
    if m := _FRAC_RE.fullmatch(s):
        value = _frac(m.group(2) or m.group(3), m.group(4) or m.group(5))
        return -value if value is not None and m.group(1) == "-" else value
    return None


@lru_cache(maxsize=65536)
def decimal_literal(s: str) -> tuple[Fraction, Fraction] | None:
    """``(value, half a unit of the last written digit)`` for a decimal with a point (``0.67``,
    ``2.3148\\times 10^{-3}``) written to at least 2 places or 3 significant digits, else ``None``."""
    t = key(canonical_thousands(s))
    exp = 0
    if m := _SCI_RE.fullmatch(t):
        t, exp = m.group(1), int(m.group(2))
        if abs(exp) > 300:
            return None
    m = re.fullmatch(r"[-+]?(\d*)\.(\d+)", t)
    if not m:
        return None
    places = len(m.group(2))
    significant = len((m.group(1) + m.group(2)).lstrip("0"))
    if places < 2 and significant < 3:
        return None
    scale = Fraction(10) ** exp
    return Fraction(t) * scale, Fraction(1, 2 * 10 ** places) * scale


def decimal_comma(s: str) -> Fraction | None:
    """``3,75`` / ``1000,99`` / ``0,111`` / ``1.234,56`` read with a decimal comma (no valid thousands
    grouping)."""
    t = s.strip()
    if re.fullmatch(r"[-+]?\d{1,3}(?:[. ]\d{3})+,\d+", t):  # 1.234,56 / 1 234,56
        t = t.replace(".", "").replace(" ", "")
    m = re.fullmatch(r"([-+]?\d+),(\d+)", t)
    if not m or (re.fullmatch(r"[-+]?[1-9]\d{0,2}", m.group(1)) and len(m.group(2)) == 3):
        return None
    return Fraction(f"{m.group(1)}.{m.group(2)}")


def split_top(s: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside brackets and braces."""
    parts, depth, start, n = [], 0, 0, len(sep)
    i = 0
    while i < len(s):
        ch = s[i]
        if ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
        elif depth == 0 and s.startswith(sep, i):
            parts.append(s[start:i])
            start = i + n
            i += n
            continue
        i += 1
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


encloses = _encloses
