"""Direct preference optimisation: ``agentrl dpo CONFIG`` on chosen/rejected pairs.

The loss is ``agentrl.algorithms.dpo_loss`` (beta, label smoothing, IPO) on summed response
log-probs (averaged per token for IPO) through ``agentrl.training.learner.sequence_logprobs``, against a
frozen reference: ``dpo.reference`` or a copy of the initial policy. The reference's log-probs are
computed once for every pair before training, and the reference is then released.

Metrics: the implicit rewards ``beta * (log pi - log ref)`` of chosen and rejected responses,
their margin and accuracy, and the policy's own log-prob margin ``log pi(c) - log pi(r)``.
The final policy goes to ``RUN/final`` (a Hugging Face causal-LM directory).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from agentrl.algorithms import dpo_loss
from agentrl.stages.config import DPOConfig
from agentrl.stages.data import PairExample, encode_pair, pair_trajectories, stage_records
from agentrl.stages.runner import (
    model_path_of,
    run_dir_of,
    run_stage,
    save_hf,
    seed_all,
    stage_envs,
)
from agentrl.training.experience import Experience
from agentrl.training.learner import sequence_logprobs
from agentrl.training.lora import apply_lora, merged_model


@dataclass
class ScoredPair:
    """A pair with its reference log-probs (summed, or token-averaged for IPO)."""

    pair: PairExample
    ref_chosen: float
    ref_rejected: float


def pair_logprobs(model: Any, pairs: Sequence[PairExample], pad_id: int, average: bool = False
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Response log-probs of the chosen (n,) and rejected (n,) responses (sum, or per-token mean)
    and the chosen responses' token counts (n,), in one forward pass."""
    exp = Experience.from_trajectories(pair_trajectories(list(pairs)), pad_id)
    device = next(model.parameters()).device
    lp, _ = sequence_logprobs(model, exp.sequences.to(device), exp.attention_mask.to(device))
    mask = exp.action_mask.to(device)
    tokens = mask.sum(-1)
    seq = (lp * mask).sum(-1)
    if average:
        seq = seq / tokens.clamp(min=1.0)
    n = len(pairs)
    return seq[:n], seq[n:], tokens[:n]


@torch.no_grad()
def score_reference(model: Any, pairs: Sequence[PairExample], pad_id: int, average: bool,
                    micro_batch_size: int) -> list[ScoredPair]:
    """Reference log-probs of every pair (no gradients)."""
    was_training = model.training
    model.eval()
    out = []
    for k in range(0, len(pairs), max(1, micro_batch_size)):
        part = pairs[k:k + micro_batch_size]
        c, r, _ = pair_logprobs(model, part, pad_id, average)
        out += [ScoredPair(p, float(a), float(b)) for p, a, b in zip(part, c.tolist(), r.tolist())]
    model.train(was_training)
    return out


def dpo_micro_loss(model: Any, pad_id: int, cfg: DPOConfig):
    """The ``micro_loss`` of ``train_loop``: mean DPO loss scaled by the micro-batch's share."""
    d = cfg.dpo

    def micro_loss(micro: Sequence[ScoredPair], batch: Sequence[ScoredPair]) -> tuple[torch.Tensor, dict]:
        pc, pr, n_tok = pair_logprobs(model, [s.pair for s in micro], pad_id, d.ipo)
        rc = torch.tensor([s.ref_chosen for s in micro], device=pc.device)
        rr = torch.tensor([s.ref_rejected for s in micro], device=pc.device)
        loss, m = dpo_loss(pc, pr, rc, rr, beta=d.beta, label_smoothing=d.label_smoothing, ipo=d.ipo)
        if d.sft_weight:
            nll = -(pc if d.ipo else pc / n_tok.clamp(min=1.0)).mean()
            loss = loss + d.sft_weight * nll
        share = len(micro) / len(batch)
        metrics = {"loss": loss.item() * share, **{k: v.item() * share for k, v in m.items()},
                   "logp_margin": (pc - pr).mean().item() * share}
        return loss * share, metrics

    return micro_loss


@torch.no_grad()
def evaluate_dpo(model: Any, scored: Sequence[ScoredPair], pad_id: int, cfg: DPOConfig) -> dict[str, float]:
    """Held-out DPO metrics: loss, implicit reward margin and accuracy, policy log-prob margin."""
    if not scored:
        return {}
    now = score_reference(model, [s.pair for s in scored], pad_id, cfg.dpo.ipo, cfg.optim.micro_batch_size)
    pc = torch.tensor([s.ref_chosen for s in now])
    pr = torch.tensor([s.ref_rejected for s in now])
    rc = torch.tensor([s.ref_chosen for s in scored])
    rr = torch.tensor([s.ref_rejected for s in scored])
    d = cfg.dpo
    loss, m = dpo_loss(pc, pr, rc, rr, beta=d.beta, label_smoothing=d.label_smoothing, ipo=d.ipo)
    return {"loss": loss.item(), **{k: v.item() for k, v in m.items()},
            "logratio_chosen": (pc - rc).mean().item(), "logratio_rejected": (pr - rr).mean().item(),
            "logp_margin": (pc - pr).mean().item(), "logp_accuracy": (pc > pr).float().mean().item()}


def run_dpo(cfg: DPOConfig, run_dir: str | Path | None = None) -> dict[str, Any]:
    """Train the policy with DPO/IPO; it goes to ``RUN/final``. Returns held-out metrics before/after."""
    from agentrl.config import RunConfig
    from agentrl.models import load_policy

    seed_all(cfg.data.seed)
    out = run_dir_of(cfg, run_dir)
    env, dev_env = stage_envs(cfg)
    path = model_path_of(cfg, env)
    model, tok = load_policy(RunConfig(model=cfg.model), path)
    model = apply_lora(model, cfg.lora)  # the reference scores below come before any update: the base
    train_recs, eval_recs = stage_records(cfg, "pairs", env, dev_env, cfg.dpo.wrong_answers)
    train = [p for p in (encode_pair(r, tok, cfg.data) for r in train_recs) if p is not None]
    held = [p for p in (encode_pair(r, tok, cfg.data) for r in eval_recs) if p is not None]
    pad, mb = tok.pad_token_id, cfg.optim.micro_batch_size
    ref = load_policy(RunConfig(model=cfg.model), cfg.dpo.reference)[0] if cfg.dpo.reference else model
    train_s = score_reference(ref, train, pad, cfg.dpo.ipo, mb)
    held_s = score_reference(ref, held, pad, cfg.dpo.ipo, mb)
    del ref

    def held_out() -> dict[str, float]:
        return {f"eval/{k}": v for k, v in evaluate_dpo(model, held_s, pad, cfg).items()}

    before, result, after = run_stage("dpo", cfg, out, model, tok, train_s,
                                      dpo_micro_loss(model, pad, cfg), held_out)
    final = save_hf(merged_model(model), tok, out / "final") if cfg.checkpoint.save_final else None
    return {"steps": result.steps, "seconds": result.seconds, "train_pairs": len(train), "eval_pairs": len(held),
            "before": before, "after": after, "model_dir": str(final) if final else None, "run_dir": str(out)}
