"""mini-swe-agent, unchanged, on our workspace tasks: ``env.id: minisweagent:ENV_ID`` (``ENV_ID`` a
workspace env: ``agentrl/RepoRepair-v0``, ``agentrl/Terminal-v0``, ``harbor:PATH``).

mini-swe-agent (``pip install mini-swe-agent``, pinned in the ``adapters`` extra) is the reference
SWE-bench harness: its ``DefaultAgent`` asks the model for one bash command per turn (in a
```` ```mswea_bash_command ```` block), runs it in its environment, shows the output, until the model
runs ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` or a limit ends it. Here it runs as its authors
ship it — its agent class, its ``mini_textbased.yaml`` prompts — with two settings changed in its own
config: the environment (``environment_class:
environments.adapters.minisweagent.WorkspaceEnvironment``, ours: every command runs in the task's
sandboxed workspace) and the model (litellm's ``openai/`` provider pointed at the policy's
OpenAI-compatible endpoint for the episode). ``config`` names another mini-swe-agent YAML to start
from (the same two settings are put in it).

The env is a black-box agent env (:class:`agentrl.rollout.executors.agent.BlackBoxExecutor`): each
completion the agent asks for is recorded token-exact and the episode's completions become one
trajectory (the agent's observations masked as feedback). When the agent stops, the workspace is
sealed and the task's own grader (the inner env's: the Harbor verifier in a fresh workspace) gives
the reward; a grader that cannot run fails the episode (it leaves the loss). Tasks, splits and
held-out data are the inner env's (its ``split`` keyword).

The episode's record is the other workspace envs' (:mod:`environments.workspace_env`): the agent program's
result holds ``trajectory_info`` with ``commands`` and ``outputs`` (each command the agent ran in the workspace
and its output, in order), ``diff`` (the final tree against the built one), ``verifier`` (reward, named
rewards, output, error, the names its directory held) and ``ended_by`` (mini-swe-agent's exit status), the
keys the executor merges into the trajectory's info, so that ``samples.jsonl`` and ``agentrl view`` show them.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.env import EnvError, TextEnv, make
from agentrl.types import RewardResult, Task
from environments.workspace_env import MAX_RECORD_CHARS
from sandbox.workspace import Tree, TreeTooLarge, Workspace, open_workspace
from sandbox.workspace.grading import Verdict

MODEL_NAME = "openai/agentrl-policy"  # litellm's OpenAI-compatible provider; the name is not checked
SUBMIT_LINE = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def quiet_imports() -> None:
    """Keep mini-swe-agent and litellm offline and quiet: no banner, no remote price list (litellm fetches
    one at import unless told not to), no "Provider List" lines for a model it has no price for."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    os.environ.setdefault("MSWEA_COST_TRACKING", "ignore_errors")
    import sys

    if "litellm" in sys.modules:  # imported lazily by mini-swe-agent's model: set once it is there
        sys.modules["litellm"].suppress_debug_info = True


class WorkspaceEnvironment:
    """mini-swe-agent's ``Environment`` (``execute``, ``get_template_vars``, ``serialize``) on one task's
    workspace. ``task_dir`` is a Harbor task directory (the workspace is built from its
    ``environment/``); each action's ``command`` runs in the workspace's shell (``timeout`` seconds),
    and output whose first line is ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` ends the agent's run, as
    in mini-swe-agent's own environments. ``seal()`` ends every process and returns the tree to grade.
    ``commands`` and ``outputs`` record what ran and what it printed (each output cut to ``MAX_RECORD_CHARS``)."""

    def __init__(self, *, task_dir: str, backend: str = "local", timeout: int = 60, cwd: str = "",
                 env: dict[str, str] | None = None) -> None:
        from environments.harbor.env import HarborEnv

        self.harbor = HarborEnv(task_dir, backend=backend)
        self.task = next(iter(self.harbor.harbor.values()))
        self.config = _Config(task_dir=task_dir, backend=backend, timeout=timeout, cwd=cwd, env=dict(env or {}))
        self._ws: Workspace | None = None
        self.commands: list[str] = []
        self.outputs: list[str] = []
        self.too_large = ""  # why the final tree was not graded (seal)

    @property
    def workspace(self) -> Workspace:
        if self._ws is None:
            self._ws = open_workspace(self.harbor.spec_of(self.task), self.config.backend)
            exports = " ".join(f"{k}={_quote(v)}" for k, v in self.config.env.items())
            if exports:
                self._ws.exec(f"export {exports}", timeout_s=10)
        return self._ws

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        from minisweagent.exceptions import Submitted

        command = action.get("command", "")
        where = cwd or self.config.cwd
        result = self.workspace.exec(f"cd {_quote(where)} && {command}" if where else command,
                                     timeout_s=float(timeout or self.config.timeout))
        self.commands.append(command)
        self.outputs.append(result.output[:MAX_RECORD_CHARS])
        output = {"output": result.output, "returncode": -1 if result.timed_out else result.exit_code,
                  "exception_info": (f"the command ran past its {result.timeout_s:g} s timeout and was killed"
                                     if result.timed_out else "")}
        lines = result.output.lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_LINE and result.exit_code == 0:
            submission = "".join(lines[1:])
            raise Submitted({"role": "exit", "content": submission,
                             "extra": {"exit_status": "Submitted", "submission": submission}})
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**self.config.model_dump(), **platform.uname()._asdict(), **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {"environment": self.config.model_dump(),
                                    "environment_type": f"{type(self).__module__}.{type(self).__name__}"}}}

    def seal(self) -> Tree | None:
        """End every process of the workspace; the final tree (the initial one if nothing ran), or None for a
        tree larger than the task's storage (the agent's doing: :meth:`record` says so, graded 0 as
        :meth:`environments.workspace_env.WorkspaceEnv.finish` does)."""
        try:
            return self.workspace.seal()
        except TreeTooLarge as e:
            self.too_large = f"not graded: {e}"
            return None

    def record(self, diff: str, verdict: Verdict, ended_by: str) -> dict[str, Any]:
        """The episode's record, with the keys and shapes of the other workspace envs' (the module docstring)."""
        return {"commands": list(self.commands), "outputs": list(self.outputs), "diff": diff,
                "verifier": {"reward": verdict.reward, "rewards": dict(verdict.rewards), "output": verdict.output,
                             "error": verdict.error, "files": list(verdict.files)},
                "ended_by": ended_by}

    def close(self) -> None:
        if self._ws is not None:
            self._ws.close()
            self._ws = None
        self.harbor.close()


class _Config(dict):
    """The environment's settings, as mini-swe-agent reads them (``model_dump()``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return dict(self)


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def load_config(path: str | None, step_limit: int, command_timeout_s: int) -> dict[str, Any]:
    """mini-swe-agent's own config (``path``, default its ``mini_textbased.yaml``) with our environment
    class and the endpoint's model settings in place (the endpoint is filled in per episode)."""
    import yaml

    quiet_imports()
    from minisweagent.config import builtin_config_dir, get_config_path

    source = Path(path) if path else builtin_config_dir / "mini_textbased.yaml"
    try:
        config = yaml.safe_load(get_config_path(source).read_text()) or {}
    except (FileNotFoundError, yaml.YAMLError) as e:
        raise EnvError(f"minisweagent: cannot read config {source}: {e}") from None
    agent = {**config.get("agent", {}), "step_limit": step_limit, "cost_limit": 0.0}
    environment = {**config.get("environment", {}), "timeout": command_timeout_s,
                   "environment_class": f"{WorkspaceEnvironment.__module__}.{WorkspaceEnvironment.__name__}"}
    model = {**config.get("model", {}), "model_name": MODEL_NAME, "model_class": "litellm_textbased",
             "cost_tracking": "ignore_errors"}
    return {**config, "agent": agent, "environment": environment, "model": model}


class MiniSweAgentEnv(TextEnv):
    """mini-swe-agent on the tasks of a workspace env (see the module docstring)."""

    def __init__(self, inner: str, *, config: str | None = None, step_limit: int = 20, command_timeout_s: int = 60,
                 concurrency: int = 4, backend: str = "local", render_mode: str | None = None, **inner_kwargs: Any
                 ) -> None:
        super().__init__(render_mode=render_mode)
        quiet_imports()
        try:
            import minisweagent  # noqa: F401
        except ImportError:
            raise EnvError("minisweagent: mini-swe-agent is not installed (pip install 'agentrl[adapters]', which "
                           "pins it)") from None
        not_workspace = EnvError(f"minisweagent:{inner}: not a workspace env with Harbor tasks (agentrl/RepoRepair-v0, "
                                 f"agentrl/Terminal-v0, harbor:PATH)")
        try:
            self.inner = make(inner, backend=backend, **inner_kwargs)
        except EnvError as e:
            raise not_workspace if "unknown keyword 'backend'" in str(e) else e from None
        if not callable(getattr(self.inner, "harbor_task", None)) or not callable(getattr(self.inner, "verify", None)):
            raise not_workspace
        self.config = load_config(config, step_limit, command_timeout_s)
        self.concurrency, self.backend = concurrency, backend
        self.tasks = getattr(self.inner, "tasks", None)

    def sample_task(self, rng: np.random.Generator) -> Task:
        return self.inner.sample_task(rng)

    def agent_program(self, base_url: str, task: Task) -> dict[str, Any]:
        """One mini-swe-agent run on ``task`` against the policy's endpoint ``base_url`` (:meth:`run_agent`)."""
        quiet_imports()
        import litellm
        from minisweagent.models import get_model

        litellm.suppress_debug_info = True
        model_cfg = dict(self.config["model"])
        model_cfg["model_kwargs"] = {**model_cfg.get("model_kwargs", {}), "api_base": base_url, "api_key": "agentrl"}
        return self.run_agent(get_model(config=model_cfg), task)

    def run_agent(self, model: Any, task: Task) -> dict[str, Any]:
        """mini-swe-agent's ``DefaultAgent`` with ``model`` (any mini-swe-agent model) on ``task`` in our
        workspace, then the task's grader on the final tree: ``{"exit_status", "reward", "steps",
        "trajectory_info"}`` (the record, see the module docstring). A grader that cannot run raises."""
        from minisweagent.agents.default import DefaultAgent
        from minisweagent.environments import get_environment

        t = self.inner.harbor_task(task)
        env = get_environment({**self.config["environment"], "task_dir": str(t.path), "backend": self.backend})
        try:
            agent = DefaultAgent(model, env, **self.config["agent"])
            outcome = agent.run(t.instruction.strip())
            tree = env.seal()
        finally:
            env.close()
        verdict = Verdict(0.0, output=env.too_large) if tree is None else self.inner.verify(t, tree)
        if verdict.error:
            raise RuntimeError(f"the grader could not score the episode: {verdict.error}")
        exit_status = outcome.get("exit_status", "")
        return {"exit_status": exit_status, "reward": verdict.reward, "steps": agent.n_calls,
                "trajectory_info": env.record("" if tree is None else tree.diff or "", verdict, exit_status)}

    def agent_reward(self, result: dict[str, Any], task: Task) -> float:
        return float(result["reward"])

    def score(self, action: str, task: Task) -> RewardResult:
        raise NotImplementedError("minisweagent: episodes are run by the agent program (agent_program)")

    def close(self) -> None:
        self.inner.close()


def make_env(rest: str, **kwargs: Any) -> MiniSweAgentEnv:
    """The ``minisweagent:`` family's factory: ``minisweagent:agentrl/RepoRepair-v0``."""
    return MiniSweAgentEnv(rest, **kwargs)
