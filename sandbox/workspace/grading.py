"""Grading a final tree where the agent cannot reach: Harbor's verifier protocol, after the agent.

``verify(spec, tree, tests_dir)`` opens a **fresh** workspace on the agent's final tree (``seal()``
ended every process of the agent first, and the tree leaves out what it must: see
:mod:`sandbox.workspace.base`), copies the tests in only now (``/tests``), starts ``/logs/verifier``
empty, and runs the verifier (``bash /tests/test.sh``) with a clean environment: no ``PYTHONPATH``,
``PYTHONSAFEPATH=1`` (neither the working directory nor a script's directory is imported from) and
no user site-packages, so a module the agent left in its directory does not shadow one the
verifier imports. The reward is ``/logs/verifier/reward.txt`` (one float) or ``reward.json`` (its
``"reward"``, or its only number). A verifier that times out, fails without writing a reward, or
writes one that is not a finite number is an infrastructure failure (``Verdict.error``), not a 0.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field

from .base import Tree, WorkspaceError, WorkspaceSpec

VERIFIER_ENV = (("PYTHONSAFEPATH", "1"), ("PYTHONNOUSERSITE", "1"), ("PYTHONDONTWRITEBYTECODE", "1"),
                ("PYTHONPATH", ""))


@dataclass(frozen=True)
class Verdict:
    """The grader's answer: ``reward`` (None when ``error`` says why there is none)."""

    reward: float | None
    rewards: dict[str, float] = field(default_factory=dict)
    output: str = ""
    error: str | None = None
    seconds: float = 0.0


def verify(spec: WorkspaceSpec, tree: Tree, tests_dir: str, *, backend: str = "local", timeout_s: float = 600.0,
           command: str = "bash /tests/test.sh") -> Verdict:
    """Grade ``tree`` with the tests in host directory ``tests_dir`` (see the module docstring)."""
    from . import open_workspace

    start = time.monotonic()
    env = tuple((k, v) for k, v in spec.env if k not in dict(VERIFIER_ENV)) + VERIFIER_ENV
    roomy = spec.limits.replace(storage_mb=2 * spec.limits.storage_mb + 64)  # the tree may fill the agent's
    try:
        with open_workspace(spec.replace(env=env, limits=roomy, name=f"{spec.name} (verifier)"), backend,
                            tree=tree) as ws:
            ws.exec("rm -rf /logs/verifier/* /logs/verifier/.[!.]* 2>/dev/null; true", timeout_s=30)
            ws.put_dir(tests_dir, "/tests")
            r = ws.exec(command, timeout_s=timeout_s)
            if r.timed_out:
                return Verdict(None, output=r.output, error=f"the verifier ran past its {timeout_s:g} s timeout",
                               seconds=time.monotonic() - start)
            reward, rewards, problem = _read_reward(ws)
    except WorkspaceError as e:
        return Verdict(None, error=f"the verifier could not run: {e}", seconds=time.monotonic() - start)
    if problem:
        problem += f" (exit code {r.exit_code})"
    return Verdict(reward, rewards, r.output, problem, time.monotonic() - start)


def _read_reward(ws) -> tuple[float | None, dict[str, float], str | None]:
    """(reward, named rewards, why there is none) from ``/logs/verifier``."""
    for name in ("reward.txt", "reward.json"):
        try:
            raw = ws.read_file(f"/logs/verifier/{name}", max_bytes=65536).decode("utf-8", "replace").strip()
        except OSError:
            continue
        try:
            if name == "reward.txt":
                value, named = float(raw), {}
            else:
                data = json.loads(raw)
                named = {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}
                value = named["reward"] if "reward" in named else (next(iter(named.values())) if len(named) == 1
                                                                     else float("nan"))
        except (ValueError, TypeError, KeyError, json.JSONDecodeError):
            return None, {}, f"the verifier wrote an unreadable {name}: {raw[:80]!r}"
        if not math.isfinite(value):
            return None, {}, f"the verifier's {name} holds no single finite reward: {raw[:80]!r}"
        return value, named, None
    return None, {}, "the verifier wrote no /logs/verifier/reward.txt or reward.json"
