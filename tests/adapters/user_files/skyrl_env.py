# A SkyRL-gym environment, written as SkyRL-gym's docs show (BaseTextEnv: init/step); two turns.
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput


class RetryAdditionEnv(BaseTextEnv):
    def __init__(self, env_config: Any = None, extras: dict[str, Any] = {}):  # noqa: B006 - as SkyRL-gym writes it
        super().__init__()
        self.ground_truth = extras["reward_spec"]["ground_truth"]
        self.max_turns = 2

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        correct = action.strip() == str(self.ground_truth)
        done = correct or self.turns >= self.max_turns
        observations = [] if done else [{"role": "user", "content": "Not quite. Try again:"}]
        return BaseTextEnvStepOutput(observations=observations, reward=1.0 if correct else 0.0, done=done,
                                     metadata={"turns": self.turns})
