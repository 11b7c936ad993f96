"""Generated task suites as Harbor tasks: the base of Terminal-v0 and RepoRepair-v0.

A generated env draws tasks (a :class:`agentrl.types.Task` carries only what regenerates it) and
writes each, on first use, as a real Harbor task directory (``instruction.md``, ``task.toml``,
``environment/`` with a Dockerfile, ``tests/test.sh``, ``solution/solve.sh``) into a cache that the
env's per-episode copies share. From there everything is :class:`environments.harbor.HarborEnv`'s:
the workspace is built from the task's Dockerfile, the final tree is graded by its ``tests/test.sh``
in a fresh workspace, ``check_task`` runs the oracle and a no-op agent, ``export_task`` copies the
directory out (``agentrl tasks export``), so what trains here is exactly what Harbor, SkyRL,
verifiers or TRL would run.

A subclass gives :meth:`GeneratedEnv.task_named` (a task from its id), :meth:`GeneratedEnv.write_task`
(the directory) and :meth:`GeneratedEnv.reference_calls` (the oracle as tool calls: the reference
answer, and the reference policy of the multi-turn warm start).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl.types import Task
from environments.harbor.env import HarborEnv
from environments.harbor.task import HarborTask, load_task
from environments.tool_parsers import render_calls
from environments.workspace_env import WorkspaceEnv

BASE_IMAGE = "ubuntu:24.04"  # as the example tasks: Docker builds on our Debian base when it is not here


class TaskCache:
    """Task directories written on first use under a private temporary directory, at most ``capacity``
    of them (the least recently used go first). Shared by an env's copies (a deep copy is the same
    cache); removed when the last of them is gone, or at exit."""

    def __init__(self, prefix: str, capacity: int = 1024) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=f"agentrl-{prefix}-"))
        self.capacity = capacity
        self.entries: OrderedDict[str, HarborTask] = OrderedDict()
        self.lock = threading.RLock()  # a task written under it may ask for a shared directory (RepoRepair)
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.root), True)

    def get(self, name: str, write: Callable[[Path], None]) -> HarborTask:
        """The task directory ``name``, written by ``write(dir)`` the first time."""
        with self.lock:
            if name in self.entries:
                self.entries.move_to_end(name)
                return self.entries[name]
            tmp = Path(tempfile.mkdtemp(dir=self.root, prefix=".new-"))
            write(tmp / name)
            final = self.root / name
            (tmp / name).rename(final)
            tmp.rmdir()
            self.entries[name] = task = load_task(final)
            while len(self.entries) > self.capacity:
                _, old = self.entries.popitem(last=False)
                shutil.rmtree(old.path, ignore_errors=True)
            return task

    def shared(self, key: str, make: Callable[[Path], None]) -> Path:
        """A directory shared by many tasks (a project's pristine copy), made once by ``make(dir)``."""
        path = self.root / "_shared" / key
        with self.lock:
            if not path.exists():
                tmp = Path(tempfile.mkdtemp(dir=self.root, prefix=".new-"))
                make(tmp / key)
                path.parent.mkdir(parents=True, exist_ok=True)
                (tmp / key).rename(path)
                tmp.rmdir()
        return path

    def __deepcopy__(self, memo: dict[int, Any]) -> TaskCache:
        return self


class GeneratedEnv(HarborEnv):
    """A generated suite whose tasks are Harbor task directories written on first use (see the module
    docstring). ``HarborEnv``'s grading, oracle check and export apply unchanged; the constructor is
    ``WorkspaceEnv``'s (there is no folder to read)."""

    def __init__(self, *, name: str, backend: str = "local", max_turns: int = 10, tool_parser: str = "hermes",
                 command_timeout_s: float = 30.0, max_output_chars: int = 4000, max_calls_per_turn: int = 8,
                 system_prompt: str | None = None, pool_size: int = 0, grade_cache: bool = True,
                 grader_pool: int = 0, cache_size: int = 1024, recycle: bool = True,
                 render_mode: str | None = None) -> None:
        WorkspaceEnv.__init__(self, backend=backend, max_turns=max_turns, tool_parser=tool_parser,
                              command_timeout_s=command_timeout_s, max_output_chars=max_output_chars,
                              max_calls_per_turn=max_calls_per_turn, system_prompt=system_prompt,
                              pool_size=pool_size, grade_cache=grade_cache, grader_pool=grader_pool, recycle=recycle,
                              render_mode=render_mode)
        self.path, self.allow_internet = name, False
        self.problems: list[tuple[str, str]] = []
        self.cache = TaskCache(name.lower().replace("/", "-"), cache_size)

    # ------------------------------------------------------------------ what a subclass gives
    def task_named(self, name: str) -> Task:
        """The task whose id is ``name`` (regenerated from the id, or looked up)."""
        raise NotImplementedError

    def write_task(self, task: Task, out: Path) -> None:
        """Write ``task`` as a Harbor task directory at ``out``."""
        raise NotImplementedError

    def reference_calls(self, task: Task) -> list[tuple[str, dict[str, Any]]]:
        """The oracle's work as tool calls ``(tool, arguments)`` (``submit`` is added after them)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ HarborEnv, on generated tasks
    def prompt(self, instruction: str) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system_prompt("/app")}, {"role": "user", "content": instruction}]

    def harbor_task(self, task: Task | str) -> HarborTask:
        t = self.task_named(task) if isinstance(task, str) else task
        return self.cache.get(t.id, lambda out: self.write_task(t, out))

    def reference_answer(self, task: Task) -> str:
        """The oracle's calls and ``submit``, in one action of the env's tool-call format."""
        return render_calls(self.tool_parser, [*self.reference_calls(task), ("submit", {})])


def task_toml(*, agent_timeout_s: float, verifier_timeout_s: float, memory_mb: int, storage_mb: int,
              metadata: dict[str, Any]) -> str:
    """A ``task.toml`` (Harbor's fields) for a generated task; ``metadata`` values are strings or numbers."""
    meta = "\n".join(f"{k} = {_toml(v)}" for k, v in metadata.items())
    return (f'version = "1.0"\n\n[metadata]\nauthor_name = "agentrl"\n{meta}\n\n[agent]\ntimeout_sec = '
            f"{agent_timeout_s:.1f}\n\n[verifier]\ntimeout_sec = {verifier_timeout_s:.1f}\n\n[environment]\ncpus = 1\n"
            f"memory_mb = {memory_mb}\nstorage_mb = {storage_mb}\nallow_internet = false\n")


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return str(v)
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'
