"""``WorkspaceEnv``: an agent works in a computer with tools, then the computer's final state is graded.

The base of every env whose episode happens in a :mod:`sandbox.workspace` (Harbor task directories,
and generated suites later). A subclass says, per task, what the workspace starts from
(:meth:`WorkspaceEnv.workspace_spec`), how long the agent's commands may take
(:meth:`WorkspaceEnv.agent_timeout_s`) and how a final tree is graded (:meth:`WorkspaceEnv.grade`).

**An episode.** ``reset`` poses the task (a system message with the tools, then the instruction;
``system_prompt`` replaces the system message, a template with ``{workdir}`` and ``{tools}``);
the workspace is built on the first ``step`` that needs it. Each action is parsed for tool calls in
the env's ``tool_parser`` format (:mod:`environments.tool_parsers`): the calls run in order in the
workspace (at most ``max_calls_per_turn``; a bad call answers with the tool's error) and their
results come back as the next observation, one ``<tool_response>`` each. The episode ends, and the
computer is graded, when the agent calls ``submit`` (``terminated``), replies without a tool call
(``terminated``), reaches ``max_turns`` or runs out of its agent time (``truncated``; Harbor grades
the state an agent leaves when its time is up, and so do we). ``info["ended_by"]`` says which.

**Grading** happens after the agent's last process is gone: ``seal()`` ends every process of the
workspace and returns its tree; the workspace is closed; ``grade`` then runs on that tree (a Harbor
task's verifier in a fresh workspace, with its tests copied in only then). The reward is the
grader's; a grader that could not run (``Verdict.error``) marks the sample failed (``info["failed"]``:
it leaves the loss, as failed samples do) rather than scoring it 0. A tree larger than the task's
storage (``TreeTooLarge``) is the agent's doing: 0, ungraded. An env whose untouched tree is known to
fail (``initial_tree_reward(task)``: ``unchanged_reward`` by default, e.g. RepoRepair's: its build checked
that the bug fails the tests; Terminal-v0's: a check that only reads files fails on the task's files)
scores a final tree byte-identical to the built one with that reward, without running the verifier.

``grade_cache`` grades each distinct final tree of a task once (:mod:`environments.grade_cache`: the
samples of a group that end on byte-identical trees share one verdict; for deterministic verifiers only,
on for the generated suites, off by default for Harbor task folders).

``pool_size`` > 0 keeps that many started workspaces per task in a warm pool
(:class:`sandbox.workspace.pool.WorkspacePool`, shared by the env's per-episode copies and closed
with the env that made it), so an episode's first tool call does not wait for a build. ``grader_pool`` > 0
keeps that many grading workspaces started ahead per kind (:class:`sandbox.workspace.pool.GraderPool`:
bare, same limits and workdir; the sealed tree is restored into one), so a grade does not wait for a start.
``recycle`` (default on; the local backend) resets the runtime of an ended episode or grade and starts the next
one in it instead of a new one (:mod:`sandbox.workspace.recycle`: nothing of the last episode survives the
reset); ``recycle=false`` starts every workspace afresh.

**The record.** Each step's ``info["calls"]`` lists that turn's calls (``name``, ``arguments``,
``result``, ``error``; the executors keep them as the trajectory's ``info["tool_calls"]``). The final
step's ``info["trajectory_info"]`` (merged into the trajectory's info by the executors) holds ``commands`` and ``outputs`` (each tool call and the text it
returned, in order), ``diff`` (the final tree against the built one), ``verifier`` (reward, named
rewards, output, error, the names its directory held) and ``ended_by``; nothing in it depends on timing, so the same actions give
the same info (Gymnasium's ``check_env`` insists).
"""

from __future__ import annotations

from typing import Any

from agentrl.env import EnvError, TextEnv
from agentrl.types import Task
from environments.grade_cache import GradeCache
from environments.tool_parsers import PROMPTS, get_parser
from environments.tools import ToolCallError, invoke, tools_text
from environments.workspace_tools import WorkspaceSession, call_line, workspace_tools
from sandbox.workspace import BACKENDS, Tree, TreeTooLarge, WorkspaceSpec
from sandbox.workspace.grading import Verdict
from sandbox.workspace.pool import GraderPool, WorkspacePool
from sandbox.workspace.recycle import Recycler

AGENT_PROMPT = (
    "You are an agent working in a Linux computer (bash, coreutils, grep, sed, awk, find, diff, patch, git and "
    "python3 are installed; there is no network). Your working directory is {workdir}. Do the task you are "
    "given by calling the tools below; look before you change things, and check your work. When the task is "
    "done, call submit: the computer's final state is then graded.")
MAX_RECORD_CHARS = 20000  # per output kept in the record (the agent saw the tool's own cut already)


class WorkspaceEnv(TextEnv):
    """An agent in a computer with tools (see the module docstring); subclasses give tasks and grading."""

    feedback_role = "user"
    #: the reward of a final tree identical to the built one, when known without grading (None: grade it)
    unchanged_reward: float | None = None

    def __init__(self, *, backend: str = "local", max_turns: int = 30, tool_parser: str = "hermes",
                 command_timeout_s: float = 60.0, max_output_chars: int = 10000, max_calls_per_turn: int = 8,
                 system_prompt: str | None = None, pool_size: int = 0, grade_cache: bool = False,
                 grader_pool: int = 0, recycle: bool = True, render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        if backend not in BACKENDS:
            raise EnvError(f"backend={backend!r}: unknown workspace backend; valid: {', '.join(BACKENDS)}")
        if (max_turns < 1 or max_calls_per_turn < 1 or command_timeout_s <= 0 or max_output_chars < 100
                or pool_size < 0 or grader_pool < 0):
            raise EnvError("max_turns and max_calls_per_turn must be >= 1, command_timeout_s > 0, "
                           "max_output_chars >= 100, pool_size >= 0, grader_pool >= 0")
        try:
            self.parse = get_parser(tool_parser)
        except ValueError as e:
            raise EnvError(str(e)) from None
        self.backend, self.tool_parser, self.max_turns = backend, tool_parser, max_turns
        self.max_calls_per_turn, self.max_output_chars = max_calls_per_turn, max_output_chars
        self.session = WorkspaceSession(backend, WorkspacePool(backend, pool_size) if pool_size else None,
                                        GraderPool(backend, grader_pool) if grader_pool else None, recycle=recycle)
        self.tools = {t.name: t for t in workspace_tools(self.session, command_timeout_s, max_output_chars)}
        self.tools_text = tools_text(list(self.tools.values()), PROMPTS[tool_parser])
        self.prompt_template = system_prompt or AGENT_PROMPT + "\n\n{tools}"
        self.turn = 0
        self.turn_calls: list[dict[str, Any]] = []  # this turn's calls, as info["calls"] lists them
        self.grades = GradeCache() if grade_cache else None  # shared by the copies (a deep copy is itself)

    @property
    def graders(self) -> GraderPool | Recycler | None:
        """Where grading workspaces come from, shared by the env's copies: those started ahead (``grader_pool``),
        else the session's recycled runtimes (the local backend), else None (each grade starts its own)."""
        if self.session.graders is not None:
            return self.session.graders
        return self.session.closer if isinstance(self.session.closer, Recycler) else None

    # ------------------------------------------------------------------ what a subclass gives
    def workspace_spec(self, task: Task) -> WorkspaceSpec:
        """What the task's workspace starts from."""
        raise NotImplementedError

    def agent_timeout_s(self, task: Task) -> float | None:
        """Seconds the agent's commands may take in all (None: no limit but each command's own)."""
        return None

    def grade(self, task: Task, tree: Tree) -> Verdict:
        """Grade the final tree of an episode on ``task`` (after every process of the agent is gone)."""
        raise NotImplementedError

    def initial_tree_reward(self, task: Task) -> float | None:
        """The reward of a final tree byte-identical to the task's built one when it is known without grading
        (``unchanged_reward`` by default; None: grade it)."""
        return self.unchanged_reward

    def system_prompt(self, workdir: str) -> str:
        """The system message: ``system_prompt`` (default: what the agent is and where, then the tools) with
        ``{workdir}`` and ``{tools}`` (the tools' schemas and how to call them, in the env's format) filled in."""
        return self.prompt_template.replace("{workdir}", workdir).replace("{tools}", self.tools_text)

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        self.session.close()
        obs, info = super().reset(seed=seed, options=options)
        self.turn = 0
        self.session.start(self.workspace_spec(self.task), self.agent_timeout_s(self.task))
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.task is None or self.session.spec is None:
            raise RuntimeError("call reset() before step() (an episode that ended needs a reset too)")
        action = action if isinstance(action, str) else str(action)
        self.turn += 1
        calls = self.parse(action, {n: t.parameters for n, t in self.tools.items()})
        self.turn_calls = []
        if not calls:
            return self.finish("no_tool_call", terminated=True)
        for i, call in enumerate(calls):
            if i >= self.max_calls_per_turn:
                error = f"at most {self.max_calls_per_turn} tool calls run per turn; this one was not run"
                self.turn_calls.append({**_named(call), "result": f"Error: {error}", "error": error})
                continue
            self.turn_calls.append(self.run_call(call))
            if self.session.submitted or self.session.time_left() <= 0:
                break
        if self.session.submitted:
            return self.finish("submit", terminated=True)
        if self.session.time_left() <= 0:
            return self.finish("agent_timeout", terminated=False)
        if self.turn >= self.max_turns:
            return self.finish("max_turns", terminated=False)
        obs = "\n".join(f"<tool_response>\n{c['result']}\n</tool_response>" for c in self.turn_calls)
        if self.turn == self.max_turns - 1:
            obs += "\nNote: your next turn is the last one; the computer is graded after it."
        self._last_obs = obs
        return obs, 0.0, False, False, {"reward_components": {}, "verified": True, "tool_calls": len(calls),
                                        "calls": self.turn_calls}

    def run_call(self, call: dict[str, Any] | ToolCallError) -> dict[str, Any]:
        """Run one parsed call and record it: ``{"name", "arguments", "result", "error"}`` (``result``: the
        text the agent gets back; ``error``: None when the tool ran, else why not, also in ``result``).
        An infrastructure failure (:class:`sandbox.workspace.WorkspaceError`) propagates: the episode fails."""
        error = None
        try:
            out = invoke(self.tools, call)
        except (ToolCallError, TypeError, ValueError) as e:
            error = str(e)
            out = f"Error: {error}"
        named = _named(call)
        line = "(invalid tool call)" if named["name"] is None else call_line(named["name"], named["arguments"])
        self.session.record(line, out[:MAX_RECORD_CHARS])
        return {**named, "result": out, "error": error}

    def finish(self, ended_by: str, terminated: bool) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """End the episode: seal the workspace (its processes end), close it, grade the tree."""
        ws = self.session.workspace  # built now if the agent never used it: its initial state is graded
        sealed = False
        try:
            tree = ws.seal()
            diff, sealed = tree.diff or "", True
        except TreeTooLarge as e:  # the agent filled its storage: its doing, scored 0 (not an infra failure)
            tree, diff = None, ""
            verdict = Verdict(0.0, output=f"not graded: {e}")
        finally:
            self.session.detach()
            self.session.spec = None  # the episode is over: a step now needs a reset first
            if sealed:  # its processes have ended: the teardown goes on in the background
                self.session.release(ws)
            else:
                ws.close()
        if tree is not None:
            known = self.initial_tree_reward(self.task) if tree.unchanged is True else None
            verdict = self.graded(self.task, tree) if known is None else \
                Verdict(known, output=f"not graded: the tree is the task's initial tree, known to score {known:g}")
        record = {"commands": list(self.session.commands), "outputs": list(self.session.outputs), "diff": diff,
                  "verifier": {"reward": verdict.reward, "rewards": dict(verdict.rewards), "output": verdict.output,
                               "error": verdict.error, "files": list(verdict.files)},
                  "ended_by": ended_by}
        reward = 0.0 if verdict.reward is None else float(verdict.reward)
        info: dict[str, Any] = {"reward_components": dict(verdict.rewards) or {"reward": reward}, "verified": True,
                                "tool_calls": len(self.session.commands), "calls": self.turn_calls,
                                "ended_by": ended_by, "trajectory_info": record}
        if verdict.error:
            info.update(failed=True, error=f"the grader could not score the episode: {verdict.error}")
        self._last_obs = ""
        return "", reward, terminated, not terminated, info

    def graded(self, task: Task, tree: Tree) -> Verdict:
        """:meth:`grade`, through the grade cache when it is on (one grade per distinct final tree)."""
        if self.grades is None:
            return self.grade(task, tree)
        return self.grades.grade(task.id, tree.digest, lambda: self.grade(task, tree))

    def close(self) -> None:
        self.session.shutdown()  # the pools too, when this env made them (a per-episode copy did not)

    def audit_task(self, name_or_task: str | Task, attacks: list[str] | None = None, jobs: int = 1) -> dict[str, Any]:
        """Play known reward hacks (``attacks``: their names, default all) and a no-op agent on one task,
        each as an episode of this env graded as training grades it (``jobs`` at once); which beat the
        no-op, and which made grading fail (see :mod:`environments.audit`)."""
        from environments.audit import audit_task

        return audit_task(self, name_or_task, attacks, jobs)

    @staticmethod
    def attack_names(attacks: list[str] | None = None, skip: list[str] | None = None) -> list[str]:
        """The names of the audit's attacks: ``attacks`` (checked), or the whole library less ``skip``."""
        from environments.audit import ATTACKS
        from environments.audit.run import chosen

        if attacks is not None:
            return [a.name for a in chosen(attacks)]
        excluded = {a.name for a in chosen(skip)} if skip else set()  # chosen() refuses an unknown name
        names = [a.name for a in ATTACKS if a.name not in excluded]
        if not names:
            raise EnvError("--skip leaves no attack to play")
        return names


def _named(call: dict[str, Any] | ToolCallError) -> dict[str, Any]:
    """A call's ``name`` and ``arguments`` (None for a call that could not be parsed)."""
    return {"name": None, "arguments": None} if isinstance(call, ToolCallError) else \
        {"name": call["name"], "arguments": call["arguments"]}
