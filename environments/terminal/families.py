"""Task families of Terminal-v0: each draws one shell task over a generated file tree.

A family is a function ``(draw, difficulty) -> Generated``: the files of the working directory,
the instruction, the oracle's shell commands and the checks the final tree must pass
(:mod:`environments.terminal.checks`). Difficulty 1 asks for one command whose every argument is
named in the instruction; higher levels add files, nesting, distractors that a careless command
catches (near-miss names and extensions, names with spaces, look-alike lines), and more steps.
Families draw only through ``draw`` (a seeded :class:`Draw`), so a seed always gives the same task.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

NOUNS = ("alpha", "apple", "atlas", "beacon", "birch", "cedar", "comet", "delta", "ember", "falcon", "garnet",
         "harbor", "iris", "jasper", "kernel", "lumen", "maple", "nova", "onyx", "orbit", "pebble", "quartz",
         "raven", "sable", "talon", "umber", "vortex", "willow", "yarrow", "zephyr", "report", "invoice", "draft",
         "memo", "budget", "ledger", "summary", "notes", "photo", "backup", "index", "module", "schema", "ticket",
         "sprint", "release", "client", "server", "vendor", "widget")
DIRS = ("data", "logs", "docs", "notes", "inbox", "archive", "reports", "project", "files", "records", "cache",
        "assets", "scripts", "build", "exports", "uploads")
EXTS = ("txt", "log", "csv", "md", "json", "py", "sh", "cfg", "dat", "xml", "pdf", "jpg", "png", "ini")
USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "nick",
         "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter", "yolanda")
LEVELS = ("INFO", "DEBUG", "WARN", "ERROR")
MESSAGES = ("request served", "cache refreshed", "user logged in", "job finished", "connection opened",
            "connection closed", "retrying upload", "disk usage checked", "config reloaded", "queue drained",
            "payment accepted", "session expired", "index rebuilt", "report generated", "token renewed")


class Draw:
    """Seeded choices for a family (every random decision of a task goes through one of these)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def int(self, lo: int, hi: int) -> int:
        """An integer in ``[lo, hi]``, both included."""
        return int(self.rng.integers(lo, hi + 1))

    def pick(self, items: Sequence[Any]) -> Any:
        return items[int(self.rng.integers(len(items)))]

    def sample(self, items: Sequence[Any], k: int) -> list[Any]:
        """``k`` distinct items, in drawn order."""
        return [items[int(i)] for i in self.rng.permutation(len(items))[:k]]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def shuffled(self, items: Sequence[Any]) -> list[Any]:
        return [items[int(i)] for i in self.rng.permutation(len(items))]

    def names(self, k: int, spaces: bool = False) -> list[str]:
        """``k`` distinct file stems (``maple``, ``maple-2``, with ``spaces`` some like ``maple notes``)."""
        out: list[str] = []
        while len(out) < k:
            stem = self.pick(NOUNS)
            if spaces and self.chance(0.3):
                stem = f"{stem} {self.pick(NOUNS)}"
            elif self.chance(0.4):
                stem = f"{stem}-{self.int(1, 99)}"
            if stem not in out:
                out.append(stem)
        return out


@dataclass(frozen=True)
class Generated:
    """One drawn task, before it becomes a Harbor-shaped task: paths are relative to the working directory."""

    instruction: str
    files: dict[str, str | bytes]
    solution: tuple[str, ...]
    """The oracle's shell commands, run in order in the working directory."""
    checks: tuple[dict[str, Any], ...]
    executable: frozenset[str] = field(default_factory=frozenset)
    """Files of ``files`` that start executable."""


FamilyFn = Callable[[Draw, int], Generated]
FAMILIES: dict[str, FamilyFn] = {}


def family(name: str) -> Callable[[FamilyFn], FamilyFn]:
    """Register a family under ``name`` (the order of registration is the order of ``FAMILIES``)."""
    def wrap(fn: FamilyFn) -> FamilyFn:
        FAMILIES[name] = fn
        return fn
    return wrap


def level(difficulty: int, values: Sequence[Any]) -> Any:
    """The value for ``difficulty`` (1-5) from five values, one per level."""
    return values[difficulty - 1]


def sha256(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def q(path: str) -> str:
    """``path`` quoted for bash when it needs quoting (single quotes)."""
    safe = all(c.isalnum() or c in "._-/+=:@" for c in path)
    return path if safe and path else "'" + path.replace("'", "'\\''") + "'"


def unchanged(files: dict[str, str | bytes], paths: Sequence[str]) -> list[dict[str, Any]]:
    """Checks that ``paths`` still hold their original bytes."""
    return [{"kind": "sha256", "path": p, "sha256": sha256(files[p])} for p in paths]

