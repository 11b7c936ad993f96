"""The policy learner: log-probs with the generation's masking, and the clipped policy update.

``sequence_logprobs`` is the one place where the model scores sequences; SFT, the reference model
and the policy update all go through it. Micro-batches accumulate gradients into one optimizer
step, with the loss normalised by the counts of the whole mini-batch, so the update does not depend
on the micro-batch size.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch

from agentrl.algorithms import (
    agg_loss,
    cispo_loss,
    correction_weights,
    kl_penalty,
    masked_mean,
    mismatch_metrics,
    policy_loss,
    sapo_loss,
)
from agentrl.config import AlgoConfig, LearnerConfig
from agentrl.training.buckets import cache_sized_tokens, fit_calls, length_buckets
from agentrl.training.experience import Experience
from agentrl.training.packing import (
    CHUNK_TOKENS,
    decode,
    lm_head,
    prompt_lengths,
    shared_prefix_logprobs,
    states_logprobs,
    token_balanced_micro_batches,
)


def sequence_logprobs(model: Any, sequences: torch.Tensor, attention_mask: torch.Tensor, *,
                      temperature: float = 1.0, with_entropy: bool = False, entropy_grad: bool = False,
                      prompt_lens: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                      chunk_tokens: int = CHUNK_TOKENS) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of each next token: sequences, attention_mask (B,T) -> logprobs (B,A), entropy (B,A).

    Logits are divided by the sampling temperature, as the engine's were. The entropy carries a
    gradient only with ``entropy_grad`` (an entropy bonus); otherwise it is a detached metric.
    With ``prompt_lens`` (B,) of right-padded rows, rows that share a prompt run it once
    (``agentrl.training.packing.shared_prefix_logprobs``: same values and gradients, less compute).
    The LM head runs ``chunk_tokens`` positions at a time (``agentrl.training.packing.states_logprobs``;
    0: full logits). ``attention_mask`` may be a 4D mask with ``position_ids`` (packed SFT rows).
    """
    kw = dict(temperature=temperature, with_entropy=with_entropy, entropy_grad=entropy_grad,
              chunk_tokens=chunk_tokens)
    if prompt_lens is not None:
        shared = shared_prefix_logprobs(model, sequences, attention_mask, prompt_lens, **kw)
        if shared is not None:
            return shared
    head = lm_head(model, chunk_tokens)
    _, states = decode(model, head, input_ids=sequences, attention_mask=attention_mask, position_ids=position_ids,
                       use_cache=False)
    return states_logprobs(states[:, :-1], sequences[:, 1:], head, **kw)


def shared_prompts(exp: Experience, enabled: bool = True) -> torch.Tensor | None:
    """``prompt_lens`` for ``sequence_logprobs`` when prompts may be shared (None: plain forward)."""
    return prompt_lengths(exp.action_mask, exp.attention_mask) if enabled else None


BUCKET_OVERHEAD_TOKENS = 64
"""A length bucket is split off when it saves more tokens than this (-1: never split): a forward/backward
call's fixed cost, ~30 tokens of the tiny model's compute, under 2 of SmolLM2's."""


def call_rows(exp: Experience, overhead_tokens: int = BUCKET_OVERHEAD_TOKENS, call_tokens: int = 0,
              shared_prefix: bool = True) -> list[list[int]]:
    """Row indices of each forward call over ``exp``: its length buckets (``length_buckets``; one call when
    ``overhead_tokens < 0``), each cut to at most ``call_tokens`` padded tokens (``fit_calls``; 0: no cut).
    With ``shared_prefix`` a bucket pays each distinct prompt once."""
    if overhead_tokens < 0:
        return [list(range(len(exp)))]
    lengths = exp.attention_mask.sum(-1).tolist()
    prompts = None
    if shared_prefix:  # rows sharing a prompt run it once per call
        lens = prompt_lengths(exp.action_mask, exp.attention_mask).tolist()
        prompts = list(zip(exp.group_ids.tolist(), lens))
    return fit_calls(lengths, length_buckets(lengths, overhead_tokens, prompts=prompts), call_tokens, prompts)


def split_calls(exp: Experience, micro_batch_size: int, call_tokens: int = 0, shared_prefix: bool = True
                ) -> list[tuple[torch.Tensor, Experience]]:
    """(row indices into ``exp``, those rows) for each forward call: ``exp.split(micro_batch_size)``, each
    micro-batch as its length buckets cut to ``call_tokens`` (``call_rows``)."""
    out, start = [], 0
    for micro in exp.split(micro_batch_size):
        for rows in call_rows(micro, call_tokens=call_tokens, shared_prefix=shared_prefix):
            index = torch.tensor(rows, dtype=torch.long, device=exp.action_mask.device)
            out.append((start + index, micro.select(index)))
        start += len(micro)
    return out


@torch.no_grad()
def batched_logprobs(model: Any, exp: Experience, micro_batch_size: int, temperature: float = 1.0,
                     shared_prefix: bool = True, call_tokens: int = 0) -> torch.Tensor:
    """``sequence_logprobs`` over an Experience without gradients: (B,A), one call per ``split_calls``."""
    was_training = model.training
    model.eval()
    out = torch.zeros_like(exp.action_mask)
    for index, part in split_calls(exp, micro_batch_size, call_tokens, shared_prefix):
        part = part.trim()
        lp, _ = sequence_logprobs(model, part.sequences, part.attention_mask, temperature=temperature,
                                  prompt_lens=shared_prompts(part, shared_prefix))
        out[index, :lp.shape[1]] = lp
    model.train(was_training)
    return out


class FrozenModel:
    """A model that only scores (the reference policy): ``logprobs(exp) -> (B,A)``.

    With ``disable_adapters`` the model is the LoRA policy itself, scored with its adapters off (its
    base weights: no second copy); it is left trainable. Otherwise the model is frozen.
    """

    def __init__(self, model: Any, micro_batch_size: int, temperature: float = 1.0, shared_prefix: bool = True,
                 disable_adapters: bool = False, call_tokens: int = -1) -> None:
        self.model = model
        self.call_tokens = call_token_cap(model, call_tokens)
        self.disable_adapters = disable_adapters
        if not disable_adapters:
            model.eval()
            for p in model.parameters():
                p.requires_grad_(False)
        self.micro_batch_size = micro_batch_size
        self.temperature = temperature if temperature > 0 else 1.0
        self.shared_prefix = shared_prefix

    def logprobs(self, exp: Experience) -> torch.Tensor:
        from agentrl.training.lora import adapters_disabled

        with adapters_disabled(self.model) if self.disable_adapters else contextlib.nullcontext():
            return batched_logprobs(self.model, exp, self.micro_batch_size, self.temperature, self.shared_prefix,
                                    self.call_tokens)


def micro_policy_loss(lp: torch.Tensor, ent: torch.Tensor, micro: Experience, algo: AlgoConfig,
                      kl_coef: float, norm: dict[str, Any]) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of one micro-batch (policy + KL term + entropy bonus) and its metrics.

    ``lp``, ``ent`` (B,A) from ``sequence_logprobs``; ``norm`` holds the mini-batch's global counts.
    Metrics are this micro-batch's masked means (``policy_loss`` is already globally normalised).
    With ``algo.tis_cap`` / ``algo.mis_high`` the token losses are weighted by the off-policy
    correction between the engine's log-probs and the old (or, on-policy, current) log-probs.
    """
    mask = micro.action_mask
    norm = dict(norm)
    episode_tokens = norm.pop("episode_tokens", None)
    if episode_tokens is not None:  # episodes of several rows: each row averages over its episode's tokens
        norm["seq_tokens"] = episode_tokens.to(mask.device)[micro.episode_ids.to(mask.device)]
    old = micro.old_logprobs if micro.old_logprobs is not None else lp.detach()
    weights, stats = None, {}
    if micro.engine_logprobs is not None:
        w = correction_weights(old, micro.engine_logprobs, mask, tis_cap=algo.tis_cap,
                               mis_low=algo.mis_low, mis_high=algo.mis_high)
        weights = w if algo.tis_cap > 0 or algo.mis_high > 0 else None
        stats.update(mismatch_metrics(old, micro.engine_logprobs, mask, w))  # *_max: max over micro-batches
    if algo.policy_loss == "cispo":
        loss, m = cispo_loss(lp, old, micro.advantages, mask, clip_low=algo.clip_low, clip_high=algo.clip_high,
                             agg=algo.loss_agg, weights=weights, **norm)
    elif algo.policy_loss == "sapo":
        loss, m = sapo_loss(lp, old, micro.advantages, mask, tau_pos=algo.sapo_tau_pos, tau_neg=algo.sapo_tau_neg,
                            agg=algo.loss_agg, weights=weights, **norm)
    else:
        loss, m = policy_loss(lp, old, micro.advantages, mask, clip_low=algo.clip_low, clip_high=algo.clip_high,
                              dual_clip=algo.dual_clip, ratio_type=algo.ratio_type, agg=algo.loss_agg,
                              weights=weights, **norm)
    stats = {"policy_loss": loss.item(), "clipfrac": m["clipfrac"].item(), "ratio": m["ratio"].item(),
             "entropy": masked_mean(ent.detach(), mask).item(), "kl": 0.0, **stats}
    if algo.kl_mode == "loss" and micro.ref_logprobs is not None:
        kl = kl_penalty(lp, micro.ref_logprobs, algo.kl_estimator)
        loss = loss + kl_coef * agg_loss(kl, mask, algo.loss_agg, **norm)
        stats["kl"] = masked_mean(kl.detach(), mask).item()
    if algo.entropy_coef:
        loss = loss - algo.entropy_coef * agg_loss(ent, mask, algo.loss_agg, **norm)
    return loss, stats


def trained_rows(exp: Experience, algo: AlgoConfig, kl_coef: float) -> torch.Tensor | None:
    """Indices of the samples of ``exp`` whose loss can have a gradient, or None when that is all of them
    or none (then all are run, as before). A sample whose every action token's advantage is 0 adds exactly 0
    to every policy loss (each is the advantage times a function of the ratio), so it is skipped, unless a
    term without the advantage applies to it: the entropy bonus, or a KL loss (``kl_mode: loss`` with a
    coefficient and reference log-probs). Such samples are the below-baseline ones under
    ``algo.neg_adv_weight: 0`` and the groups whose rewards all agree (without ``drop_zero_std_groups``)."""
    if exp.advantages is None or algo.entropy_coef or (
            algo.kl_mode == "loss" and kl_coef and exp.ref_logprobs is not None):
        return None
    live = ((exp.advantages != 0) & exp.action_mask.bool()).any(-1)
    n = int(live.sum())
    return None if n in (0, len(exp)) else live.nonzero().squeeze(-1)


def loss_norm(mini: Experience, max_len: int | None) -> dict[str, Any]:
    """The mini-batch's global normalisers for ``micro_policy_loss``: action tokens, sequences, ``max_len``.
    When an episode is several rows (its context was rebuilt) the sequences are its episodes and
    ``episode_tokens`` (indexed by ``episode_ids``) holds each episode's action tokens in the mini-batch, so
    the seq-mean aggregations weigh an episode once, however many rows it has."""
    norm: dict[str, Any] = dict(num_tokens=mini.action_mask.sum().item(), num_seqs=len(mini), max_len=max_len)
    if mini.several_samples_per_episode:
        ids = mini.episode_ids
        norm["num_seqs"] = len(torch.unique(ids))
        norm["episode_tokens"] = torch.zeros(int(ids.max()) + 1).index_add_(0, ids.cpu(),
                                                                          mini.action_mask.sum(-1).float().cpu())
    return norm


def make_optimizer(params: Any, lr: float, weight_decay: float, warmup_steps: int
                   ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with a linear warm-up, constant afterwards."""
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup_steps) if warmup_steps > 0 else 1.0)
    return opt, sched


def call_token_cap(model: Any, call_tokens: int = -1) -> int:
    """``learner.call_tokens`` resolved for ``model``: -1 (auto) is ``cache_sized_tokens`` of its MLP width
    and dtype on CPU and 0 (no cap) on GPU or when the config names no width; 0 and positive values stay."""
    if call_tokens < -1:
        raise ValueError(f"learner.call_tokens must be -1 (auto), 0 (no cap) or a token count, got {call_tokens}")
    if call_tokens >= 0:
        return call_tokens
    param = next(model.parameters(), None)
    config = getattr(model, "config", None)
    width = getattr(config, "intermediate_size", None) or 4 * (getattr(config, "hidden_size", 0) or 0)
    if param is None or param.device.type != "cpu" or not isinstance(width, int) or width <= 0:
        return 0
    return cache_sized_tokens(width, param.element_size())


class PolicyLearner:
    """Holds the policy, its optimizer and scheduler; ``train_step`` runs PPO-style epochs."""

    bucket_overhead_tokens = BUCKET_OVERHEAD_TOKENS

    def __init__(self, model: Any, learner: LearnerConfig, algo: AlgoConfig, *, temperature: float = 1.0,
                 max_new_tokens: int | None = None) -> None:
        self.model, self.cfg, self.algo = model, learner, algo
        self.temperature = temperature if temperature > 0 else 1.0
        self.max_len = max_new_tokens
        if learner.gradient_checkpointing:
            from agentrl.training.activation_checkpointing import enable_activation_checkpointing

            enable_activation_checkpointing(model)
        self.optimizer, self.scheduler = make_optimizer(
            [p for p in model.parameters() if p.requires_grad], learner.lr, learner.weight_decay,
            learner.warmup_steps)
        self.call_tokens = call_token_cap(model, learner.call_tokens)

    def logprobs(self, exp: Experience) -> torch.Tensor:
        """Current policy log-probs of ``exp`` without gradients (B,A)."""
        return batched_logprobs(self.model, exp, self.cfg.micro_batch_size, self.temperature, self.cfg.shared_prefix,
                                self.call_tokens)

    def needs_old_logprobs(self, batch_size: int) -> bool:
        """Old log-probs must be computed only when a batch gets more than one optimizer step;
        otherwise the policy has not moved and the current log-probs (detached) are exact."""
        mini = self.cfg.mini_batch_size
        return self.cfg.ppo_epochs > 1 or 0 < mini < batch_size

    def train_step(self, exp: Experience, kl_coef: float = 0.0) -> dict[str, float]:
        """Update the policy on ``exp`` (advantages set). Returns metrics over its optimizer steps: the
        mean of each, the max of ``*_max`` ones."""
        self.model.train()
        sums: dict[str, float] = {}
        steps = 0
        for _ in range(self.cfg.ppo_epochs):
            for mini in exp.split(self.cfg.mini_batch_size):
                for k, v in self._optimizer_step(mini, kl_coef).items():
                    sums[k] = max(sums.get(k, v), v) if k.endswith("_max") else sums.get(k, 0.0) + v
                steps += 1
        return {k: v if k.endswith("_max") else v / max(steps, 1) for k, v in sums.items()}

    def _optimizer_step(self, mini: Experience, kl_coef: float) -> dict[str, float]:
        """One optimizer step on ``mini``. Samples whose loss is exactly zero (``trained_rows``) are not run:
        the normalisers stay the whole mini-batch's, so the gradient is the same; the metrics (entropy,
        ratio, clip fraction, mismatch) are then over the samples run."""
        algo = self.algo
        norm = loss_norm(mini, self.max_len)
        rows = trained_rows(mini, algo, kl_coef)
        run = mini if rows is None else mini.select(rows)
        num_tokens = run.action_mask.sum().item()
        self.optimizer.zero_grad(set_to_none=True)
        acc = {"policy_loss": 0.0, "clipfrac": 0.0, "ratio": 0.0, "entropy": 0.0, "kl": 0.0}
        for micro in self.micro_batches(run):
            micro = micro.trim()
            lp, ent = sequence_logprobs(self.model, micro.sequences, micro.attention_mask,
                                        temperature=self.temperature, with_entropy=True,
                                        entropy_grad=bool(algo.entropy_coef),
                                        prompt_lens=shared_prompts(micro, self.cfg.shared_prefix))
            loss, stats = micro_policy_loss(lp, ent, micro, algo, kl_coef, norm)
            share = micro.action_mask.sum().item() / max(num_tokens, 1)
            acc["policy_loss"] += stats.pop("policy_loss")
            for k, v in stats.items():
                acc[k] = max(acc.get(k, v), v) if k.endswith("_max") else acc.get(k, 0.0) + v * share
            loss.backward()
        grad_norm = self._clip_and_step()
        acc.update(grad_norm=grad_norm, lr=self.scheduler.get_last_lr()[0])
        return acc

    def micro_batches(self, mini: Experience) -> list[Experience]:
        """``micro_batch_size`` consecutive samples, or with ``micro_batch_tokens`` groups partitioned into
        micro-batches of about that many tokens (Karmarkar–Karp); each then cut into length buckets
        (``agentrl.training.buckets``) so padding is not trained on, and a bucket over ``call_tokens`` into
        cache-sized pieces (``fit_calls``). The gradient is the same either way."""
        if self.cfg.micro_batch_tokens <= 0:
            micros = mini.split(self.cfg.micro_batch_size)
        else:
            parts = token_balanced_micro_batches(mini.attention_mask.sum(-1).tolist(), mini.group_ids.tolist(),
                                                 self.cfg.micro_batch_tokens)
            micros = [mini.select(torch.tensor(p)) for p in parts]
        out = []
        for micro in micros:
            calls = call_rows(micro, self.bucket_overhead_tokens, self.call_tokens, self.cfg.shared_prefix)
            out += [micro] if len(calls) == 1 else [micro.select(torch.tensor(c)) for c in calls]
        return out

    def _clip_and_step(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        clip = self.cfg.grad_clip if self.cfg.grad_clip > 0 else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, clip)) if params else 0.0
        self.optimizer.step()
        self.scheduler.step()
        return grad_norm
