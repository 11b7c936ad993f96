"""Concrete agentrl environments. ``register_all`` is the ``agentrl.envs`` entry point.

Registration uses string entry points, so nothing here imports an environment module (or its
data) until the environment is made. ``agentrl`` is imported inside :func:`register_all`, not at the
top: ``import agentrl`` loads the plugins, so importing ``environments.x`` first must find
``register_all`` already defined.
"""

BUILTIN: dict[str, str] = {
    "agentrl/Arithmetic-v0": "environments.arithmetic:ArithmeticEnv",
    "agentrl/Countdown-v0": "environments.countdown:CountdownEnv",
    "agentrl/GSM8K-v0": "environments.math_envs:GSM8KEnv",
    "agentrl/MATH500-v0": "environments.math_envs:MATH500Env",
    "agentrl/AIME24-v0": "environments.math_envs:AIME24Env",
    "agentrl/AMC23-v0": "environments.math_envs:AMC23Env",
    "agentrl/HumanEval-v0": "environments.code_envs:HumanEvalEnv",
    "agentrl/MBPP-v0": "environments.code_envs:MBPPEnv",
    "agentrl/MBPPRetry-v0": "environments.code_envs:MBPPRetryEnv",
    "agentrl/CalculatorMath-v0": "environments.tool_math:CalculatorMathEnv",
    "agentrl/PythonToolMath-v0": "environments.tool_math:PythonToolMathEnv",
    "agentrl/GuessNumber-v0": "environments.guess_number:GuessNumberEnv",
    "agentrl/Terminal-v0": "environments.terminal.env:TerminalEnv",
    "agentrl/RepoRepair-v0": "environments.repo_repair.env:RepoRepairEnv",
}


def register_all() -> None:
    """Register every built-in environment id in gymnasium's registry."""
    from agentrl.env import register

    for env_id, entry_point in BUILTIN.items():
        register(env_id, entry_point)
    from environments.adapters import register_families

    register_families()
