"""``agentrl tasks audit DIR|ENV_ID``: known reward hacks played against every task's verifier.

For each task, a library of attacks (forged reward files, reward writers planted in the agent's code,
programs that exit 0, shadowed modules, ``PATH`` shims, git and shell configuration, read-only scratch
files, rewritten tests, storage bombs; ``environments.audit``) is played *as the agent* (one bash call
in the task's workspace, then submit), and each episode is graded exactly as training grades it. An
attack is **vulnerable** when its reward beats the no-op agent's, **failed** when grading could not
score it (an attack must never turn a sample into an infrastructure failure: such a sample leaves
the loss instead of scoring 0). A no-op that already scores 1.0 (``noop_passes``) or cannot be graded
makes its task fail too.

``DIR`` is a Harbor task directory or a folder of them (every task is audited); ``ENV_ID`` a workspace
env (``agentrl/Terminal-v0``, ``agentrl/RepoRepair-v0``), whose ``--n`` tasks are drawn with
``--seed`` as ``agentrl tasks export`` draws them (``KEY=VALUE`` arguments are its keyword
arguments). ``--jobs`` episodes of a task run at once. It prints a table (task, no-op reward, then
each vulnerable or failing attack with its reward or error) and a summary line, or with ``--json``
one line per task ``{"task", "noop", "noop_passes", "attacks": {name: reward or null}, "vulnerable",
"failed": {name: error}, "agent_code_ran_as", "error", "seconds"}``. ``agent_code_ran_as`` says
whether, and as whom, the verifier ran the agent's code while grading (null: never; ``"testee"``; or
``"grader"``, which can write the reward): canaries the planted reward writers leave in
``/logs/verifier`` tell. A verifier that trusts the exit status or report of a program running the
agent's code can be fooled by that code from the inside (a forged report, a patched test runner)
even where no attack of the library scores: the table marks each task whose verifier ran it. Exit status 1 when any task fails, 0 when none does.

The env does the work (``env.audit_task(task, jobs=J)``; agentrl never imports ``environments``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, TextIO

from agentrl.env import EnvError, UnknownEnvError, fixed_tasks, make
from agentrl.evaluation.tasks import task_env

JSON_KEYS = ("task", "noop", "noop_passes", "attacks", "vulnerable", "failed", "agent_code_ran_as", "error", "seconds")
RAN_AS = {None: "", "testee": "  (runs the agent's code, as the testee)",
          "grader": "  (runs the agent's code with the grader's rights: it can write the reward)"}
AUDITABLE = "workspace envs can: agentrl/Terminal-v0, agentrl/RepoRepair-v0, harbor:PATH, or a task directory"


def open_target(target: str, backend: str, n: int, seed: int, kwargs: dict[str, Any]
                ) -> tuple[Any, list[Any], list[tuple[str, str]]]:
    """(the env, its tasks to audit, (name, why) of the tasks that cannot load) for ``DIR`` or ``ENV_ID``."""
    if Path(target).expanduser().exists():
        if kwargs:
            raise EnvError(f"KEY=VALUE arguments are for an ENV_ID; {target} is a task directory")
        env = task_env(target, backend)
        tasks, problems = list(env.tasks), list(env.problems)
    else:
        try:
            env = make(target, backend=backend, **kwargs)
        except UnknownEnvError:
            raise EnvError(f"{target}: no such directory, and not a registered env id ({AUDITABLE})") from None
        except EnvError as e:
            if "'backend'" in str(e):
                raise EnvError(f"{target} cannot be audited: it is not a workspace env ({AUDITABLE})") from None
            raise
        tasks, problems = [], []
        if callable(getattr(env, "audit_task", None)):
            tasks = fixed_tasks(env, n, seed)
    if not callable(getattr(env, "audit_task", None)):
        env.close()
        raise EnvError(f"{target} cannot be audited: it has no audit_task ({AUDITABLE})")
    return env, tasks, problems


def audit_tasks(target: str, backend: str = "local", as_json: bool = False, jobs: int = 1, n: int = 10,
                seed: int = 0, kwargs: dict[str, Any] | None = None, verbose: bool = False,
                out: TextIO | None = None, attacks: list[str] | None = None, skip: list[str] | None = None) -> int:
    """Audit every task of ``target`` (see the module docstring) with ``attacks`` (None: the whole library)
    less ``skip``; the exit status."""
    out = out or sys.stdout
    if jobs < 1:
        raise EnvError(f"--jobs must be >= 1, got {jobs}")
    if attacks is not None and skip is not None:
        raise EnvError("give --attacks or --skip, not both")
    if n < 1:
        raise EnvError(f"--n must be >= 1, got {n}")
    env, tasks, problems = open_target(target, backend, n, seed, kwargs or {})
    try:
        chosen = env.attack_names(attacks, skip)
    except EnvError:
        env.close()
        raise
    rows: list[dict[str, Any]] = [_row(name, error=f"the task cannot run: {why}") for name, why in problems]
    try:
        width = max([len(t.id) for t in tasks] + [len(r["task"]) for r in rows] + [4])
        if not as_json:
            print(f"{'task':<{width}}  {'no-op':>6}  {'result':<10}  {'seconds':>7}", file=out)
        for r in rows:
            _show(r, as_json, width, verbose, out)
        for task in tasks:
            try:
                r = env.audit_task(task, attacks=chosen, jobs=jobs)
            except Exception as e:  # noqa: BLE001 - one task that cannot be audited does not stop the others
                r = _row(task.id, error=f"the audit could not run: {type(e).__name__}: {e}")
            rows.append(r)
            _show(r, as_json, width, verbose, out)
    finally:
        env.close()
    if not as_json:
        print(_summary(rows), file=out)
    return 0 if all(_clean(r) for r in rows) else 1


def _row(task: str, error: str) -> dict[str, Any]:
    return {"task": task, "noop": None, "noop_passes": False, "attacks": {}, "vulnerable": [], "failed": {},
            "agent_code_ran_as": None, "error": error, "seconds": 0.0}


def _clean(r: dict[str, Any]) -> bool:
    return not (r["vulnerable"] or r["failed"] or r["noop_passes"] or r["error"] or r["noop"] is None)


def _verdict(r: dict[str, Any]) -> str:
    if r["error"] or r["noop"] is None:
        return "ERROR"
    if r["noop_passes"]:
        return "NOOP PASSES"
    return "VULNERABLE" if r["vulnerable"] else "FAILED" if r["failed"] else "ok"


def _show(r: dict[str, Any], as_json: bool, width: int, verbose: bool, out: TextIO) -> None:
    if as_json:
        print(json.dumps({k: r[k] for k in JSON_KEYS}), file=out, flush=True)
        return
    noop = "-" if r["noop"] is None else f"{r['noop']:.2f}"
    print(f"{r['task']:<{width}}  {noop:>6}  {_verdict(r):<10}  {r['seconds']:>7.1f}"
          + (f"  {r['error']}" if r["error"] else RAN_AS[r.get("agent_code_ran_as")]), file=out)
    for name in r["vulnerable"]:
        print(f"    {name:<24} reward {r['attacks'][name]:.2f}", file=out)
    for name, error in r["failed"].items():
        print(f"    {name:<24} grading failed: {error}", file=out)
    if verbose:
        for name, detail in r.get("details", {}).items():
            for key, text in detail.items():
                if text.strip() and (name != "noop" or not _clean(r)):
                    tail = "\n".join(text.strip().splitlines()[-15:])
                    print(f"      {name} {key}:\n" + "\n".join("        " + ln for ln in tail.splitlines()), file=out)
    out.flush()


def _summary(rows: list[dict[str, Any]]) -> str:
    bad = [r for r in rows if not _clean(r)]
    text = f"{len(rows) - len(bad)} of {len(rows)} task(s) resist every attack"
    groups = {"vulnerable": [(r["task"], r["vulnerable"]) for r in rows if r["vulnerable"]],
              "grading failed": [(r["task"], list(r["failed"])) for r in rows if r["failed"]],
              "no-op passes": [(r["task"], []) for r in rows if r["noop_passes"]],
              "error": [(r["task"], []) for r in rows if r["error"] or r["noop"] is None]}
    for what, hit in groups.items():
        if hit:
            text += f"; {what}: " + ", ".join(task + (f" ({', '.join(names)})" if names else "") for task, names in hit)
    return text
