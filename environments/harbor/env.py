"""``harbor:PATH``: Harbor task directories as a multi-turn env (an agent in a computer, with tools).

``agentrl.make("harbor:examples/tasks", backend="local", max_turns=30, tool_parser="hermes")``. Each
task's workspace starts from its ``environment/`` (the local backend runs the Dockerfile's
``WORKDIR``, ``COPY``, ``ENV`` and ``RUN`` lines on its own tree; Docker builds it), the agent gets
``instruction.md`` and the tools of :mod:`environments.workspace_tools`, and the final tree is graded
by the task's ``tests/test.sh`` in a fresh workspace (:func:`sandbox.workspace.grading.verify`), which
is the only place the tests ever exist. ``task.toml``'s ``[agent] timeout_sec`` bounds the time the
agent's commands take, ``[verifier] timeout_sec`` the verifier's, ``[environment]`` the workspace's
cpus, memory and storage; internet stays off unless ``allow_internet=True`` is given (then the
task's own setting applies). See :class:`environments.workspace_env.WorkspaceEnv` for the episode.

For task authors and ``agentrl tasks``: :meth:`HarborEnv.check_task` runs the oracle
(``solution/solve.sh``, copied to ``/solution``) and a no-op agent on one task and grades both;
:meth:`HarborEnv.describe_task` says what a task holds; :meth:`HarborEnv.export_task` writes a task
directory (``agentrl tasks export`` reuses it for generated suites).
"""

from __future__ import annotations

import base64
import re
import shlex
import time
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.env import EnvError
from agentrl.types import Task
from environments.harbor.task import HarborTask, TaskError, copy_task, find_tasks
from environments.tool_parsers import render_calls
from environments.workspace_env import WorkspaceEnv
from sandbox.workspace import BuildError, Tree, WorkspaceError, WorkspaceLimits, WorkspaceSpec, open_workspace
from sandbox.workspace.dockerfile import parse_dockerfile
from sandbox.workspace.grading import Verdict, verify

REFERENCE_DIR = "/tmp/solution"  # where the reference action writes the solution (the agent cannot create /solution)


def find_in_folders(path: str) -> tuple[list[HarborTask], list[tuple[str, str]]]:
    """The tasks (and problems) of every folder of the comma-separated ``path``, in its order; a task name
    found twice is an :class:`EnvError` (task ids are names)."""
    found: list[HarborTask] = []
    problems: list[tuple[str, str]] = []
    for folder in [p.strip() for p in path.split(",") if p.strip()] or [path]:
        try:
            tasks, bad = find_tasks(folder)
        except TaskError as e:
            raise EnvError(f"harbor:{path}: {e}") from None
        seen = {t.name: t.path for t in found} | {name: folder for name, _ in problems}
        for name in [t.name for t in tasks] + [n for n, _ in bad]:
            if name in seen:
                raise EnvError(f"harbor:{path}: two tasks are named {name!r} ({seen[name]} and {folder}); task "
                               f"names are their ids: rename one directory")
        found, problems = found + tasks, problems + bad
    return sorted(found, key=lambda t: t.name), sorted(problems)


def make_env(path: str, **kwargs: Any) -> HarborEnv:
    """The ``harbor:`` family's factory (``agentrl.make("harbor:PATH", **kwargs)``)."""
    return HarborEnv(path, **kwargs)


class HarborEnv(WorkspaceEnv):
    """Harbor task directories under ``path`` (one task, or a folder of them) as a multi-turn tool env.

    ``tasks`` keeps only the named tasks, ``limit`` the first ones (by name). ``{split}`` in ``path`` is
    replaced by ``split`` (``harbor:tasks/{split}``: train and test folders); a path without it has
    the same tasks in every split. Several folders train together, separated by commas
    (``harbor:mine/{split},theirs/{split}``); a task name in two of them is refused in one line. ``skip_invalid`` keeps going past tasks that cannot run (listed in
    ``problems``) instead of refusing the folder in one line.
    """

    def __init__(self, path: str, *, backend: str = "local", max_turns: int = 30, tool_parser: str = "hermes",
                 command_timeout_s: float = 60.0, max_output_chars: int = 10000, max_calls_per_turn: int = 8,
                 allow_internet: bool = False, tasks: list[str] | None = None, split: str = "train",
                 limit: int | None = None, skip_invalid: bool = False, system_prompt: str | None = None,
                 pool_size: int = 0, grade_cache: bool = False, grader_pool: int = 0, recycle: bool = True,
                 render_mode: str | None = None) -> None:
        super().__init__(backend=backend, max_turns=max_turns, tool_parser=tool_parser,
                         command_timeout_s=command_timeout_s, max_output_chars=max_output_chars,
                         max_calls_per_turn=max_calls_per_turn, system_prompt=system_prompt, pool_size=pool_size,
                         grade_cache=grade_cache, grader_pool=grader_pool, recycle=recycle, render_mode=render_mode)
        path = str(path).replace("{split}", split)
        self.path, self.allow_internet = path, allow_internet
        found, problems = find_in_folders(path)
        found, problems = self._local_check(found, problems) if backend == "local" else (found, problems)
        if tasks is not None:
            unknown = sorted(set(tasks) - {t.name for t in found} - {n for n, _ in problems})
            if unknown:
                raise EnvError(f"harbor:{path}: no task named {unknown[0]!r}; tasks here: "
                               f"{', '.join(t.name for t in found)}")
            found, problems = [t for t in found if t.name in tasks], [p for p in problems if p[0] in tasks]
        if problems and not skip_invalid:
            raise EnvError(f"harbor:{path}: {len(problems)} task(s) cannot run; {problems[0][1]} "
                           f"(agentrl tasks list {path} shows each)")
        if not found and not skip_invalid:
            raise EnvError(f"harbor:{path}: no task can run here")
        self.problems: list[tuple[str, str]] = problems
        self.harbor: dict[str, HarborTask] = {t.name: t for t in found[:limit]}
        self.tasks = [self._task(t) for t in self.harbor.values()]

    @staticmethod
    def _local_check(found: list[HarborTask], problems: list[tuple[str, str]]
                     ) -> tuple[list[HarborTask], list[tuple[str, str]]]:
        """Tasks whose Dockerfile the local backend cannot run become problems (one line each)."""
        ok = []
        for t in found:
            try:
                parse_dockerfile(t.dockerfile, f"{t.name}: environment/Dockerfile")
                ok.append(t)
            except BuildError as e:
                problems = [*problems, (t.name, str(e))]
        return ok, sorted(problems)

    def _task(self, t: HarborTask) -> Task:
        spec = self.spec_of(t)
        prompt = [{"role": "system", "content": self.system_prompt(spec.workdir)},
                  {"role": "user", "content": t.instruction.strip()}]
        return Task(id=t.name, prompt=prompt, metadata={"harbor_path": str(t.path), "workdir": spec.workdir})

    # ------------------------------------------------------------------ the episode
    def sample_task(self, rng: np.random.Generator) -> Task:
        if not self.tasks:
            raise EnvError(f"harbor:{self.path}: no task can run here")
        return self.tasks[int(rng.integers(len(self.tasks)))]

    def harbor_task(self, task: Task | str) -> HarborTask:
        name = task if isinstance(task, str) else task.id
        if name not in self.harbor:
            raise KeyError(f"no task {name!r} in harbor:{self.path}")
        return self.harbor[name]

    def spec_of(self, t: HarborTask) -> WorkspaceSpec:
        """The workspace a task starts from, on this env's backend."""
        limits = WorkspaceLimits(cpus=t.cpus, memory_mb=t.memory_mb, storage_mb=t.storage_mb,
                                 allow_internet=self.allow_internet and t.allow_internet,
                                 ttl_s=max(3600.0, 4 * (t.agent_timeout_s + t.verifier_timeout_s + t.build_timeout_s)),
                                 max_output_bytes=self.max_output_chars)  # the workspace cuts, with its mark
        try:
            df = parse_dockerfile(t.dockerfile, f"{t.name}: environment/Dockerfile")
            steps, workdir, env = df.steps, df.workdir, df.env
        except BuildError:  # Docker builds what the local backend cannot run
            found = re.findall(r"(?im)^\s*WORKDIR\s+(\S+)", t.dockerfile)
            steps, workdir, env = (), (found[-1] if found and found[-1].startswith("/") else "/"), ()
        return WorkspaceSpec(steps=steps, context=str(t.environment_dir), workdir=workdir, env=env, limits=limits,
                             dockerfile=t.dockerfile, name=t.name)

    def workspace_spec(self, task: Task) -> WorkspaceSpec:
        return self.spec_of(self.harbor_task(task))

    def agent_timeout_s(self, task: Task) -> float:
        return self.harbor_task(task).agent_timeout_s

    def grade(self, task: Task, tree: Tree) -> Verdict:
        return self.verify(self.harbor_task(task), tree)

    def verify(self, t: HarborTask, tree: Tree) -> Verdict:
        """The task's verifier on a final tree (a fresh workspace; its tests copied in only now)."""
        spec = self.spec_of(t)
        spec = spec.replace(env=spec.env + tuple(t.verifier_env.items()))
        return verify(spec, tree, str(t.tests_dir), backend=self.backend, timeout_s=t.verifier_timeout_s,
                      reward_range=t.reward_range, graders=self.graders)

    def reference_answer(self, task: Task) -> str:
        """One action that does what the oracle does: write the solution's files (to ``/tmp/solution``,
        which the agent can create), run ``solve.sh`` there, and submit."""
        t = self.harbor_task(task)
        if not t.has_solution:
            raise ValueError(f"task {t.name!r} has no solution/solve.sh")
        calls: list[tuple[str, dict[str, Any]]] = []
        for f in sorted(p for p in t.solution_dir.rglob("*") if p.is_file()):
            dest = f"{REFERENCE_DIR}/{f.relative_to(t.solution_dir).as_posix()}"
            data = f.read_bytes()
            try:
                calls.append(("write_file", {"path": dest, "content": data.decode("utf-8")}))
            except UnicodeDecodeError:
                calls.append(("bash", {"command": f"mkdir -p {shlex.quote(dest.rsplit('/', 1)[0])} && echo "
                                                  f"{base64.b64encode(data).decode()} | base64 -d > {shlex.quote(dest)}"}))
        run = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in t.solution_env.items()), "bash",
                        f"{REFERENCE_DIR}/solve.sh"])
        calls += [("bash", {"command": run, "timeout": int(min(t.agent_timeout_s, 600))}), ("submit", {})]
        return render_calls(self.tool_parser, calls)

    def reference_action(self) -> str:
        """The reference policy (the multi-turn warm start's, ``agentrl doctor``'s control): the oracle's work
        and ``submit`` in the first turn (:meth:`reference_answer`: a task's ``solution/solve.sh``; a task
        without one fails its reference episode); should an episode still be going after it, ``submit``."""
        if self.task is None:
            raise RuntimeError("call reset() before reference_action()")
        return self.reference_answer(self.task) if self.turn == 0 else render_calls(self.tool_parser, [("submit", {})])

    # ------------------------------------------------------------------ for task authors (agentrl tasks)
    def describe_task(self, name: str) -> dict[str, Any]:
        """What one task holds, for ``agentrl tasks list``."""
        t = self.harbor_task(name)
        first = next((ln.strip("# ").strip() for ln in t.instruction.splitlines() if ln.strip()), "")
        return {"task": t.name, "instruction": first, "agent_timeout_s": t.agent_timeout_s,
                "verifier_timeout_s": t.verifier_timeout_s, "cpus": t.cpus, "memory_mb": t.memory_mb,
                "solution": t.has_solution, "path": str(t.path)}

    def check_task(self, name: str) -> dict[str, Any]:
        """Run the oracle and a no-op agent on task ``name`` and grade both: ``{"task", "oracle", "noop",
        "seconds", "error", "details"}`` (a reward is None, and ``error`` says why, when it could not run)."""
        t, start = self.harbor_task(name), time.monotonic()
        out: dict[str, Any] = {"task": t.name, "oracle": None, "noop": None, "seconds": 0.0, "error": None,
                               "details": {}}
        errors = []
        for who, run in (("oracle", self.run_oracle), ("noop", self.run_noop)):
            try:
                verdict, detail = run(t)
            except WorkspaceError as e:
                errors.append(f"{who}: {e}")
                continue
            out[who], out["details"][who] = verdict.reward, {"verifier": verdict.output, **detail}
            if verdict.error:
                errors.append(f"{who}: {verdict.error}")
        out["error"] = "; ".join(errors) or None
        out["seconds"] = round(time.monotonic() - start, 3)
        return out

    def run_oracle(self, t: HarborTask) -> tuple[Verdict, dict[str, Any]]:
        """``solution/solve.sh`` as Harbor's oracle runs it (the solution copied to ``/solution``, run from
        the working directory under the agent timeout), then the verifier on the final tree."""
        if not t.has_solution:
            return Verdict(None, error="no solution/solve.sh: the oracle cannot run"), {}
        with open_workspace(self.spec_of(t), self.backend) as ws:
            ws.put_dir(str(t.solution_dir), "/solution")
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in t.solution_env.items())
            r = ws.exec(f"{env} bash /solution/solve.sh".strip(), timeout_s=t.agent_timeout_s)
            tree = ws.seal()
        detail = {"solve": r.text()[-4000:]}
        if r.timed_out:
            return Verdict(None, error=f"solve.sh ran past the agent timeout ({t.agent_timeout_s:g} s)"), detail
        return self.verify(t, tree), detail

    def run_noop(self, t: HarborTask) -> tuple[Verdict, dict[str, Any]]:
        """The verifier on the built tree, untouched."""
        with open_workspace(self.spec_of(t), self.backend) as ws:
            tree = ws.seal()
        return self.verify(t, tree), {}

    def export_task(self, task: Task | str, out: str | Path) -> Path:
        """Write the task as a Harbor task directory at ``out`` (``agentrl tasks export``)."""
        return copy_task(self.harbor_task(task), out)
