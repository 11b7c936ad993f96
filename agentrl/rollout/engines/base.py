"""The ``InferenceEngine`` protocol every backend implements (DESIGN.md "InferenceEngine")."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion per prompt."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class Completion:
    """One generated continuation: ``token_ids`` (with the EOS if it stopped), one log-prob each.

    ``finish_reason`` is ``stop`` (an EOS or stop token ended it) or ``length`` (budget ran out).
    """

    token_ids: list[int]
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "length"


@runtime_checkable
class InferenceEngine(Protocol):
    """Generates token ids from token ids; takes fresh weights after each policy update."""

    def generate(self, prompt_token_ids: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One completion per prompt, in order."""
        ...

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Replace the engine's weights with the policy's (names as in the HF state dict)."""
        ...

    def sleep(self) -> None:
        """Free accelerator memory between rollouts where the backend supports it."""
        ...

    def wake_up(self) -> None:
        """Undo :meth:`sleep`."""
        ...
