"""agentrl: an agentic RL gym with verifiable-reward environments.

``import agentrl`` is light: it loads the data types and the environment registry (gymnasium),
never ray, vllm, deepspeed, docker or fastapi.
"""

from agentrl.env import TextEnv, list_envs, load_plugins, make, register
from agentrl.types import RewardResult, Segment, Task, Trajectory

__version__ = "0.1.0"
__all__ = ["RewardResult", "Segment", "Task", "TextEnv", "Trajectory", "list_envs", "make", "register",
           "__version__"]

load_plugins()
