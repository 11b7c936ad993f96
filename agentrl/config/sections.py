"""The sections of a run's configuration: frozen dataclasses, one docstring under every field, in four
modules by topic — ``model`` (the policy, the warm start), ``rollout`` (env, tasks, sampling, rewards),
``learning`` (algorithm, learner, LoRA; ``OptimConfig`` for the stages before RL) and ``run`` (cluster, logs,
evaluation, checkpoints, the budget and ``RunConfig``, the root of an ``agentrl train`` config).
"""

from __future__ import annotations

from agentrl.config.learning import (
    AlgoConfig,
    LearnerConfig,
    LoraConfig,
    OptimConfig,
)
from agentrl.config.model import (
    ModelConfig,
    TinyModelConfig,
    WarmStartConfig,
)
from agentrl.config.rollout import (
    ContextConfig,
    DataConfig,
    EnvConfig,
    RewardConfig,
    RolloutConfig,
)
from agentrl.config.run import (
    ActorGroupConfig,
    BudgetConfig,
    CheckpointConfig,
    ClusterConfig,
    EvalConfig,
    LogConfig,
    RunConfig,
)

__all__ = [
    "ActorGroupConfig",
    "AlgoConfig",
    "BudgetConfig",
    "CheckpointConfig",
    "ClusterConfig",
    "ContextConfig",
    "DataConfig",
    "EnvConfig",
    "EvalConfig",
    "LearnerConfig",
    "LogConfig",
    "LoraConfig",
    "ModelConfig",
    "OptimConfig",
    "RewardConfig",
    "RolloutConfig",
    "RunConfig",
    "TinyModelConfig",
    "WarmStartConfig",
]
