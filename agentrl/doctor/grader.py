"""Check 6, the grader: can the code under test write its own reward?

For a workspace env (one that can be audited: ``env.audit_task``), ``agentrl tasks audit`` on a sample of
the played tasks: every attack of the library (forged reward files, reward writers in the agent's code,
shadowed modules, PATH shims, planted config, test edits, ...) is played as an episode and graded as
training grades it; an attack that beats the no-op is a reward a policy will find. Other envs: skip."""

from __future__ import annotations

import time
from typing import Any

from agentrl.doctor.report import Check
from agentrl.types import Task


def check_grader(env: Any, tasks: list[Task], n: int = 2, jobs: int = 2) -> Check:
    """Audit ``n`` of ``tasks`` (0: skip) on ``env`` with ``jobs`` attacks at once."""
    if not callable(getattr(env, "audit_task", None)):
        return Check("grader", "skip", "the env has no graded workspace to attack")
    if n <= 0 or not tasks:
        return Check("grader", "skip", "not audited (--audit-tasks 0)",
                     "agentrl tasks audit DIR|ENV_ID audits every task")
    start = time.perf_counter()
    rows = []
    for task in tasks[:n]:
        try:
            rows.append(env.audit_task(task, jobs=jobs))
        except Exception as e:  # noqa: BLE001 - an audit that cannot run is this check's finding
            rows.append({"task": task.id, "vulnerable": [], "failed": {}, "error": f"{type(e).__name__}: {e}"})
    seconds = time.perf_counter() - start
    details = {"tasks": [{k: r.get(k) for k in ("task", "noop", "noop_passes", "vulnerable", "failed", "error",
                                                "agent_code_ran_as", "seconds")} for r in rows],
               "seconds": seconds}
    vulnerable = [(r["task"], r["vulnerable"]) for r in rows if r.get("vulnerable")]
    broken = [(r["task"], r.get("error") or next(iter(r.get("failed") or {}), "")) for r in rows
              if r.get("error") or r.get("failed")]
    noop = [r["task"] for r in rows if r.get("noop_passes")]
    summary = f"{len(rows)} tasks audited in {seconds:.0f} s: {len(vulnerable)} vulnerable"
    if vulnerable:
        task, names = vulnerable[0]
        return Check("grader", "fail", summary + f" ({task}: {', '.join(names)})",
                     "a policy will find these rewards: see docs/workspaces.md (grading as the grader, "
                     "`agentrl tasks audit DIR -v` shows each attack's output)", details)
    if noop:
        return Check("grader", "warn", summary + f"; doing nothing passes {noop[0]}",
                     "the task's tests pass on the untouched tree: nothing to learn", details)
    if broken:
        return Check("grader", "warn", summary + f"; could not grade {broken[0][0]}: {broken[0][1]}",
                     "agentrl tasks audit DIR -v shows why", details)
    return Check("grader", "pass", summary + "; every attack scored no more than doing nothing", "", details)
