"""``agentrl tasks list | check DIR``: what a folder of Harbor tasks holds, and whether each task is sound.

``check`` runs, for every task, the oracle (``solution/solve.sh``) and a no-op agent in fresh
workspaces and grades both with the task's own verifier: a sound task gives the oracle 1.0 and the
no-op 0.0. It prints a table (task, oracle reward, no-op reward, seconds), or with ``--json`` one line
per task ``{"task", "oracle", "noop", "seconds", "error"}`` (a reward is null, and ``error`` says why,
when the task could not run); it exits 1 when any oracle scores < 1, any no-op > 0, or any task
cannot run. ``list`` prints each task with its first instruction line and limits, and the tasks that
cannot load, each in one line (exit 1 if there are any).

The tasks are reached through the env family (``agentrl.env.make("harbor:DIR")``; agentrl never
imports ``environments``): an env that offers ``tasks``, ``problems``, ``describe_task(name)`` and
``check_task(name)`` works here, so a generated suite that can also write itself as Harbor directories
(``export_task``) is checked the same way.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TextIO

from agentrl.env import EnvError, make

JSON_KEYS = ("task", "oracle", "noop", "seconds", "error")


def task_env(path: str, backend: str) -> Any:
    """The ``harbor:`` env over ``path`` with every task, malformed ones listed in ``env.problems``."""
    env = make(f"harbor:{path}", backend=backend, skip_invalid=True)
    if not all(hasattr(env, a) for a in ("tasks", "problems", "describe_task", "check_task")):
        raise EnvError(f"harbor:{path}: this env cannot check its tasks")
    return env


def list_tasks(path: str, backend: str = "local", out: TextIO = sys.stdout) -> int:
    """Print what ``path`` holds; 1 when some task cannot load."""
    env = task_env(path, backend)
    rows = [env.describe_task(t.id) for t in env.tasks]
    width = max([len(r["task"]) for r in rows] + [len(n) for n, _ in env.problems] + [4])
    for r in rows:
        limits = (f"agent {r['agent_timeout_s']:g} s, verifier {r['verifier_timeout_s']:g} s, {r['cpus']:g} cpu, "
                  f"{r['memory_mb']} MB{'' if r['solution'] else ', no solution'}")
        print(f"{r['task']:<{width}}  {r['instruction'][:60]:<60}  {limits}", file=out)
    for name, problem in env.problems:
        print(f"{name:<{width}}  CANNOT RUN: {problem}", file=out)
    print(f"{len(rows)} task(s) in {path}" + (f", {len(env.problems)} cannot run" if env.problems else ""), file=out)
    return 1 if env.problems else 0


def check_tasks(path: str, backend: str = "local", as_json: bool = False, jobs: int = 1, verbose: bool = False,
                out: TextIO = sys.stdout) -> int:
    """Check every task under ``path`` (see the module docstring); the exit status."""
    if jobs < 1:
        raise EnvError(f"--jobs must be >= 1, got {jobs}")
    env = task_env(path, backend)
    results = [{"task": name, "oracle": None, "noop": None, "seconds": 0.0, "error": problem}
               for name, problem in env.problems]
    names = [t.id for t in env.tasks]
    width = max([len(n) for n in names] + [len(r["task"]) for r in results] + [4])
    if not as_json:
        print(f"{'task':<{width}}  {'oracle':>6}  {'no-op':>6}  {'seconds':>7}", file=out)
    for r in results:
        _show(r, as_json, width, verbose, out)
    with ThreadPoolExecutor(jobs) as pool:
        for r in pool.map(env.check_task, names):  # in order, each shown as soon as it and those before are done
            results.append(r)
            _show(r, as_json, width, verbose, out)
    bad = [r for r in results if not _passed(r)]
    if not as_json:
        print(f"{len(results) - len(bad)} of {len(results)} task(s) pass (oracle 1.0, no-op 0.0)"
              + (f"; failing: {', '.join(r['task'] for r in bad)}" if bad else ""), file=out)
    return 1 if bad else 0


def _passed(r: dict[str, Any]) -> bool:
    return r["error"] is None and r["oracle"] is not None and r["oracle"] >= 1.0 and r["noop"] is not None \
        and r["noop"] <= 0.0


def _show(r: dict[str, Any], as_json: bool, width: int, verbose: bool, out: TextIO) -> None:
    if as_json:
        print(json.dumps({k: r[k] for k in JSON_KEYS}), file=out, flush=True)
        return
    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    mark = "" if _passed(r) else "  FAIL" + (f": {r['error']}" if r["error"] else "")
    print(f"{r['task']:<{width}}  {num(r['oracle']):>6}  {num(r['noop']):>6}  {r['seconds']:>7.1f}{mark}",
          file=out, flush=True)
    if verbose and not _passed(r):
        for who, detail in r.get("details", {}).items():
            for key, text in detail.items():
                if text.strip():
                    tail = "\n".join(text.strip().splitlines()[-15:])
                    print(f"    {who} {key}:\n" + "\n".join("      " + ln for ln in tail.splitlines()), file=out)
