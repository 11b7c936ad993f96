# An OpenRLHF agent file, written as OpenRLHF's README shows (--agent_func_path); used unchanged.
from typing import Any

import torch
from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor


class AgentInstance(AgentInstanceBase):
    def __init__(self, *args, **kwargs):
        self.step_idx = 0
        self.max_steps = 2

    async def reset(self, states: dict, **kwargs):
        return {"observation": states["observation"]}

    async def step(self, states: dict, **kwargs) -> dict[str, Any]:
        action_text = states["action_text"]
        label = states["label"]
        self.step_idx += 1
        correct = action_text.strip() == str(label)
        done = correct or self.step_idx >= self.max_steps
        reward = torch.tensor(1.0) if correct else torch.tensor(0.0)
        environment_feedback = "" if done else " wrong, again: "
        return {
            "rewards": reward,
            "scores": reward,
            "environment_feedback": environment_feedback,
            "done": done,
            "sampling_params": states.get("sampling_params", None),
            "extra_logs": {"turn": torch.tensor(float(self.step_idx))},
        }


class AgentExecutor(MultiTurnAgentExecutor):
    def __init__(self):
        super().__init__(AgentInstance)
