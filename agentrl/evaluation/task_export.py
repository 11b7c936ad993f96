"""``agentrl tasks export ENV_ID OUT --n N [--seed S] [KEY=VALUE ...]``: tasks of a workspace env as
Harbor task directories, so the same tasks run in Harbor, SkyRL, verifiers or TRL.

Any env that can write a task as a Harbor directory (``export_task(task, out)``: Terminal-v0,
RepoRepair-v0, ``harbor:PATH``) exports: ``N`` distinct tasks drawn with ``--seed`` (the same seed,
the same tasks; ``KEY=VALUE`` arguments are the env's keyword arguments, values read as YAML:
``difficulty=3``, ``split=test``, ``families=[grep_count,csv_sum]``), each in ``OUT/TASK_ID`` with its
oracle as ``solution/solve.sh``. ``agentrl tasks check OUT`` then runs each oracle and a no-op agent.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, TextIO

from agentrl.env import EnvError, fixed_tasks, make


def parse_kwargs(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as env keyword arguments (values read as YAML); one-line errors."""
    import yaml

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.isidentifier():
            raise EnvError(f"expected KEY=VALUE (an env keyword argument), got {pair!r}")
        try:
            out[key] = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError as e:
            raise EnvError(f"{key}={raw}: not a YAML value ({str(e).splitlines()[0]})") from None
    return out


def export_tasks(env_id: str, out: str, n: int, seed: int = 0, kwargs: dict[str, Any] | None = None,
                 stream: TextIO | None = None) -> int:
    """Write ``n`` tasks of ``env_id`` under ``out`` (see the module docstring); the exit status."""
    stream = stream or sys.stdout  # looked up now: a stream bound at import may have been closed since
    if n < 1:
        raise EnvError(f"--n must be >= 1, got {n}")
    dest = Path(out)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise EnvError(f"{out} exists and is not an empty directory; give a new one")
    env = make(env_id, **(kwargs or {}))
    try:
        if not callable(getattr(env, "export_task", None)):
            raise EnvError(f"{env_id} cannot write its tasks as Harbor task directories (it has no export_task); "
                           f"workspace envs can: agentrl/Terminal-v0, agentrl/RepoRepair-v0, harbor:PATH")
        tasks = fixed_tasks(env, n, seed)
        dest.mkdir(parents=True, exist_ok=True)
        for task in tasks:
            env.export_task(task, dest / _dir_name(task.id))
    finally:
        env.close()
    short = f" (the env has only {len(tasks)} distinct tasks)" if len(tasks) < n else ""
    print(f"wrote {len(tasks)} task(s) of {env_id} to {out}{short}; `agentrl tasks check {out}` runs each oracle "
          f"and a no-op agent", file=stream)
    return 0


def _dir_name(task_id: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", task_id).strip("._")
    return name or "task"
