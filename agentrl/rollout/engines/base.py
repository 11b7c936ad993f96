"""The ``InferenceEngine`` protocol every backend implements (DESIGN.md "InferenceEngine")."""

from __future__ import annotations

import hashlib
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
    row_seeds: tuple[int, ...] | None = None
    """One seed per prompt of a ``generate`` call: prompt ``i`` samples from its own random stream, seeded by
    ``row_seeds[i]``, so its tokens do not depend on which other prompts share the call (a multi-turn
    executor's batches are made by its envs' timing). None: the engine's own RNG (seeded by ``seed``). Honoured
    by ``HFEngine``'s loop sampler; vLLM samples as without them (its numerics change with the batch anyway)."""

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def derive_seed(*parts: int) -> int:
    """A seed in [0, 2**63) that is a fixed function of the integers ``parts`` (e.g. a run's base seed, a
    group, a sample, a turn), the same in every process and on every platform."""
    data = b"".join(int(x).to_bytes(16, "little", signed=True) for x in parts)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 1


def draw_seed() -> int:
    """A base seed in [0, 2**62) drawn from torch's global RNG (so ``torch.manual_seed`` fixes it): an executor
    draws one per run and derives its episodes' row seeds from it with :func:`derive_seed`."""
    return int(torch.randint(0, 2**62, (1,)).item())


def check_row_seeds(params: SamplingParams, n_prompts: int) -> None:
    """Raise ValueError unless ``params.row_seeds`` is None or has one seed per prompt."""
    if params.row_seeds is not None and len(params.row_seeds) != n_prompts:
        raise ValueError(f"SamplingParams.row_seeds has {len(params.row_seeds)} seeds for {n_prompts} prompts; "
                         "give one per prompt or None")


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
