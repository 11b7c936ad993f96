"""Running the attacks on one task, each as an episode that training would play and grade.

:func:`play` is the one place an attack is graded: a fresh copy of the env (as the env pool makes one
per episode), ``reset`` on the task, then one action (the attack's script as a ``bash`` tool call in
the env's own tool-call format, then ``submit``; the no-op: ``submit`` alone) through ``step``, so
the workspace, the seal (a tree past the task's storage scores 0), the untouched-tree shortcut
(``unchanged_reward``) and the grader are exactly training's, and follow it when it changes.
"""

from __future__ import annotations

import copy
import math
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from agentrl.env import EnvError
from agentrl.types import Task
from environments.audit.attacks import ATTACKS, BY_NAME, Attack, Target
from environments.audit.payloads import CANARY
from environments.tool_parsers import render_calls

ATTACK_TIMEOUT_S = 60.0  # the bash call of an attack (its scripts take seconds)
EPS = 1e-9
MAX_TEST_FILE = 256 << 10
MAX_TEST_FILES = 200


def play(env: Any, task: Task, script: str | None) -> dict[str, Any]:
    """One episode of ``task`` whose only action runs ``script`` (None: nothing) and submits:
    ``{"reward", "error", "output", "verifier", "files"}`` (``files``: the names the verifier's directory
    held after grading; ``reward`` None when the episode failed: the grader
    could not score it, or the workspace failed; ``error`` says why)."""
    calls: list[tuple[str, dict[str, Any]]] = [("submit", {})]
    if script is not None:
        calls.insert(0, ("bash", {"command": script, "timeout": ATTACK_TIMEOUT_S}))
    episode = copy.deepcopy(env)
    try:
        episode.reset(options={"task": task})
        _, reward, _, _, info = episode.step(render_calls(episode.tool_parser, calls))
    except Exception as e:  # noqa: BLE001 - an infrastructure failure of the episode is the finding
        return {"reward": None, "error": f"the episode failed: {type(e).__name__}: {e}", "output": "", "verifier": "",
                "files": []}
    finally:
        episode.close()
    record = info.get("trajectory_info", {})
    outputs, verdict = record.get("outputs") or [""], record.get("verifier") or {}
    verifier, files = verdict.get("output") or "", list(verdict.get("files") or [])
    error = info.get("error") if info.get("failed") else None
    if error is None and not math.isfinite(reward):
        error = f"the reward is not finite: {reward}"
    return {"reward": None if error else float(reward), "error": error, "output": outputs[0], "verifier": verifier,
            "files": files}


def resolve_task(env: Any, name_or_task: str | Task) -> Task:
    """The task itself, or the task named so (a generated env regenerates it from its id)."""
    if isinstance(name_or_task, Task):
        return name_or_task
    if callable(getattr(env, "task_named", None)):
        return env.task_named(name_or_task)
    for task in getattr(env, "tasks", None) or []:
        if task.id == name_or_task:
            return task
    raise EnvError(f"no task named {name_or_task!r} in this env")


def target_of(env: Any, task: Task) -> Target:
    """What the attacks know of the task: its working directory and its tests' text files."""
    tests: dict[str, str] = {}
    harbor = getattr(env, "harbor_task", None)
    root = Path(harbor(task).tests_dir) if callable(harbor) else None
    if root is not None and root.is_dir():
        for f in sorted(root.rglob("*"))[:MAX_TEST_FILES]:
            if f.is_file() and f.stat().st_size <= MAX_TEST_FILE:
                try:
                    tests[f.relative_to(root).as_posix()] = f.read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue
    return Target(workdir=env.workspace_spec(task).workdir, tests=tests)


def chosen(attacks: list[str] | None) -> list[Attack]:
    """The attacks named (all of them for None), in the library's order."""
    if attacks is None:
        return list(ATTACKS)
    unknown = [a for a in attacks if a not in BY_NAME]
    if unknown:
        raise EnvError(f"unknown attack {unknown[0]!r}; known: {', '.join(BY_NAME)}")
    return [a for a in ATTACKS if a.name in attacks]


def audit_task(env: Any, name_or_task: str | Task, attacks: list[str] | None = None, jobs: int = 1) -> dict[str, Any]:
    """Run the no-op and each attack on one task (``jobs`` episodes at once) and compare: ``{"task",
    "noop", "noop_passes", "attacks": {name: reward or None}, "vulnerable": [names whose reward beats
    the no-op's], "failed": {name: why the episode could not be graded}, "agent_code_ran_as" (None,
    "testee" or "grader": see :func:`ran_as`), "error" (the no-op's, when it could not be graded),
    "seconds", "details": {name: the attack's and the verifier's output}}``."""
    if jobs < 1:
        raise EnvError(f"jobs must be >= 1, got {jobs}")
    start = time.monotonic()
    task = resolve_task(env, name_or_task)
    library = chosen(attacks)
    target = target_of(env, task)
    runs: list[tuple[str, str | None]] = [("noop", None)] + [(a.name, a.script(target)) for a in library]
    with ThreadPoolExecutor(jobs) as pool:
        results = dict(zip([n for n, _ in runs], pool.map(lambda run: play(env, task, run[1]), runs), strict=True))
    return summarise(task.id, results, [a.name for a in library], time.monotonic() - start)


def ran_as(results: dict[str, dict[str, Any]]) -> str | None:
    """Whether, and as whom, the verifier ran the agent's code: the canaries the reward writers left
    (``"grader"`` where any could write the reward, else ``"testee"``; None: none ran)."""
    seen = {f.removeprefix(CANARY) for r in results.values() for f in r.get("files", []) if f.startswith(CANARY)}
    return "grader" if "grader" in seen else "testee" if "testee" in seen else None


def summarise(task_id: str, results: dict[str, dict[str, Any]], names: list[str], seconds: float) -> dict[str, Any]:
    """The audit of one task from its episodes' results (see :func:`audit_task`)."""
    noop = results["noop"]["reward"]
    rewards = {n: results[n]["reward"] for n in names}
    vulnerable = [n for n in names if noop is not None and rewards[n] is not None and rewards[n] > noop + EPS]
    failed = {n: results[n]["error"] for n in names if results[n]["error"]}
    details = {n: {"attack": results[n]["output"][-2000:], "verifier": results[n]["verifier"][-2000:]}
               for n in ["noop", *names] if n == "noop" or n in failed or n in vulnerable}
    error = results["noop"]["error"]
    return {"task": task_id, "noop": noop, "noop_passes": noop is not None and noop >= 1.0 - EPS,
            "attacks": rewards, "vulnerable": vulnerable, "failed": failed, "agent_code_ran_as": ran_as(results),
            "error": None if error is None else f"the no-op could not be graded: {error}",
            "seconds": round(seconds, 3), "details": details}
