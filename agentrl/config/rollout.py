"""What a run samples: the environment, the tasks drawn per step and held out, the rollout (engine,
sampling, long-episode context policies) and the reward sources beyond the env."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
class CurriculumConfig:
    key: list[str] = field(default_factory=list)
    """Task metadata fields whose values name a bucket of tasks that pass or fail alike (Terminal-v0:
    ``[family, difficulty]``; ``[id]``: each task of a dataset its own bucket, across epochs). Empty: off, tasks
    come in the source's order. On: each step's tasks are picked from ``candidates`` x as many drawn, preferring
    buckets whose groups are likely to have rewards that differ (``agentrl.training.curriculum``)."""
    candidates: int = 4
    """Tasks drawn per task picked (1: no choice, the plain order)."""
    temperature: float = 0.25
    """Sharpness of the pick: probability ~ (chance a group's rewards differ) ** (1 / temperature)."""
    decay: float = 0.9
    """Weight of a bucket's evidence after each batch (1: never forgotten; the policy changes under it)."""
    prior_strength: float = 2.0
    """Pseudo-samples of a bucket's prior: the success rate of the bucket one key field up (its family)."""


@dataclass(frozen=True)
class DataConfig:
    prompts_per_step: int = 32
    """Tasks per training step (each sampled ``rollout.n_samples`` times)."""
    seed: int = 0
    """Seed of the run: task sampling, generation and initialisation, the warm start and the held-out tasks
    (``learner.seed``, when set, takes over RL's task order, sampling and initialisation). A multi-turn run
    plays the same episodes under it however its envs' timing batches their turns (each episode samples from
    its own stream: ``SamplingParams.row_seeds``; the transformers engine), up to the last bits of the
    logits, which move with the batch's shape."""
    eval_tasks: int = 500
    """Held-out tasks per evaluation."""
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    """Online task selection by measured pass rates (off unless ``key`` is set)."""


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
