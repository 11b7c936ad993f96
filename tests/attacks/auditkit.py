"""Helpers of the shipped-task audits (imported by name: this directory is on sys.path): export tasks
with ``agentrl tasks export``, audit a folder with ``agentrl tasks audit`` and insist on a clean report."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from agentrl.cli import main
from sandbox.workspace.leftovers import leftovers

ROOT = Path(__file__).resolve().parents[2]


def nothing_left(wait_s: float = 15.0) -> dict:
    """What this process's workspaces left (empty lists: nothing), after up to ``wait_s`` for closing ones."""
    deadline = time.monotonic() + wait_s
    while any((left := leftovers(os.getpid())).values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def export(out: Path, env_id: str, n: int, key: str, values: list[str], *extra: str) -> Path:
    """``agentrl tasks export`` of ``n`` tasks for each of ``values`` of the list keyword ``key``, into one
    folder ``out`` (a folder of Harbor tasks, as ``agentrl tasks audit`` reads it)."""
    out.mkdir(parents=True, exist_ok=True)
    for value in values:
        part = out.parent / f"{out.name}-{value}"
        assert main(["tasks", "export", env_id, str(part), "--n", str(n), f"{key}=[{value}]", *extra]) == 0
        for task in part.iterdir():
            shutil.move(str(task), out / task.name)
        part.rmdir()
    return out


STORAGE = "huge_file,deep_tree,sparse_file"  # attacks on the sandbox, not on a task's verifier


def audit_clean(path: Path, backend: str, capsys, jobs: int = 2, skip: str | None = None) -> list[dict]:
    """``agentrl tasks audit PATH --json``: its rows, asserting that it exits 0 and reports nothing."""
    capsys.readouterr()
    status = main(["tasks", "audit", str(path), "--json", "--jobs", str(jobs), "--backend", backend,
                   *(["--skip", skip] if skip else [])])
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    bad = [(r["task"], r["vulnerable"], r["failed"], r["error"]) for r in rows
           if r["vulnerable"] or r["failed"] or r["error"] or r["noop_passes"]]
    assert status == 0 and rows and not bad, bad
    return rows


def sample(folder: Path, out: Path, n: int = 1) -> Path:
    """A folder with the first ``n`` tasks of ``folder`` (copies)."""
    out.mkdir(parents=True, exist_ok=True)
    for task in sorted(folder.iterdir())[:n]:
        shutil.copytree(task, out / task.name, symlinks=True)
    return out
