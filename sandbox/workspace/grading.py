"""Grading a final tree where the agent cannot reach: Harbor's verifier protocol, after the agent.

``verify(spec, tree, tests_dir)`` opens a **fresh** workspace on the agent's final tree (``seal()``
ended every process of the agent first, and the tree leaves out what it must: see
:mod:`sandbox.workspace.base`), copies the tests in only now (``/tests``, the grader's, read-only to
the code under test) and runs the verifier, ``/bin/bash /tests/test.sh``, so that **the code under
test cannot reach the reward channel** (the runtime's ``_ws_grade``):

- the verifier's shell runs as a *grader* identity; every program it starts (the agent's script, a
  test suite importing the agent's package, git on the agent's repository) runs as the *testee*,
  which can neither write, replace, remove nor lock ``/logs/verifier/reward.txt`` or ``reward.json``;
  a program marked ``AGENTRL_GRADER=1`` in front of its command keeps the grader's identity (a
  verifier's own checker that never runs the agent's code);
- the verifier's environment comes from nothing the agent wrote: a fresh ``HOME`` outside the tree,
  a ``PATH`` of directories only root could ever write, a fresh ``/tmp``, git told to ignore every
  program the agent's repositories could name, no ``PYTHONPATH``, ``PYTHONSAFEPATH=1`` (neither the
  working directory nor a script's directory is imported from), no user site-packages.

The reward is ``/logs/verifier/reward.txt`` (one number) or ``reward.json`` (its ``"reward"``, or its
only number), and must be finite and within the task's range (``reward_range``, default
``DEFAULT_RANGE``); named rewards must be finite numbers. A verifier that times out, fails without
writing a reward, writes one that is not a finite number in range, or cannot separate the grader
from the testee in this image is an infrastructure failure (``Verdict.error``: the sample leaves
the loss, loudly), never a 0 and never a NaN in a tensor.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from .base import Tree, WorkspaceError, WorkspaceSpec

VERIFIER_ENV = (("PYTHONSAFEPATH", "1"), ("PYTHONNOUSERSITE", "1"), ("PYTHONDONTWRITEBYTECODE", "1"),
                ("PYTHONPATH", ""))
DEFAULT_RANGE = (-1.0, 1.0)
TEST_SH = "/tests/test.sh"


@dataclass(frozen=True)
class Verdict:
    """The grader's answer: ``reward`` (None when ``error`` says why there is none)."""

    reward: float | None
    rewards: dict[str, float] = field(default_factory=dict)
    output: str = ""
    error: str | None = None
    seconds: float = 0.0
    files: tuple[str, ...] = ()
    """The names ``/logs/verifier`` held after the verifier ran (its reports: pytest's ctrf file, ...)."""


def verify(spec: WorkspaceSpec, tree: Tree, tests_dir: str, *, backend: str = "local", timeout_s: float = 600.0,
           reward_range: tuple[float, float] = DEFAULT_RANGE, graders: Any = None) -> Verdict:
    """Grade ``tree`` with the tests in host directory ``tests_dir`` (see the module docstring). ``graders``
    (a :class:`sandbox.workspace.pool.GraderPool`): the grading workspace is one started ahead, bare, that
    receives the tree, instead of one started now with it."""
    from . import open_workspace

    start = time.monotonic()
    env = tuple((k, v) for k, v in spec.env if k not in dict(VERIFIER_ENV)) + VERIFIER_ENV
    roomy = spec.limits.replace(storage_mb=2 * spec.limits.storage_mb + 64)  # the tree may fill the agent's
    grading = spec.replace(env=env, limits=roomy, name=f"{spec.name} (verifier)")
    try:
        if graders is None:
            ws = open_workspace(grading, backend, tree=tree)
        else:
            ws = graders.acquire(grading)
            ws.receive(tree, grading)  # closes it when the tree cannot be restored
        try:
            ws.put_dir(tests_dir, "/tests")
            r = ws.grade(["/bin/bash", TEST_SH], timeout_s)  # every process of it has ended when it returns
        finally:
            if graders is None:
                ws.close()
            else:
                graders.release(ws)  # closed in the background: the verdict does not wait for a teardown
    except WorkspaceError as e:
        return Verdict(None, error=f"the verifier could not run: {e}", seconds=time.monotonic() - start)
    seconds = time.monotonic() - start
    files = tuple(r.get("files", ()))
    if r["timed_out"]:
        return Verdict(None, output=r["output"], error=f"the verifier ran past its {timeout_s:g} s timeout",
                       seconds=seconds, files=files)
    if r["problem"]:
        return Verdict(None, output=r["output"], error=f"the verifier could not be trusted: {r['problem']}",
                       seconds=seconds, files=files)
    reward, rewards, problem = read_reward(r["rewards"], reward_range)
    if problem:
        problem += f" (exit code {r['exit_code']})"
    return Verdict(reward, rewards, r["output"], problem, seconds, files)


def read_reward(files: dict[str, str | None], reward_range: tuple[float, float] = DEFAULT_RANGE
                ) -> tuple[float | None, dict[str, float], str | None]:
    """(reward, named rewards, why there is none) from the reward files' texts (name -> text, None when
    not written): ``reward.txt`` first (one number), else ``reward.json``."""
    for name in ("reward.txt", "reward.json"):
        raw = (files.get(name) or "").strip()
        if not raw:
            continue
        try:
            value, named = _parse(name, raw)
        except (ValueError, TypeError, KeyError, OverflowError, RecursionError):
            return None, {}, f"the verifier wrote an unreadable {name}: {raw[:80]!r}"
        bad = [k for k, v in named.items() if not math.isfinite(v)]
        if not math.isfinite(value) or bad:
            return None, {}, f"the verifier's {name} holds a reward that is not a finite number: {raw[:80]!r}"
        lo, hi = reward_range
        if not lo <= value <= hi:
            return None, {}, (f"the verifier's reward {value:g} is outside the task's range [{lo:g}, {hi:g}] "
                              f"(task.toml [verifier] reward_range sets it)")
        return value, named, None
    return None, {}, "the verifier wrote no /logs/verifier/reward.txt or reward.json"


def _parse(name: str, raw: str) -> tuple[float, dict[str, float]]:
    if name == "reward.txt":
        return _number(raw), {}
    data: Any = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("not an object")
    named = {str(k): _number(v) for k, v in data.items()}
    if "reward" in named:
        return named["reward"], named
    if len(named) == 1:
        return next(iter(named.values())), named
    raise KeyError("reward")


def _number(v: Any) -> float:
    """A JSON or text number as a float (``true``, strings holding words and containers are refused)."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise TypeError(f"not a number: {v!r}")
    return float(v)
