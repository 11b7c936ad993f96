"""verifiers tasksets as agentrl envs: ``env.id: verifiers:NAME_OR_PATH`` (needs the ``verifiers`` extra).

NAME_OR_PATH is a module (an Environments Hub package installed with pip, e.g. ``reverse_text``) or a
``.py`` file, optionally ``:TasksetClass`` when it holds several; ``env.kwargs.config`` is the taskset's
config (``{num_tasks: 50}``, its ``TasksetConfig`` fields). A taskset written as verifiers' docs show
(``vf.TaskData``, ``vf.Task`` with ``@vf.reward``, ``vf.Taskset.load``) runs unchanged: every episode
is verifiers' own rollout — its harness program, its loop — whose model calls go to the policy's
OpenAI-compatible endpoint (:mod:`agentrl.rollout.openai_server`, streamed or not), recorded there
token-exact; the episode's reward is the trace's (the weighted sum of the task's ``@vf.reward``s). A
rollout whose trace ends in an error fails the episode: it leaves the loss.

**What runs, what is refused.** Runs: tasksets played by the tool-less ``null`` chat harness (the
default) on the local subprocess runtime, single- or multi-turn, with rewards that read the trace or run
Python scripts in the runtime; the harness program runs with this Python (its declared packages are
verifiers' own dependencies), so nothing is fetched with uv. Refused with a one-line error: harnesses
that execute the model's commands on this machine (``bash``, ``codex``, ``claude_code``, ...: they need
a container runtime), container and cloud runtimes (docker, prime, modal), tasksets with toolsets
(MCP tool servers) and multi-agent ``vf.Env`` classes.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import inspect
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from agentrl.env import EnvError
from agentrl.types import RewardResult, Task
from environments.sources import DatasetEnv

_LOOP: asyncio.AbstractEventLoop | None = None
_LOCK = threading.Lock()
SCRIPTS = Path(tempfile.gettempdir()) / "agentrl-verifiers-scripts"


def _loop() -> asyncio.AbstractEventLoop:
    """One event loop thread for every verifiers rollout of this process."""
    global _LOOP
    with _LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, name="agentrl-verifiers-loop", daemon=True).start()
        return _LOOP


def load_taskset_class(spec: str) -> type:
    """The ``vf.Taskset`` subclass named by ``module``, ``module:Class``, ``file.py`` or ``file.py:Class``."""
    import verifiers.v1 as vf

    target, _, name = spec.partition(".py:") if ".py:" in spec else spec.partition(":")
    if spec.endswith(".py") or ".py:" in spec:
        path = Path(target if target.endswith(".py") else target + ".py")
        if not path.is_file():
            raise EnvError(f"verifiers: no such file {str(path)!r}")
        sys.path.insert(0, str(path.resolve().parent))
        module = importlib.import_module(path.stem)
    else:
        try:
            module = importlib.import_module(target.replace("-", "_"))
        except ModuleNotFoundError as e:
            raise EnvError(f"verifiers: cannot import {target!r} ({e}); pip install the environment's package or "
                           f"give a .py file") from None
    found = {n: v for n, v in vars(module).items() if inspect.isclass(v) and issubclass(v, vf.Taskset)
             and v is not vf.Taskset and (v.__module__ or "").startswith(module.__name__)}
    if not found:
        found = {n: v for n, v in vars(module).items() if inspect.isclass(v) and issubclass(v, vf.Taskset)
                 and v is not vf.Taskset}  # a package re-exporting its taskset
    if name:
        if name not in found:
            raise EnvError(f"verifiers: {target!r} has no taskset {name!r}; tasksets there: {', '.join(found) or 'none'}")
        return found[name]
    if len(found) != 1:
        raise EnvError(f"verifiers: {target!r} holds {len(found)} tasksets ({', '.join(found) or 'none'}); "
                       f"name one as verifiers:{spec}:CLASS")
    return next(iter(found.values()))


def _local_runtime_class() -> type:
    """verifiers' subprocess runtime, its uv-script step replaced by this Python (no downloads)."""
    from verifiers.v1.runtimes.subprocess import SubprocessRuntime

    class LocalPythonRuntime(SubprocessRuntime):
        async def prepare_uv_script(self, script: str | bytes, env: dict[str, str] | None = None, *,
                                    activate: bool = True) -> list[str]:
            data = script.encode() if isinstance(script, str) else script
            SCRIPTS.mkdir(parents=True, exist_ok=True)
            path = SCRIPTS / f"{hashlib.sha256(data).hexdigest()}.py"
            if not path.exists():
                tmp = path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_bytes(data)
                tmp.replace(path)
            return [sys.executable, str(path)]

    return LocalPythonRuntime


class VerifiersResult:
    """A finished rollout: its verifiers ``trace``; as text, the last reply (the episode's response)."""

    def __init__(self, trace: Any) -> None:
        self.trace = trace

    def __str__(self) -> str:
        return self.trace.last_reply or ""


class VerifiersEnv(DatasetEnv):
    """A verifiers taskset's tasks; ``agent_program`` runs verifiers' rollout of one on the policy's endpoint."""

    def __init__(self, spec: str, config: dict[str, Any] | None = None, harness: str = "null",
                 concurrency: int = 8, max_turns: int | None = None, timeout_s: float = 600.0,
                 split: str = "train", limit: int | None = None, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        import verifiers.v1 as vf

        cls = load_taskset_class(spec)
        self.spec, self.harness, self.concurrency, self.timeout_s = spec, harness, concurrency, timeout_s
        self.agent_max_turns = max_turns
        from verifiers.v1.utils.generic import concrete_type

        try:
            self.taskset = cls((concrete_type(cls, vf.TasksetConfig, origin=vf.Taskset) or vf.TasksetConfig)(
                **(config or {})))
        except Exception as e:  # noqa: BLE001 - the taskset's own config error, in one line
            raise EnvError(f"verifiers: cannot build {cls.__name__} with config {config!r}: {e}") from None
        self._refuse_unsupported(cls, harness)
        if cls.INFINITE and limit is None:
            raise EnvError(f"verifiers: {spec} is an infinite taskset; bound it with env.kwargs.limit")
        self.vf_tasks = list(self.taskset.take(limit) if limit is not None else self.taskset)
        self.set_tasks([self._task(i, t) for i, t in enumerate(self.vf_tasks)])

    @staticmethod
    def _task(i: int, vf_task: Any) -> Task:
        data = vf_task.data
        prompt = data.prompt if isinstance(data.prompt, str) else [
            {"role": getattr(m, "role", "user"), "content": str(getattr(m, "content", m))} for m in data.prompt]
        return Task(id=f"vf-{i}", prompt=prompt, answer=None, metadata={"vf_index": i})

    def _refuse_unsupported(self, cls: type, harness: str) -> None:
        from verifiers.v1.utils.loaders import harness_class

        try:
            program = harness_class(harness)
        except Exception as e:  # noqa: BLE001 - an unknown harness id, in one line
            raise EnvError(f"verifiers: unknown harness {harness!r} ({e})") from None
        if program.EXECUTES_CODE or program.NEEDS_CONTAINER:
            raise EnvError(f"verifiers: harness {harness!r} runs the model's commands and needs a container runtime; "
                           f"agentrl runs tasksets with tool-less harnesses (null) on the local runtime")
        if cls.toolsets(self.taskset.config):
            raise EnvError(f"verifiers: {cls.__name__} has toolsets (MCP tool servers), which agentrl does not run")

    def score(self, action: str, task: Task) -> RewardResult:
        raise EnvError("a verifiers taskset scores its own rollouts (its @vf.reward methods); use its agent loop")

    # -- what the black-box executor calls ---------------------------------------------------
    def agent_program(self, base_url: str, task: Task) -> Any:
        """verifiers' rollout of ``task`` against ``base_url``; its trace (an error raises: the episode fails)."""
        vf_task = self.vf_tasks[int(task.metadata["vf_index"])]
        future = asyncio.run_coroutine_threadsafe(self._rollout(base_url, vf_task), _loop())
        trace = future.result(self.timeout_s)
        if not trace.ok:
            raise RuntimeError("verifiers rollout failed: " + "; ".join(f"{e.type}: {e.message}" for e in trace.errors))
        return VerifiersResult(trace)

    async def _rollout(self, base_url: str, vf_task: Any) -> Any:
        import verifiers.v1 as vf

        os.environ.setdefault("AGENTRL_POLICY_KEY", "agentrl")
        config = vf.AgentConfig(model="agentrl-policy", harness={"id": self.harness},
                                client=vf.EvalClientConfig(base_url=base_url, api_key_var="AGENTRL_POLICY_KEY"),
                                runtime=vf.SubprocessConfig(), max_turns=self.agent_max_turns)
        runtime = _local_runtime_class()(vf.SubprocessConfig())
        await runtime.start()
        try:
            async with vf.make_agent(config) as agent:
                return await agent.run(vf_task, runtime=runtime)
        finally:
            await runtime.teardown()

    def agent_reward(self, result: VerifiersResult, task: Task) -> float:
        """The trace's reward (its task's ``@vf.reward``s, weighted)."""
        return float(result.trace.reward)


def make_env(rest: str, **kwargs: Any) -> VerifiersEnv:
    """``verifiers:NAME_OR_PATH[:Class]``."""
    if not rest:
        raise EnvError("verifiers env needs a taskset: verifiers:MODULE, verifiers:FILE.py or verifiers:FILE.py:Class")
    return VerifiersEnv(rest, **kwargs)
