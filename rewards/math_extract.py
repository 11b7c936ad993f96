"""Finding the final answer in a whole response or gold label (see :mod:`rewards.math` for the rules).

A gold label is read like a response with two differences (``gold=True``): it cannot hedge (``$21,
16$ or $11$`` is the list of its values, several ``#### N`` keep the last), and a ``\\boxed{`` it
never closes holds the rest of the label (a typo in a dataset, not a truncated generation).

All scans are linear in the text (a runaway output of 100k ``\\boxed{`` or ``$`` signs is fine).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rewards.mathnorm import unglue_connectors

_BOXED_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASH_RE = re.compile(r"####\s*([^\n]+)")
_STATEMENT_RE = re.compile(r"(?:final\s+answer\s*(?:is|:)|the\s+answer\s+is|answer\s*(?:is\s*:?|:))\s*:?\s*",
                           re.IGNORECASE)
_NUM = (r"(?<![a-zA-Z\d.,_^:])[-+\u2212]?(?:\d{1,2}:\d{2}(?:\s*[ap]\.?m\.?)?(?![\d:])|\d+:\d+|\d+ \d+ ?/ ?\d+|\d{1,3}(?:\.\d{3})+,\d+(?![\d,])|(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+|,\d+(?![\d,]))?"
        r"(?:\s*/\s*\d+)?)|(?<![\d.])[-+\u2212]?\.\d+")
_NUM_RE = re.compile(_NUM)
_PROSE_WORD = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{2,}")
_CONNECTORS = {"and", "or", "pi", "sqrt", "frac", "text", "cup", "infty"}
_HEDGE_RE = re.compile(r"(?<![a-zA-Z])or(?![a-zA-Z])|\\(?:lor|vee)(?![a-zA-Z])")
_TEXT_CMDS = re.compile(r"\\(?:text|mbox|textbf|mathrm|begin|end|operatorname|textnormal)\s*\{[^{}]*\}")
_SENTENCE_END = re.compile(r"\.(?=\s|$)|\n|I hope|<\|")
MAX_BOXES = 32
_PROSE_IN_MATH = re.compile(r"[a-zA-Z]{2,}[\s,]+[a-zA-Z]{2,}[\s,]+[a-zA-Z]{2,}")


@dataclass(frozen=True)
class Extraction:
    """A final answer found in a text (``answer``) and how (``how``: boxed, answer_is, hash, bare,
    dollars, last_number, hedged, missing). ``values``: the distinct boxed answers when there are
    several (a hedge against a single gold, a set against a gold of several values)."""

    answer: str | None
    how: str
    values: tuple[str, ...] = field(default=())


def matching_braces(text: str) -> dict[int, int]:
    """``{index of "{": index of its "}"}`` for every balanced pair, in one pass (linear even for
    thousands of nested, unclosed ``\\boxed{`` in a runaway output)."""
    pairs, opened = {}, []
    for i, ch in enumerate(text):
        if ch == "{":
            opened.append(i)
        elif ch == "}" and opened:
            pairs[opened.pop()] = i
    return pairs


def boxed_spans(text: str) -> list[tuple[int, str]]:
    """``(start, content)`` of every ``\\boxed{...}`` / ``\\fbox{...}``, braces balanced, in order."""
    if "\\boxed" not in text and "\\fbox" not in text:
        return []
    pairs = matching_braces(text)
    return [(m.start(), text[m.end(): pairs[m.end() - 1]].strip()) for m in _BOXED_RE.finditer(text)
            if m.end() - 1 in pairs]


def boxed_contents(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` / ``\\fbox{...}``, braces balanced, in order."""
    return [c for _, c in boxed_spans(text)]


@dataclass(frozen=True)
class Span:
    """A math span ``$..$``, ``$$..$$``, ``\\(..\\)``, ``\\[..\\]``; ``valid`` False when an inline
    span runs over a line break or a ``$`` is never closed over one (no answer may come from it)."""

    start: int
    end: int
    content: str
    valid: bool


def _close(text: str, opener: str, closer: str, i: int) -> int:
    j = text.find(closer, i + len(opener))
    while closer == "$" and j > 0 and text[j - 1] == "\\":
        j = text.find(closer, j + 1)
    return j


def _span_at(text: str, i: int) -> tuple[Span | None, int] | None:
    """The span opening at ``i`` and where to continue; ``None`` when nothing opens there."""
    for opener, closer, block in (("$$", "$$", True), ("\\[", "\\]", True), ("\\(", "\\)", False), ("$", "$", False)):
        if not text.startswith(opener, i) or (opener[0] == "$" and i > 0 and text[i - 1] == "\\"):
            continue
        end = _close(text, opener, closer, i)
        if end < 0:
            tail = text[i + len(opener):]
            return (Span(i, len(text), tail, valid=False) if "\n" in tail else None), len(text)
        content = text[i + len(opener): end]
        if opener == "$" and _PROSE_IN_MATH.search(_TEXT_CMDS.sub("", content)):
            return None, i + 1  # "$2 each, so she makes $18": currency, not math
        return Span(i, end + len(closer), content.strip(), block or "\n" not in content), end + len(closer)
    return None


def math_spans(text: str) -> list[Span]:
    """All math spans in order (one linear scan)."""
    spans: list[Span] = []
    i, n, next_dollar, next_slash = 0, len(text), -1, -1
    while i < n:
        if next_dollar < i:
            next_dollar = text.find("$", i) if next_dollar != n else n
            next_dollar = n if next_dollar < 0 else next_dollar
        if next_slash < i:
            next_slash = text.find("\\", i) if next_slash != n else n
            next_slash = n if next_slash < 0 else next_slash
        i = min(next_dollar, next_slash)
        if i >= n:
            break
        found = _span_at(text, i)
        if found is None:
            i += 1
            continue
        span, i = found
        if span is not None:
            spans.append(span)
    return spans


def _is_bare(text: str) -> bool:
    """A short one-line text with no prose is itself an answer (``12 inches``, ``no solution``)."""
    s = text.strip()
    if not s or "\n" in s or len(s) > 200 or s.endswith(":") or s.count("$") > 2:
        return False
    stripped = unglue_connectors(_TEXT_CMDS.sub(" ", s))
    words = [m for m in _PROSE_WORD.finditer(stripped) if _is_prose(m.group(0))]
    if not re.search(r"\d", stripped):
        return len(words) <= 2
    last_digit = max(m.end() for m in re.finditer(r"\d", stripped))
    return all(m.start() >= last_digit for m in words)


def _is_prose(word: str) -> bool:
    """A word of prose, not a connector or a name of points (``AB``, ``ABCD``, ``MBCN``)."""
    return word.lower() not in _CONNECTORS and not (word.isupper() and len(word) <= 4)


def _strip_math(text: str) -> str:
    s = text.strip().rstrip(".").strip()
    spans = math_spans(s) if s[:1] in "$\\" else []
    return spans[0].content if len(spans) == 1 and spans[0].start == 0 and spans[0].end == len(s) else s


def _hedged_sentence(sentence: str) -> bool:
    return bool(_HEDGE_RE.search(sentence)) and len({n.strip() for n in _NUM_RE.findall(sentence)}) > 1


def _last_sentence(text: str) -> str:
    text = text.rstrip().rstrip(".")
    cut = max(text.rfind("\n"), text.rfind(". "))
    return text[cut + 1:]


def _from_statement(text: str, pos: int, gold: bool = False) -> Extraction:
    rest = text[pos:pos + 2000]
    spans = math_spans(rest)
    if spans and spans[0].start == 0 and spans[0].valid:
        return Extraction(spans[0].content, "answer_is")
    m = _SENTENCE_END.search(rest)
    sentence = rest[: m.start()] if m else rest
    sentence = sentence.strip().strip('"\\').strip()
    if not gold and _hedged_sentence(sentence):
        return Extraction(None, "hedged")
    plain = sentence.replace("$", "").replace('\\"', "").replace('"', "").strip()
    if _is_bare(plain):
        return Extraction(plain, "answer_is") if plain else Extraction(None, "missing")
    said = re.split(r"\s(?:is|are|was|equals|=)\s", plain)
    if len(said) > 1 and _is_bare(said[-1]):
        return Extraction(said[-1].strip(), "answer_is")
    found = _tail_answer(sentence)
    return Extraction(found[0], "answer_is") if found else Extraction(None, "missing")


def _tail_answer(text: str) -> tuple[str, str] | None:
    """The last valid math span or the last number outside math, whichever comes later."""
    spans = math_spans(text) if ("$" in text or "\\(" in text or "\\[" in text) else []
    valid = [s for s in spans if s.valid and s.content]
    pieces, last = [], 0
    for s in spans:
        pieces += [text[last:s.start], " " * (s.end - s.start)]
        last = s.end
    masked = "".join(pieces) + text[last:]
    nums = list(_NUM_RE.finditer(masked[-100_000:]))
    offset = max(0, len(masked) - 100_000)
    last_num = nums[-1] if nums else None
    if valid and (last_num is None or valid[-1].end >= last_num.end() + offset):
        return _joined_spans(text, valid), "dollars"
    if last_num is not None:
        return last_num.group(0).strip(), "last_number"
    return None


_JOINER = re.compile(r"\s*(?:,|,?\s*and|,?\s*or)\s*")


def _joined_spans(text: str, valid: list[Span]) -> str:
    """The last span, with the spans before it that a bare "and"/","/"or" joins to it
    (``$(2,5)$ and $(5,2)$`` is one answer of two values)."""
    out = [valid[-1]]
    for prev in reversed(valid[:-1]):
        if not _JOINER.fullmatch(text[prev.end: out[0].start]):
            break
        out.insert(0, prev)
    if len(out) == 1:
        return out[0].content
    joiner = " or " if "or" in text[out[0].end: out[-1].start] else ", "
    return joiner.join(s.content for s in out)


def _boxed(spans: list[tuple[int, str]], compare: Any) -> Extraction:
    contents = [c for _, c in spans if c]
    if not contents:
        return Extraction(None, "missing")
    unique = list(dict.fromkeys(contents))
    if len(unique) > MAX_BOXES:
        return Extraction(None, "hedged", tuple(unique))  # a runaway list of boxes: no pairwise compare
    distinct: list[str] = []
    for c in unique:
        if all(not compare(c, d) for d in distinct):
            distinct.append(c)
    if len(distinct) > 1:
        return Extraction(None, "hedged", tuple(distinct))
    return Extraction(contents[-1], "boxed")


def _unclosed_box(text: str) -> list[tuple[int, str]]:
    """A gold's last ``\\boxed{`` that never closes holds the rest of the text."""
    opened = list(_BOXED_RE.finditer(text))
    if not opened or opened[-1].end() - 1 in matching_braces(text):
        return []
    rest = text[opened[-1].end():].strip().rstrip("$").strip()
    return [(opened[-1].start(), rest)] if rest else []


def find_answer(text: str, compare: Any, boxed: bool = True, hash_: bool = True, answer_is: bool = True,
                dollars: bool = True, last_number: bool = True, gold: bool = False) -> Extraction:
    """The final answer of ``text``; ``compare(a, b) -> bool`` tells whether two boxes agree;
    ``gold``: read a gold label (see the module docstring)."""
    if "</think>" in text:
        before, _, after = text.rpartition("</think>")
        found = find_answer(after, compare, boxed, hash_, answer_is, dollars, last_number, gold)
        if found.how != "missing":
            return found
        text = before.replace("<think>", "")
    boxes = boxed_spans(text) if boxed else []
    if gold and boxed and not boxes and ("\\boxed" in text or "\\fbox" in text):
        boxes = _unclosed_box(text)
    statement = None
    if answer_is and ("nswer" in text or "NSWER" in text):
        statement = next(reversed(list(_STATEMENT_RE.finditer(text[-200_000:]))), None)
        offset = max(0, len(text) - 200_000)
    final_statement = statement is not None and statement.group(0).lower().startswith("final")
    if boxes and (not final_statement or statement.start() + offset < boxes[-1][0]):
        return _boxed(boxes, compare)
    if statement is not None:
        found = _from_statement(text, statement.end() + offset, gold)
        if found.answer is not None or found.how == "hedged":
            return found
    if hash_ and "####" in text and (hashes := _HASH_RE.findall(text)):
        if not gold and len({h.strip().strip("$").strip() for h in hashes}) > 1:
            return Extraction(None, "hedged")
        return Extraction(hashes[-1].strip().strip("$").strip(), "hash")
    if _is_bare(text):
        return Extraction(_strip_math(text), "bare")
    if not gold and _hedged_sentence(_last_sentence(text)):
        return Extraction(None, "hedged")
    found = _tail_answer(text) if (dollars or last_number) else None
    if found and (dollars or found[1] != "dollars") and (last_number or found[1] != "last_number"):
        return Extraction(found[0], found[1])
    return Extraction(None, "missing")
