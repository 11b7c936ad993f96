"""Configs of the stages before RL: ``agentrl sft | rm | dpo CONFIG [dotted.key=value ...]``.

Frozen dataclasses like :class:`agentrl.config.RunConfig`, loaded by the same
``load_config(path, overrides, cls=SFTConfig)``; they reuse its ``model``, ``env``, ``log`` and
``checkpoint`` sections. Choices are checked when the config loads (one-line ``ConfigError``).
Single process only (CPU or one GPU): these stages have no ``cluster`` section yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrl.config import CheckpointConfig, ConfigError, EnvConfig, LogConfig, ModelConfig, OptimConfig
from agentrl.config.sections import LoraConfig

DATA_SOURCES = "env | a .jsonl/.json/.parquet file | a hub dataset name"


@dataclass(frozen=True)
class StageDataConfig:
    train: str = "env"
    """Training records: ``env`` (made from the env's tasks), a .jsonl/.json/.parquet file, or a hub name."""
    eval: str | None = None
    """Held-out records (same forms); unset: ``eval_fraction`` of the training records is held out."""
    eval_fraction: float = 0.1
    """Share of the training records held out when ``eval`` is unset."""
    hub_split: str = "train"
    """Split of a hub dataset (``datasets`` is imported only for hub names)."""
    examples: int = 1000
    """Records made when ``train`` is ``env`` (distinct tasks; the held-out ones come from ``env.eval_kwargs``)."""
    eval_examples: int = 200
    """Held-out records made when ``train`` is ``env``."""
    prompt_key: str = "prompt"
    """Record key of the prompt (text or chat messages)."""
    response_key: str = "response"
    """Record key of the SFT response (text)."""
    messages_key: str = "messages"
    """Record key of a whole chat (SFT: the loss is on every assistant message)."""
    chosen_key: str = "chosen"
    """Record key of the preferred response (text, or chat messages ending with the assistant's)."""
    rejected_key: str = "rejected"
    """Record key of the dispreferred response."""
    margin_key: str = "margin"
    """Record key of an optional per-pair reward margin (reward model)."""
    chat_template: bool = False
    """Render prompts (and chats) with the tokenizer's chat template."""
    max_length: int = 1024
    """Longest tokenized example; longer ones are cut on the right (the prompt is kept)."""
    seed: int = 0
    """Seed of shuffling, the held-out split, the env-made records and initialisation."""


@dataclass(frozen=True)
class SFTSection:
    packing: bool = False
    """Pack several examples in one row with a block-diagonal attention mask and position ids
    restarting per example (exact isolation; needs a model taking 4D masks, e.g. Llama/Qwen/GPT-2)."""
    pack_length: int = 1024
    """Row length of packed batches (tokens)."""
    greedy_eval_tasks: int = 0
    """Also report greedy success on this many held-out env tasks (0 = off)."""
    max_new_tokens: int = 64
    """Token budget of the greedy evaluation."""


@dataclass(frozen=True)
class RMSection:
    loss: str = "pairwise"
    """pairwise (-log s(r_c - r_r - m)) | logexp (log(1 + exp(r_r - r_c + m)))."""
    margin: float | None = None
    """A constant margin m (records' ``margin_key`` values take precedence)."""
    wrong_answers: str = "near"
    """Env-made rejected answers: near (the answer plus a small offset) | random (another task's answer)."""


@dataclass(frozen=True)
class DPOSection:
    beta: float = 0.1
    """Temperature of the implicit reward (beta * log-ratio)."""
    label_smoothing: float = 0.0
    """Conservative DPO: the share of labels assumed flipped (0 <= eps < 0.5)."""
    ipo: bool = False
    """IPO's squared loss instead of DPO's; sequence log-probs are then averaged over tokens (as IPO's paper)."""
    reference: str | None = None
    """Reference model dir or hub id (unset: a frozen copy of the initial policy)."""
    sft_weight: float = 0.0
    """Weight of an extra NLL term on the chosen responses (0 = pure DPO)."""
    wrong_answers: str = "near"
    """Env-made rejected answers: near | random (see ``rm.wrong_answers``)."""


@dataclass(frozen=True)
class SFTConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    """The model to fine-tune (``tiny`` builds one for the env)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """The env that makes data (``data.train: env``) and scores greedy evaluation."""
    data: StageDataConfig = field(default_factory=StageDataConfig)
    """Records and tokenization."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimisation."""
    sft: SFTSection = field(default_factory=SFTSection)
    """SFT options."""
    log: LogConfig = field(default_factory=lambda: LogConfig(name="sft", progress=False))
    """Metrics."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoints (the final model goes to ``RUN/final``)."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """LoRA adapters instead of full fine-tuning (``lora.r=8``); ``RUN/final`` gets the merged model."""


@dataclass(frozen=True)
class RMConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    """The causal LM under the score head."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """The env that makes pairs (``data.train: env``)."""
    data: StageDataConfig = field(default_factory=StageDataConfig)
    """Records and tokenization."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimisation."""
    rm: RMSection = field(default_factory=RMSection)
    """Reward-model options."""
    log: LogConfig = field(default_factory=lambda: LogConfig(name="rm", progress=False))
    """Metrics."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoints (the final reward model goes to ``RUN/final``)."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """LoRA adapters instead of full fine-tuning (``lora.r=8``); ``RUN/final`` gets the merged model."""

    def __post_init__(self) -> None:
        _choice("rm.loss", self.rm.loss, ("pairwise", "logexp"))
        _choice("rm.wrong_answers", self.rm.wrong_answers, ("near", "random"))


@dataclass(frozen=True)
class DPOConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    """The policy (and, without ``dpo.reference``, the reference)."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """The env that makes pairs (``data.train: env``)."""
    data: StageDataConfig = field(default_factory=StageDataConfig)
    """Records and tokenization."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimisation."""
    dpo: DPOSection = field(default_factory=DPOSection)
    """DPO options."""
    log: LogConfig = field(default_factory=lambda: LogConfig(name="dpo", progress=False))
    """Metrics."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoints (the final policy goes to ``RUN/final``)."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """LoRA adapters instead of full fine-tuning (``lora.r=8``); ``RUN/final`` gets the merged model."""

    def __post_init__(self) -> None:
        _choice("dpo.wrong_answers", self.dpo.wrong_answers, ("near", "random"))
        if not 0.0 <= self.dpo.label_smoothing < 0.5:
            raise ConfigError(f"dpo.label_smoothing: must be in [0, 0.5), got {self.dpo.label_smoothing}")
        if self.dpo.beta <= 0:
            raise ConfigError(f"dpo.beta: must be > 0, got {self.dpo.beta}")


def _choice(where: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"{where}: unknown value {value!r}; valid: {', '.join(valid)}")
