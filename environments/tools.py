"""Tools for multi-turn envs, and ``ToolEnv``: any single-turn env plus tools the policy can call.

Call format (Hermes / Qwen): the action contains one or more
``<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>``; each result
comes back as the next observation inside ``<tool_response>...</tool_response>``, in order. An
invalid call (unclosed tag, bad JSON, unknown tool, wrong arguments) gets a clear error message
in its ``<tool_response>`` and counts as a call. After ``max_tool_calls`` calls further calls are
refused with a message saying so. An action without a tool call is the final answer: the inner
env scores it and the episode ends. ``max_turns`` (default ``max_tool_calls + 1``) ends an
episode that never answers (``truncated=True``, reward 0).
Each step's ``info["calls"]`` lists that turn's calls (``name``, ``arguments``, ``result``,
``error``); the multi-turn executor keeps them on the trajectory (``info["tool_calls"]``).

The reference policy (``reference_action``, the multi-turn warm start's teacher) makes one correct
call when :meth:`ToolEnv.reference_call` gives one for the task, then answers with the inner env's
reference answer.

A tool is a small class: ``name``, ``description``, JSON-schema ``parameters`` and
``__call__(**arguments) -> str``; ``reset()`` clears per-episode state and ``close()`` frees
resources. Subclass :class:`Tool` to add one::

    class Weather(Tool):
        name = "weather"
        description = "Current temperature in a city, in Celsius."
        parameters = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}

        def __call__(self, city: str) -> str:
            return "21"

    env = ToolEnv(agentrl.make("agentrl/GSM8K-v0"), [Weather()])
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from agentrl.env import TextEnv
from agentrl.types import Message, RewardResult, Task

_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_JSON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list,
               "object": dict}
TOOLS_PROMPT = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{schemas}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call>\n\nEach result comes back in <tool_response></tool_response> tags. "
    "When you know the final answer, reply without a tool call."
)


class Tool:
    """A function the policy can call. Subclasses set the class attributes and ``__call__``."""

    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}, "required": []}

    def __call__(self, **arguments: Any) -> str:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        """The OpenAI/Hermes function schema shown to the policy."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def reset(self) -> None:
        """Forget per-episode state (called at every ``env.reset``)."""

    def close(self) -> None:
        """Free resources (called at ``env.close``)."""


class ToolCallError(ValueError):
    """A tool call the env cannot run; the message goes back to the policy."""


def parse_tool_calls(action: str) -> list[dict[str, Any] | ToolCallError]:
    """Every ``<tool_call>`` of ``action`` in order: ``{"name", "arguments"}`` or the parse error."""
    out: list[dict[str, Any] | ToolCallError] = []
    for body in _CALL_RE.findall(action):
        try:
            call = json.loads(body)
        except json.JSONDecodeError as e:
            out.append(ToolCallError(f"the tool call is not valid JSON ({e.msg} at position {e.pos})"))
            continue
        except RecursionError:  # "[[[[..." thousands deep: not a crash of the episode
            out.append(ToolCallError("the tool call is nested too deeply"))
            continue
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            out.append(ToolCallError('a tool call must be a JSON object {"name": ..., "arguments": {...}}'))
            continue
        args = call.get("arguments", {})
        if isinstance(args, str):  # some models send the arguments as a JSON string
            try:
                args = json.loads(args)
            except (json.JSONDecodeError, RecursionError):
                pass
        if not isinstance(args, dict):
            out.append(ToolCallError(f"the arguments of {call['name']!r} must be a JSON object"))
            continue
        out.append({"name": call["name"], "arguments": args})
    if action.count("<tool_call>") > action.count("</tool_call>"):
        out.append(ToolCallError("a <tool_call> tag is not closed with </tool_call>"))
    return out


def invoke(tools: dict[str, Any], call: dict[str, Any] | ToolCallError) -> str:
    """The result text of one parsed call ``{"name", "arguments"}`` on ``tools``; a call that could not be
    parsed, an unknown tool or wrong arguments raise :class:`ToolCallError`."""
    if isinstance(call, ToolCallError):
        raise call
    tool = tools.get(call["name"])
    if tool is None:
        raise ToolCallError(f"unknown tool {call['name']!r}; available: {', '.join(tools)}")
    check_arguments(tool, call["arguments"])
    return str(tool(**call["arguments"]))


def check_arguments(tool: Tool, args: dict[str, Any]) -> None:
    """Raise :class:`ToolCallError` when ``args`` do not fit the tool's JSON schema (names, types)."""
    props = tool.parameters.get("properties", {})
    missing = [k for k in tool.parameters.get("required", []) if k not in args]
    if missing:
        raise ToolCallError(f"{tool.name!r} is missing required argument(s): {', '.join(missing)}")
    unknown = [k for k in args if k not in props]
    if unknown:
        raise ToolCallError(f"{tool.name!r} has no argument(s) {', '.join(unknown)}; it takes: {', '.join(props)}")
    for k, v in args.items():
        expected = _JSON_TYPES.get(props[k].get("type", ""))
        if expected and (not isinstance(v, expected) or (isinstance(v, bool) and props[k]["type"] != "boolean")):
            raise ToolCallError(f"argument {k!r} of {tool.name!r} must be of type {props[k]['type']}")


def hermes_call(name: str, arguments: dict[str, Any]) -> str:
    """A call of tool ``name`` in the Hermes format :func:`parse_tool_calls` reads."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def tools_text(tools: list[Tool], template: str = TOOLS_PROMPT) -> str:
    """The tools' description for the system message: ``template`` with ``{schemas}`` filled in."""
    return template.replace("{schemas}", "\n".join(json.dumps(t.schema()) for t in tools))


def with_tools_prompt(prompt: str | list[Message], text: str) -> list[Message]:
    """Chat messages with ``text`` (see :func:`tools_text`) in the system message (added or extended)."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
    if messages and messages[0]["role"] == "system":
        messages[0]["content"] = messages[0]["content"] + "\n\n" + text
        return messages
    return [{"role": "system", "content": text}, *messages]


class ToolEnv(TextEnv):
    """An inner single-turn env (tasks, reward) with tools; multi-turn (see the module docstring)."""

    feedback_role = "user"

    def __init__(self, inner: TextEnv, tools: list[Tool], max_tool_calls: int = 4, max_turns: int | None = None,
                 tools_prompt: str = TOOLS_PROMPT, render_mode: str | None = None,
                 parse: Any = None) -> None:
        super().__init__(render_mode=render_mode)
        if not tools or len({t.name for t in tools}) != len(tools) or not all(t.name for t in tools):
            raise ValueError("ToolEnv needs at least one tool and unique, non-empty tool names")
        self.inner, self.tools = inner, {t.name: t for t in tools}
        self.parse = parse  # another call format: parse(action, schemas) (environments.tool_parsers)
        self.max_tool_calls, self.tools_text = max_tool_calls, tools_text(tools, tools_prompt)
        self.max_turns = max_turns or max_tool_calls + 1
        if self.max_turns < 2:
            raise ValueError("a tool env needs max_turns >= 2")
        inner_tasks = getattr(inner, "tasks", None)
        if inner_tasks is not None:
            self.tasks = [self.with_tools(t) for t in inner_tasks]
        self.calls = self.turn = 0
        self.render_call = hermes_call  # how reference calls are written (another format: tool_parsers.render_call)

    def reference_call(self, task: Task) -> tuple[str, dict[str, Any]] | None:
        """The (tool name, arguments) of a correct call for ``task``, or None (then the reference policy
        answers at once). Tool envs that know how their tool solves a task override it."""
        return None

    def reference_action(self) -> str:
        """One correct tool call first (when :meth:`reference_call` gives one), then the final answer."""
        if self.task is None:
            raise RuntimeError("call reset() before reference_action()")
        call = self.reference_call(self.task) if self.calls == 0 else None
        return self.inner.reference_answer(self.task) if call is None else self.render_call(*call)

    def with_tools(self, task: Task) -> Task:
        """The inner task with the tools' description added to its prompt."""
        return Task(id=task.id, prompt=with_tools_prompt(task.prompt, self.tools_text),
                    answer=task.answer, metadata={**task.metadata, "tools": sorted(self.tools)})

    def sample_task(self, rng: np.random.Generator) -> Task:
        tasks = getattr(self, "tasks", None)
        if tasks is not None:
            return tasks[int(rng.integers(len(tasks)))]
        return self.with_tools(self.inner.sample_task(rng))

    def score(self, action: str, task: Task) -> RewardResult:
        return self.inner.score(action, task)

    def reference_answer(self, task: Task) -> str:
        return self.inner.reference_answer(task)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        self.calls = self.turn = 0
        for tool in self.tools.values():
            tool.reset()
        return super().reset(seed=seed, options=options)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        action = action if isinstance(action, str) else str(action)
        self.turn += 1
        calls = (self.parse(action, {n: t.parameters for n, t in self.tools.items()}) if self.parse
                 else parse_tool_calls(action))
        if not calls:  # the final answer
            result = self.score(action, self.task)
            info = {"reward_components": dict(result.components), "verified": True, "tool_calls": self.calls,
                    **result.info}
            self._last_obs = ""
            return "", float(result.score), True, False, info
        records = [self.record_call(c) for c in calls]
        obs = "\n".join(f"<tool_response>\n{r['result']}\n</tool_response>" for r in records)
        self._last_obs = obs
        truncated = self.turn >= self.max_turns
        info = {"reward_components": {"correct": 0.0}, "verified": True, "tool_calls": self.calls, "calls": records}
        return obs, 0.0, False, truncated, info

    def record_call(self, call: dict[str, Any] | ToolCallError) -> dict[str, Any]:
        """Run one call: ``{"name", "arguments", "result", "error"}`` (``error``: None when the tool ran and
        returned), as a step's ``info["calls"]`` lists them (the executor keeps them on the trajectory)."""
        result, error = self._run(call)
        if isinstance(call, ToolCallError):
            return {"name": None, "arguments": None, "result": result, "error": error}
        return {"name": call["name"], "arguments": call["arguments"], "result": result, "error": error}

    def run_call(self, call: dict[str, Any] | ToolCallError) -> str:
        """The text returned for one call (its result, or an error message for the policy)."""
        return self._run(call)[0]

    def _run(self, call: dict[str, Any] | ToolCallError) -> tuple[str, str | None]:
        """(text for the policy, the error or None) of one call; every call counts against the limit."""
        self.calls += 1
        if self.calls > self.max_tool_calls:
            error = f"the limit of {self.max_tool_calls} tool calls is reached; give your final answer now."
            return f"Error: {error}", error
        try:
            return invoke(self.tools, call), None
        except ToolCallError as e:
            return f"Error: {e}", str(e)

    def close(self) -> None:
        for tool in self.tools.values():
            tool.close()
        self.inner.close()
