"""Concrete agentrl environments. ``register_all`` is the ``agentrl.envs`` entry point.

Registration uses string entry points, so nothing here imports an environment module (or its
data) until the environment is made.
"""

from agentrl.env import register

BUILTIN: dict[str, str] = {
    "agentrl/Arithmetic-v0": "environments.arithmetic:ArithmeticEnv",
    "agentrl/Countdown-v0": "environments.countdown:CountdownEnv",
    "agentrl/GSM8K-v0": "environments.math_envs:GSM8KEnv",
    "agentrl/MATH500-v0": "environments.math_envs:MATH500Env",
    "agentrl/AIME24-v0": "environments.math_envs:AIME24Env",
    "agentrl/AMC23-v0": "environments.math_envs:AMC23Env",
}


def register_all() -> None:
    """Register every built-in environment id in gymnasium's registry."""
    for env_id, entry_point in BUILTIN.items():
        register(env_id, entry_point)
