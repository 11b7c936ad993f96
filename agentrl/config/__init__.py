"""Run configuration (``agentrl.config``): frozen nested dataclasses, loaded from YAML with dotted CLI overrides.

Every field has a one-line docstring below it. Loading validates everything up front (unknown
keys, wrong types, unknown estimators or losses) and raises :class:`ConfigError` with one line
naming the problem. Nothing rewrites the config while a run is going.
"""


from agentrl.config.loading import (
    CHOICES,
    ConfigError,
    build,
    load_config,
    parse_overrides,
    read_yaml,
    save_config,
    to_dict,
)
from agentrl.config.sections import (
    ActorGroupConfig,
    AlgoConfig,
    BudgetConfig,
    CheckpointConfig,
    ClusterConfig,
    DataConfig,
    EnvConfig,
    EvalConfig,
    LearnerConfig,
    LogConfig,
    ModelConfig,
    OptimConfig,
    RewardConfig,
    RolloutConfig,
    RunConfig,
    TinyModelConfig,
    WarmStartConfig,
)

__all__ = [
    "CHOICES", "ActorGroupConfig", "AlgoConfig", "BudgetConfig", "CheckpointConfig", "ClusterConfig", "ConfigError",
    "DataConfig", "EnvConfig", "EvalConfig", "LearnerConfig", "LogConfig", "ModelConfig", "OptimConfig",
    "RewardConfig", "RolloutConfig", "RunConfig", "TinyModelConfig", "WarmStartConfig", "build",
    "load_config", "parse_overrides", "read_yaml", "save_config", "to_dict",
]
