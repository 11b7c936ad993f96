"""Concrete agentrl environments. ``register_all`` is the ``agentrl.envs`` entry point.

Registration uses string entry points, so nothing here imports an environment module (or its
data) until the environment is made.
"""

from agentrl.env import register

BUILTIN: dict[str, str] = {
    "agentrl/Arithmetic-v0": "environments.arithmetic:ArithmeticEnv",
}


def register_all() -> None:
    """Register every built-in environment id in gymnasium's registry."""
    for env_id, entry_point in BUILTIN.items():
        register(env_id, entry_point)
