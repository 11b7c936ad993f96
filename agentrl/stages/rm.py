"""Reward-model training: ``agentrl rm CONFIG`` on chosen/rejected pairs.

The model is any causal LM with a scalar score head: ``AutoModelForSequenceClassification`` with
``num_labels=1`` (the backbone's weights load from a causal-LM checkpoint; the head starts fresh). It
reads the score at the last non-padding token (the sequence ends with the EOS the policy emits).
Losses: ``agentrl.algorithms.reward_model_loss`` (pairwise or log-exp, optional margin).

On-disk output (``RUN/final``), written by ``agentrl.training.reward_model.save_reward_model`` and loaded
directly as the reward model of the RL learner (``reward.model=RUN/final``): a Hugging Face
``AutoModelForSequenceClassification`` directory (``num_labels=1``, ``pad_token_id`` set) plus
``reward_stats.json`` ``{"mean", "std"}`` of the trained model's rewards over the training responses
(chosen and rejected), so the learner's rewards are about unit scale. The tokenizer is saved in
``RUN/final/tokenizer/``, not beside the weights: the learner then scores a trajectory's token ids
as they are (prompt ids + response ids, EOS included) — exactly the layout trained on here, with the
prompt encoded as the policy sees it (``data.chat_template`` = the RL run's ``rollout.chat_template``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from agentrl.algorithms import reward_model_loss
from agentrl.models import DTYPES, load_tokenizer, resolve_device
from agentrl.stages.config import RMConfig
from agentrl.stages.data import PairExample, encode_pair, pair_trajectories, stage_records
from agentrl.stages.runner import (
    model_path_of,
    run_dir_of,
    run_stage,
    seed_all,
    stage_envs,
)
from agentrl.training.experience import Experience
from agentrl.training.lora import apply_lora, merged_model


def load_score_model(path: str, tokenizer: Any, *, dtype: str = "float32", device: str = "auto",
                     trust_remote_code: bool = False) -> Any:
    """A causal LM (or a saved reward model) with a one-output score head."""
    from transformers import AutoModelForSequenceClassification
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model = AutoModelForSequenceClassification.from_pretrained(
        str(path), num_labels=1, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model.to(resolve_device(device))


def rewards_of(model: Any, trajectories: list[Any], pad_id: int) -> torch.Tensor:
    """Scalar rewards (N,) of token-exact trajectories (prompt + response), read at the last real token."""
    exp = Experience.from_trajectories(trajectories, pad_id)
    device = next(model.parameters()).device
    out = model(input_ids=exp.sequences.to(device), attention_mask=exp.attention_mask.to(device), use_cache=False)
    return out.logits[:, 0].float()


def pair_rewards(model: Any, pairs: Sequence[PairExample], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rewards of the chosen (n,) and rejected (n,) responses, in one forward pass."""
    r = rewards_of(model, pair_trajectories(list(pairs)), pad_id)
    return r[:len(pairs)], r[len(pairs):]


def rm_micro_loss(model: Any, pad_id: int, kind: str, margin: float | None):
    """The ``micro_loss`` of ``train_loop``: mean pair loss, scaled by the micro-batch's share."""

    def micro_loss(micro: Sequence[PairExample], batch: Sequence[PairExample]) -> tuple[torch.Tensor, dict]:
        c, r = pair_rewards(model, micro, pad_id)
        m = torch.tensor([p.margin if p.margin is not None else (margin or 0.0) for p in micro], device=c.device)
        share = len(micro) / len(batch)
        loss = reward_model_loss(c, r, kind=kind, margin=m) * share
        with torch.no_grad():
            return loss, {"loss": loss.item(), "accuracy": (c > r).float().mean().item() * share,
                          "chosen": c.mean().item() * share, "rejected": r.mean().item() * share}

    return micro_loss


@torch.no_grad()
def evaluate_pairs(model: Any, pairs: Sequence[PairExample], pad_id: int, kind: str = "pairwise",
                   micro_batch_size: int = 32) -> dict[str, float]:
    """Held-out ranking accuracy (chosen scored above rejected), mean margin and loss."""
    was_training = model.training
    model.eval()
    cs, rs = [], []
    for k in range(0, len(pairs), max(1, micro_batch_size)):
        c, r = pair_rewards(model, pairs[k:k + micro_batch_size], pad_id)
        cs.append(c)
        rs.append(r)
    model.train(was_training)
    c, r = torch.cat(cs), torch.cat(rs)
    return {"accuracy": (c > r).float().mean().item(), "margin": (c - r).mean().item(),
            "loss": reward_model_loss(c, r, kind=kind).item(), "chosen": c.mean().item(), "rejected": r.mean().item()}


@torch.no_grad()
def reward_stats(model: Any, pairs: Sequence[PairExample], pad_id: int, micro_batch_size: int = 32) -> dict:
    """Mean and standard deviation of the rewards of every chosen and rejected response."""
    was_training = model.training
    model.eval()
    scores = torch.cat([torch.cat(pair_rewards(model, pairs[k:k + micro_batch_size], pad_id))
                        for k in range(0, len(pairs), max(1, micro_batch_size))])
    model.train(was_training)
    return {"mean": scores.mean().item(), "std": scores.std().item() if len(scores) > 1 else 1.0,
            "count": len(scores)}


def save_rm_dir(model: Any, tokenizer: Any, stats: dict[str, float], out: Path) -> Path:
    """The reward-model directory (see the module docstring), written aside and then renamed."""
    import shutil

    from agentrl.training.reward_model import save_reward_model

    tmp = out.with_name(f".tmp_{out.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    save_reward_model(model, tmp, tokenizer=None, stats=stats)
    tokenizer.save_pretrained(str(tmp / "tokenizer"))
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def run_rm(cfg: RMConfig, run_dir: str | Path | None = None) -> dict[str, Any]:
    """Train a reward model; it goes to ``RUN/final``. Returns held-out metrics before and after."""

    seed_all(cfg.data.seed)
    out = run_dir_of(cfg, run_dir)
    env, dev_env = stage_envs(cfg)
    path = model_path_of(cfg, env)
    tok = load_tokenizer(path, cfg.model.trust_remote_code)
    model = load_score_model(path, tok, dtype=cfg.model.dtype, device=cfg.model.device,
                             trust_remote_code=cfg.model.trust_remote_code)
    model = apply_lora(model, cfg.lora, task="SEQ_CLS")  # the score head trains in full beside the adapters
    train_recs, eval_recs = stage_records(cfg, "pairs", env, dev_env, cfg.rm.wrong_answers)
    train = [p for p in (encode_pair(r, tok, cfg.data) for r in train_recs) if p is not None]
    held = [p for p in (encode_pair(r, tok, cfg.data) for r in eval_recs) if p is not None]
    pad, mb = tok.pad_token_id, cfg.optim.micro_batch_size

    def held_out() -> dict[str, float]:
        return {f"eval/{k}": v for k, v in evaluate_pairs(model, held, pad, cfg.rm.loss, mb).items()} if held else {}

    before, result, after = run_stage("rm", cfg, out, model, tok, train,
                                      rm_micro_loss(model, pad, cfg.rm.loss, cfg.rm.margin), held_out)
    stats = reward_stats(model, train, pad, mb)
    final = save_rm_dir(merged_model(model), tok, stats, out / "final") if cfg.checkpoint.save_final else None
    return {"steps": result.steps, "seconds": result.seconds, "train_pairs": len(train), "eval_pairs": len(held),
            "before": before, "after": after, "reward_stats": stats,
            "model_dir": str(final) if final else None, "run_dir": str(out)}
