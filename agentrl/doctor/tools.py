"""Check 2, tool calls: does the env's tool parser read what the model writes?

Per turn of the model's episodes (an env that reports its calls, ``info["tool_calls"]``): a call that
parsed and ran, a call that did not parse, a call the tool refused (unknown tool, wrong arguments, the
call limit), or no call at all. The outputs of turns whose calls do not parse are sniffed for the call
formats of the field (Hermes ``<tool_call>{json}``, Qwen3-Coder ``<function=...>``, Llama-3 JSON,
pythonic lists, Mistral's ``[TOOL_CALLS]``): a model writing one format to an env parsing another
makes no call a run can learn from, and it fails here. The reference policy's calls must parse (the
env's own format). A model that makes no call warns, and so does an episode rewarded without one
(reward is reachable without the tools: a run may learn to skip them)."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from agentrl.doctor.report import Check
from agentrl.types import Trajectory

FORMATS = {  # how each call format of the field starts (a sniff, not a parse)
    "hermes": re.compile(r"<tool_call>\s*\{"),
    "hermes (a JSON list)": re.compile(r"<tool_call>\s*\["),
    "qwen3_coder": re.compile(r"<function=[^>\n]+>"),
    "llama3_json": re.compile(r"^\s*\{\s*\"name\"\s*:", re.MULTILINE),
    "pythonic": re.compile(r"^\s*\[\s*[A-Za-z_][\w.]*\(", re.MULTILINE),
    "mistral": re.compile(r"\[TOOL_CALLS\]"),
}


TAGGED = ("hermes", "hermes (a JSON list)", "qwen3_coder", "mistral")  # formats marked by a tag of their own


def sniff(text: str) -> list[str]:
    """The call formats ``text`` looks like it uses (none for prose). A tagged format hides the bare ones
    (the JSON line inside ``<tool_call>`` is Hermes, not a Llama-3 call)."""
    tagged = [name for name in TAGGED if FORMATS[name].search(text)]
    return tagged or [name for name, pattern in FORMATS.items() if name not in TAGGED and pattern.search(text)]


def turn_kinds(t: Trajectory) -> list[str]:
    """Each turn of an episode: ``parsed`` (a call ran), ``unparsable``, ``refused`` (the tool's error) or
    ``none`` (no call)."""
    calls: dict[int, list[dict[str, Any]]] = {}
    for c in t.info.get("tool_calls") or []:
        if isinstance(c, dict):
            calls.setdefault(int(c.get("turn", 0)), []).append(c)
    kinds = []
    for turn in range(int(t.info.get("turns") or len(t.info.get("responses") or []))):
        mine = calls.get(turn, [])
        if any(c.get("name") is not None and not c.get("error") for c in mine):
            kinds.append("parsed")
        elif any(c.get("name") is None for c in mine):
            kinds.append("unparsable")
        elif mine:
            kinds.append("refused")
        else:
            kinds.append("none")
    return kinds


def error_class(error: str) -> str:
    """A short class of a call's error (its first clause, numbers and quoted names left out)."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "_", str(error)).split(":")[0].split(";")[0]
    return " ".join(text.split())[:60] or "error"


def check_tools(episodes: list[Trajectory], reference: list[Trajectory], parser: str | None,
                has_tools: bool, max_new_tokens: int = 0) -> Check:
    """Check 2 on the model's ``episodes`` and the reference policy's (``parser``: the env's format name;
    ``max_new_tokens``: the turn budget, which cuts a reference call that does not fit)."""
    if not has_tools:
        return Check("tools", "skip", "the env has no tools")
    eps = [(t, turn_kinds(t)) for t in episodes if not t.info.get("failed")]  # each episode's turns, once
    kinds = Counter(k for _, ks in eps for k in ks)
    turns = sum(kinds.values())
    errors = Counter(error_class(c.get("error")) for t, _ in eps for c in t.info.get("tool_calls") or []
                     if isinstance(c, dict) and c.get("error"))
    unparsed = [(_response(t, i), k) for t, ks in eps for i, k in enumerate(ks) if k in ("unparsable", "none")]
    sniffed = Counter(f for text, _ in unparsed for f in sniff(text))
    shown = [text[:200] for text, k in unparsed if sniff(text) or k != "none"][:3]
    shown = shown or [text[:200] for text, _ in unparsed][:3]
    no_tool_wins = sum(1 for t, ks in eps if t.reward > 0 and "parsed" not in ks)
    ref_bad = [t for t in reference if not t.info.get("failed") and "unparsable" in turn_kinds(t)]
    share = kinds["parsed"] / turns if turns else 0.0
    details = {"parser": parser, "turns": turns, "turn_kinds": dict(kinds), "parsed_share": share,
               "errors": dict(errors.most_common(10)), "formats_seen_unparsed": dict(sniffed),
               "unparsable_outputs": shown, "rewarded_without_a_call": no_tool_wins,
               "reference_turns_unparsable": len(ref_bad)}
    summary = (f"{kinds['parsed']} of {turns} turns made a call that ran ({share:.0%}); {kinds['unparsable']} "
               f"unparsable, {kinds['refused']} refused by the tool, {kinds['none']} without a call")
    other = [f for f, _ in sniffed.most_common() if f.split(" ")[0] != parser]  # formats the env does not parse
    cut = [t for t in ref_bad if max_new_tokens and any(s.is_action and len(s.token_ids) >= max_new_tokens
                                                         for s in t.segments)]
    if cut:  # the oracle's calls may be longer than a model's need be: a warning, not a proof
        return Check("tools", "warn", summary + f"; the reference policy's calls are cut at rollout.max_new_tokens="
                     f"{max_new_tokens} in {len(cut)} episodes", "raise rollout.max_new_tokens: the warm start cannot "
                     "teach calls that do not fit a turn, and a model's call longer than that never parses", details)
    if ref_bad:
        return Check("tools", "fail", summary + f"; the reference policy's own calls do not parse in {len(ref_bad)} "
                     f"episodes", "the env writes reference calls in another format than it parses", details)
    if other and sniffed[other[0]] >= max(3, 2 * kinds["parsed"]):  # the model mostly writes another format
        fmt = other[0]
        return Check("tools", "fail", summary + f"; {sniffed[fmt]} outputs look like {fmt} calls but the env "
                     f"parses {parser or 'its own format'}",
                     f"set the env's tool_parser to the model's format ({fmt.split(' ')[0]}), or prompt the model "
                     f"in the env's", details)
    if turns and kinds["parsed"] == 0:
        return Check("tools", "warn", summary + "; the model makes no call at all",
                     "an untrained model: warm-start it on the env's reference policy; else check the prompt "
                     "shows the call format", details)
    if no_tool_wins:
        return Check("tools", "warn", summary + f"; {no_tool_wins} episodes were rewarded without a call",
                     "reward is reachable without the tools: a run may learn to skip them", details)
    return Check("tools", "pass", summary, "", details)


def _response(t: Trajectory, turn: int) -> str:
    responses = t.info.get("responses") or []
    return str(responses[turn]) if turn < len(responses) else ""
