"""How the policy learns: the RL algorithm (estimator, losses, KL, off-policy weights), the learner
(optimizer, batches, budgets, LoRA) and the optimizer section the stages before RL share (``OptimConfig``)."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    neg_adv_weight: float = 1.0
    """Weight of negative advantages (1: the plain policy gradient; 0: only the better-than-baseline samples are
    reinforced; between: the push-down of worse samples damped). On a peaked policy one update lowers a failed
    sample's log-prob by nats while a successful one gains hundredths (docs/configuration.md)."""
    branch_window: int | None = None
    """Branch-point credit: each sample's advantage kept only on this many generated tokens from the point
    where it leaves its nearest sibling of another reward (0: from there to its end; null: off, every token
    keeps it). The tokens a success shares with a failure decided neither (agentrl.algorithms.branch)."""
    guide: bool = False
    """Off-policy guidance: a group none of whose samples succeeded (best reward below 1) gets the env's
    reference episode of its task in place of its last sample when that scores higher, so a task the policy
    never solves still gives a success to learn from (agentrl.training.guidance; LUFFY's mixed groups)."""
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
    """Run a prompt shared by a group's samples once in the learner's forward/backward, and a beginning that every
    distinct prompt shares (a system prompt, a tool list) once for all of them (same gradients)."""
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
    seed: int | None = None
    """Seed of RL alone: the training tasks' order, the sampling and the initialisation after the warm start (LoRA
    adapters, value head). None = ``data.seed``. The warm start, the tiny model and the held-out tasks follow
    ``data.seed``, so runs that differ only here share one cached warm start and evaluate on the same tasks."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """Low-rank adapters (peft) instead of full fine-tuning; the reference is the base with adapters off."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them (less memory,
    ~1/3 more compute; the shared-prompt KV path and LoRA included: ``agentrl.training.activation_checkpointing``)."""


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
