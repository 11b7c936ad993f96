"""A run as a whole: where it runs (single process or Ray actor groups), what it logs, its evaluations,
checkpoints and wall-clock budget, and ``RunConfig``, the root of an ``agentrl train`` config."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrl.config.learning import AlgoConfig, LearnerConfig
from agentrl.config.model import ModelConfig
from agentrl.config.rollout import DataConfig, EnvConfig, RewardConfig, RolloutConfig


@dataclass(frozen=True)
class ActorGroupConfig:
    num: int = 1
    """Actors in the group (policy: data-parallel ranks; engines: rollout engines)."""
    cpus: float = 1.0
    """CPUs each actor reserves (fractions share a core)."""
    gpus: float = 0.0
    """GPUs each actor reserves (fractions share a GPU: colocated mode)."""


@dataclass(frozen=True)
class ClusterConfig:
    mode: str = "local"
    """local (one process) | ray."""
    address: str | None = None
    """Ray address to join; empty starts a local cluster."""
    num_cpus: int | None = None
    """CPUs of a locally started Ray cluster."""
    num_gpus: int | None = None
    """GPUs of a locally started Ray cluster (None: all visible)."""
    policy: ActorGroupConfig = field(default_factory=ActorGroupConfig)
    """Policy workers: ``num`` data-parallel ranks of ``strategy``."""
    reference: ActorGroupConfig = field(default_factory=ActorGroupConfig)
    """Reference model actor (used when ``algo.kl_mode`` is not none)."""
    critic: ActorGroupConfig = field(default_factory=ActorGroupConfig)
    """Critic actor (used by ``algo.estimator: gae``)."""
    reward_model: ActorGroupConfig = field(default_factory=ActorGroupConfig)
    """Reward-model actor (used when ``reward.model`` is set)."""
    engines: ActorGroupConfig = field(default_factory=ActorGroupConfig)
    """Rollout engine actors (``rollout.engine``), dispatched least-loaded first."""
    env_workers: ActorGroupConfig = field(default_factory=lambda: ActorGroupConfig(num=0))
    """Env-worker actors that run the executor (envs, env-step pool) against the engine actors; num 0: in the driver."""
    strategy: str = "deepspeed"
    """Policy training strategy: deepspeed | ddp (torch DDP; used when DeepSpeed is missing)."""
    zero_stage: int = 2
    """DeepSpeed ZeRO stage 0-3."""
    offload_optimizer: bool = False
    """DeepSpeed: keep optimizer states in CPU memory."""
    offload_params: bool = False
    """DeepSpeed ZeRO-3: keep parameters in CPU memory."""
    weight_sync: str = "auto"
    """auto (nccl on whole GPUs, gloo on shared ones, object_store on CPU) | object_store | nccl | gloo (NCCL's protocol via host memory)."""
    sync_timeout_s: float = 300.0
    """nccl | gloo: seconds a weight-sync peer may take to join the group (gloo: also each broadcast) before the run fails."""
    sync_bucket_mb: float = 256.0
    """nccl | gloo: MB per broadcast (consecutive weights flattened into one bucket)."""
    colocate: bool = False
    """GPU: engines sleep while the policy trains and ZeRO-3 states are offloaded while engines generate."""


@dataclass(frozen=True)
class LogConfig:
    run_dir: str = "runs/{name}"
    """Where the run writes config, metrics, plots and checkpoints."""
    name: str = "run"
    """Run name (used in ``run_dir``)."""
    tensorboard: bool = True
    """Write TensorBoard events."""
    wandb_project: str | None = None
    """Log to Weights & Biases too."""
    progress: bool = True
    """Show a progress bar."""
    eval_every: int = 0
    """Evaluate on held-out tasks every N steps (0 = only before and after)."""
    eval_greedy: bool = True
    """Evaluate with greedy decoding."""
    samples_every: int = 10
    """Append a few training episodes (tokens, log-probs, rewards, tool calls: docs/trajectories.md) to
    ``samples.jsonl`` every N steps, and at the first and the last step (0 = off); ``agentrl view`` shows them."""
    samples_per_step: int = 4
    """Training episodes written each time (spread over the batch)."""
    samples_learner_logprobs: bool = True
    """Score the written training episodes with the learner too (one no-grad forward of those few), so the
    record holds the learner's log-probs beside the engine's."""
    eval_samples: int = 4
    """At every evaluation, append the episodes of the first N held-out tasks (the same tasks each time) to
    ``samples.jsonl`` (0 = off)."""


@dataclass(frozen=True)
class EvalConfig:
    envs: list[str] = field(default_factory=list)
    """Env ids ``agentrl eval`` evaluates (empty: env.id); training evaluates env.id with env.eval_kwargs."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Per env id kwargs of eval envs other than env.id (default: env.eval_kwargs, i.e. the test split)."""
    max_tasks: int = 0
    """Tasks per eval env (0 = data.eval_tasks)."""
    n_samples: int = 1
    """Samples per task (pass@k and maj@k need n_samples >= k)."""
    k: list[int] = field(default_factory=lambda: [1])
    """The k of pass@k (unbiased estimator) and maj@k; values above n_samples are skipped."""
    temperature: float | None = None
    """Eval sampling temperature (None: greedy if n_samples is 1 and log.eval_greedy, else rollout.temperature)."""
    sampled: bool = True
    """When evaluation is greedy, the evaluations before and after RL also sample one episode per held-out task
    at ``rollout.temperature`` (``eval/sampled_accuracy``; the closing line gives both: a policy far better
    greedy than sampled gives RL a weak reward signal)."""


@dataclass(frozen=True)
class CheckpointConfig:
    every: int = 0
    """Save every N steps (0 = only at the end)."""
    keep: int = 2
    """How many step checkpoints to keep."""
    save_final: bool = True
    """Save the final policy as a Hugging Face directory."""


@dataclass(frozen=True)
class BudgetConfig:
    max_seconds: float = 0.0
    """Wall-clock budget of the whole ``agentrl train`` (0 = none): loading, the warm start, RL, every
    evaluation and the final save. RL stops early enough for the final evaluation (its time measured on the
    first one); periodic evaluations that would not leave it room are skipped. ``learner.max_seconds`` still
    caps RL alone."""
    warm_start_share: float = 0.5
    """The most of what is left of ``max_seconds`` when the warm start begins that it may take (a warm start
    cut short by the budget is not cached)."""


@dataclass(frozen=True)
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy model."""
    data: DataConfig = field(default_factory=DataConfig)
    """Task sampling and evaluation sizes."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """The environment."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Sampling."""
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    """The RL algorithm."""
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    """Optimisation."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """Reward sources beyond the env."""
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    """Single process or Ray."""
    log: LogConfig = field(default_factory=LogConfig)
    """Metrics, plots, progress."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoints."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Evaluation: ``agentrl eval`` and the evaluations during training."""
    run: BudgetConfig = field(default_factory=BudgetConfig)
    """The whole run's wall-clock budget (``run.max_seconds``)."""

    @property
    def rl_seed(self) -> int:
        """The seed of RL: ``learner.seed``, or ``data.seed`` when it is unset."""
        return self.data.seed if self.learner.seed is None else self.learner.seed
