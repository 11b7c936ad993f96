"""``RewardModel``: scores the samples an environment could not verify (``info["verified"] = False``).

On-disk format (what ``reward.model`` points at, and what agentrl's reward-model trainer writes
with :func:`save_reward_model`):

- a Hugging Face directory that ``AutoModelForSequenceClassification.from_pretrained`` loads, with
  ``num_labels == 1``: any sequence-classification reward model (e.g. one trained with TRL's
  ``RewardTrainer``), or a causal LM backbone with a linear score head on its last hidden state
  (``LlamaForSequenceClassification``, ``Qwen2ForSequenceClassification``, ... — what
  ``AutoModelForSequenceClassification`` builds from a causal LM config). A plain causal LM
  without a trained score head is refused, not silently scored by a random head;
- optionally its own tokenizer files. With them, a sample is decoded to text with the policy's
  tokenizer and re-tokenized as a ``[user: prompt, assistant: response]`` chat when the reward
  model's tokenizer has a chat template, else as ``prompt + response``. Without them the reward
  model must share the policy's vocabulary and scores the trajectory's token ids as they are
  (prompt ids, then every response segment: actions and feedback). An episode whose context was
  rebuilt (truncated, compacted) is scored on its **last** context, the one that holds how it ended
  (a compacted context starts with the episode's summary);
- optionally ``reward_stats.json``: ``{"mean": m, "std": s}``; scores are then ``(raw - m) / s``
  (the reward-model trainer writes the statistics of its training scores, so rewards are about
  unit scale).

The raw score is the model's single logit for the whole sequence (Hugging Face pools it at the last
non-padding token; sequences are right-padded with ``config.pad_token_id``). Sequences longer than
``max_length`` keep their last ``max_length`` tokens (the end holds the answer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from agentrl.types import Trajectory

STATS_FILE = "reward_stats.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


class RewardModel:
    """A scalar reward for (prompt, response) sequences, in batches, without gradients."""

    def __init__(self, model: Any, *, policy_tokenizer: Any = None, tokenizer: Any = None, mean: float = 0.0,
                 std: float = 1.0, batch_size: int = 16, max_length: int | None = None) -> None:
        if getattr(model.config, "num_labels", 1) != 1:
            raise ValueError(f"a reward model has one output (num_labels=1), this one has {model.config.num_labels}")
        if std <= 0:
            raise ValueError(f"reward_stats std must be > 0, got {std}")
        self.model = model.eval()
        self.policy_tokenizer, self.tokenizer = policy_tokenizer, tokenizer
        self.mean, self.std, self.batch_size = float(mean), float(std), batch_size
        self.max_length = max_length or getattr(model.config, "max_position_embeddings", None)
        if model.config.pad_token_id is None:
            pad = next((t.pad_token_id for t in (tokenizer, policy_tokenizer) if t is not None and
                        t.pad_token_id is not None), None)
            model.config.pad_token_id = pad if pad is not None else 0
        self.pad_id = int(model.config.pad_token_id)

    @classmethod
    def load(cls, path: str | Path, tokenizer: Any = None, device: str = "auto", dtype: str = "float32",
             batch_size: int = 16, max_length: int | None = None) -> RewardModel:
        """Load the format above; ``tokenizer`` is the policy's (used when the dir has none)."""
        from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

        from agentrl.models import DTYPES, resolve_device

        path = Path(path)
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"reward model {str(path)!r}: no config.json (expected a Hugging Face directory)")
        config = AutoConfig.from_pretrained(str(path))
        archs = config.architectures or []
        if not any(a.endswith(("ForSequenceClassification", "RewardModel")) for a in archs):
            raise ValueError(f"reward model {str(path)!r} is a {', '.join(archs) or 'model'} without a score head; "
                             "expected a *ForSequenceClassification directory with num_labels=1 "
                             "(see agentrl/training/reward_model.py)")
        model = AutoModelForSequenceClassification.from_pretrained(str(path), dtype=DTYPES[dtype])
        model.to(resolve_device(device))
        own = AutoTokenizer.from_pretrained(str(path)) if any((path / f).exists() for f in TOKENIZER_FILES) else None
        if own is None and tokenizer is None:
            raise ValueError(f"reward model {str(path)!r} has no tokenizer files and no policy tokenizer was given")
        stats = json.loads((path / STATS_FILE).read_text()) if (path / STATS_FILE).exists() else {}
        return cls(model, policy_tokenizer=tokenizer, tokenizer=own, mean=stats.get("mean", 0.0),
                   std=stats.get("std", 1.0), batch_size=batch_size, max_length=max_length)

    def sequences(self, trajectories: list[Trajectory]) -> list[list[int]]:
        """The token ids the reward model reads for each trajectory (see the module docstring)."""
        contexts = [final_context(t) for t in trajectories]
        if self.tokenizer is None:
            return [prompt + response for prompt, response in contexts]
        dec = self.policy_tokenizer
        if dec is None:
            raise ValueError("re-tokenizing for the reward model needs the policy tokenizer")
        return [self.encode_text(dec.decode(prompt, skip_special_tokens=True),
                                 dec.decode(response, skip_special_tokens=True)) for prompt, response in contexts]

    def encode_text(self, prompt: str, response: str) -> list[int]:
        """Reward-model token ids of a (prompt, response) pair in text."""
        tok = self.tokenizer or self.policy_tokenizer
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template([{"role": "user", "content": prompt},
                                           {"role": "assistant", "content": response}], tokenize=True)
            return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        return tok(prompt + response, add_special_tokens=True)["input_ids"]

    @torch.no_grad()
    def score_ids(self, sequences: list[list[int]]) -> list[float]:
        """Normalised scores of token-id sequences, ``batch_size`` at a time."""
        device = next(self.model.parameters()).device
        scores: list[float] = []
        for start in range(0, len(sequences), self.batch_size):
            chunk = [s[-self.max_length:] if self.max_length else s for s in sequences[start:start + self.batch_size]]
            width = max(len(s) for s in chunk)
            ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)  # (B,T) right-padded
            mask = torch.zeros((len(chunk), width), dtype=torch.long)             # (B,T)
            for row, s in enumerate(chunk):
                ids[row, :len(s)] = torch.tensor(s, dtype=torch.long)
                mask[row, :len(s)] = 1
            logits = self.model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits  # (B,1)
            scores += ((logits[:, 0].float() - self.mean) / self.std).tolist()
        return scores

    def score(self, trajectories: list[Trajectory]) -> list[float]:
        """One reward per trajectory (the trainer's ``score_unverified`` stage)."""
        if not trajectories:
            return []
        return self.score_ids(self.sequences(trajectories))

    def score_texts(self, prompts: list[str], responses: list[str]) -> list[float]:
        """One reward per (prompt, response) text pair."""
        return self.score_ids([self.encode_text(p, r) for p, r in zip(prompts, responses)])


def final_context(t: Trajectory) -> tuple[list[int], list[int]]:
    """(prompt ids, response ids) of the episode's last context: the only context when it was never
    rebuilt; after a truncation or compaction, the one in which the episode ended."""
    prompt, segments = t.samples()[-1]
    return list(prompt), [tok for s in segments for tok in s.token_ids]


def save_reward_model(model: Any, path: str | Path, tokenizer: Any = None,
                      stats: dict[str, float] | None = None) -> Path:
    """Write a reward model in the format above (for the reward-model trainer).

    ``model`` is a ``*ForSequenceClassification`` with ``num_labels=1``; ``tokenizer`` is saved
    beside it when given (omit it to score the policy's token ids directly); ``stats`` is
    ``{"mean", "std"}`` of the model's scores on its training data.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(path))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(path))
    if stats is not None:
        (path / STATS_FILE).write_text(json.dumps({"mean": float(stats["mean"]), "std": float(stats["std"])}))
    return path
