"""A tool env a warm-started tiny model makes tool calls in (for the viewer's browser test).

``agentrl/CalculatorMath-v0`` on one-digit sums (``agentrl/Arithmetic-v0``), two calls allowed, whose
reference answer is a calculator call of the task's expression: the warm start teaches the tiny model
to call the tool (a randomly initialised one never writes ``<tool_call>``). Each call that runs earns
0.25 on its turn, so episodes have per-turn rewards to show; the final answer scores as usual.
"""

from __future__ import annotations

import json
from typing import Any

from agentrl.types import Task
from environments.tool_math import CalculatorMathEnv


class CallingCalculatorEnv(CalculatorMathEnv):
    def __init__(self, split: str = "train", **kwargs: Any) -> None:
        super().__init__(base="agentrl/Arithmetic-v0", digits=1, max_tool_calls=2, split=split,
                         tools_prompt="Tools:\n{schemas}\nCall one as <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.", **kwargs)

    def reference_answer(self, task: Task) -> str:
        call = {"name": "calculator", "arguments": {"expression": task.metadata["expr"]}}
        return f"<tool_call>{json.dumps(call)}</tool_call>"

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        ran = sum(c["error"] is None for c in info.get("calls", []))
        return obs, reward + 0.25 * ran, terminated, truncated, info
