"""Check 4, engine vs learner: the learner's log-probs of the tokens the engine sampled, against the engine's.

The learner scores the played episodes through the trainer's own path (``batched_logprobs`` with the
learner's micro-batches, shared prefixes and call cap, logits divided by ``rollout.temperature``, as
``PolicyLearner.logprobs`` and the reference do), and the check compares them with the log-probs the engine
reported (``Experience.engine_logprobs``) on the generated tokens (``action_mask``): mean and max
``|learner - engine|``, the same by position in the turn and by quarter of the context positions, and the
importance ratio ``exp(learner - engine)`` (mean, std, and the share outside ``[0.8, 1.25]``, the bounds
past which a TIS cap or a PPO clip of 0.2 starts to act).

Thresholds (mean ``|diff|`` over generated tokens):

- pass: at most :data:`PASS_MEAN` (2e-3; the same weights in float32 differ by 1e-6..1e-4 on a CPU, up
  to ~1e-3 with GPU kernels), or :data:`LOW_PRECISION_MEAN` (3e-2) when both sides run the same 16-bit
  dtype (bfloat16 kernels of two implementations legitimately differ by ~1e-2), and at most
  :data:`PASS_OUTSIDE` (1%) of the ratios outside ``[0.8, 1.25]``;
- fail: above :data:`FAIL_MEAN` (0.1: on average every token's probability off by ~10%, beyond any
  precision effect) or more than :data:`FAIL_OUTSIDE` (10%) of the ratios outside ``[0.8, 1.25]``;
- warn in between (e.g. a bfloat16 engine against a float32 learner, ~1e-2), and whenever the two dtypes
  differ: the trainer runs both in ``model.dtype``, so a difference is a finding even while these episodes
  show little of it (the gap grows with the logits of a sharper policy).

The likely cause when it is not a pass: the dtypes differ (named); the gap grows along the context (a KV
cache, rope or long-context fault in one of the two); it sits on the first tokens of each turn (the engine
and the learner do not see the same context there: a tokenizer or chat-template mismatch); otherwise,
uniform with the same dtypes, the weights differ (a missed weight sync, another checkpoint, LoRA adapters
not merged into the engine, or another sampling temperature).
"""

from __future__ import annotations

from typing import Any

import torch

from agentrl.doctor.report import Check
from agentrl.training.experience import Experience

PASS_MEAN = 2e-3
LOW_PRECISION_MEAN = 3e-2
FAIL_MEAN = 0.1
RATIO_LOW, RATIO_HIGH = 0.8, 1.25
PASS_OUTSIDE = 0.01
FAIL_OUTSIDE = 0.1
TURN_BINS = ((0, 1, "first"), (1, 16, "2-16"), (16, 128, "17-128"), (128, None, "129+"))
"""Bins of a token's position in its action segment (1-based in the names)."""
LOW_PRECISION = ("bfloat16", "float16")
TURN_START_FACTOR = 4.0  # first tokens of turns this many times worse than the rest: the turn starts
GROWTH_FACTOR = 3.0  # the last quarter of context positions this many times worse than the first: growth


def learner_logprobs(played: Any) -> tuple[Experience, torch.Tensor]:
    """The played episodes (failed ones left out) as the trainer's batch, and the learner's log-probs of it
    (B,A) float32 on the CPU. Raises ValueError when no episode is left."""
    from agentrl.training.learner import batched_logprobs, call_token_cap

    episodes = [t for t in played.episodes if not t.info.get("failed")]
    if not episodes:
        raise ValueError("no episode to score: every one failed or none was played")
    exp = Experience.from_trajectories(episodes, played.tokenizer.pad_token_id)
    model, cfg = played.model, played.cfg
    device = next(model.parameters()).device
    temperature = cfg.rollout.temperature if cfg.rollout.temperature > 0 else 1.0  # as PolicyLearner
    lp = batched_logprobs(model, exp.to(device), cfg.learner.micro_batch_size, temperature,
                          cfg.learner.shared_prefix, call_token_cap(model, cfg.learner.call_tokens))
    return exp, lp.float().cpu()


def played_dtypes(played: Any) -> tuple[str, str]:
    """(engine dtype, learner dtype) as names (``float32``, ``bfloat16``): an engine holding a torch model
    (hf, wrapped or not) by its parameters, others (vLLM) by ``model.dtype`` of the config."""
    engine = played.engine
    while getattr(engine, "engine", None) is not None and not hasattr(engine, "model"):
        engine = engine.engine  # a VersionedEngine or TimedEngine holds the engine
    inner = getattr(engine, "model", None)
    params = getattr(inner, "parameters", None)
    engine_dtype = _name(next(params()).dtype) if callable(params) else str(played.cfg.model.dtype)
    return engine_dtype, _name(next(played.model.parameters()).dtype)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def turn_positions(mask: torch.Tensor, turn_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Each action position's index in its action segment (B,A), 0 at a segment's first token; -1 off the
    mask. A segment is a run of masked positions (a new one also starts where ``turn_ids`` (B,A) changes)."""
    m = mask > 0
    prev = torch.zeros_like(m)
    prev[:, 1:] = m[:, :-1]
    if turn_ids is not None:
        prev[:, 1:] &= turn_ids[:, 1:] == turn_ids[:, :-1]
    starts = m & ~prev
    idx = torch.arange(m.shape[1]).expand_as(m)
    last_start = torch.where(starts, idx, torch.full_like(idx, -1)).cummax(dim=1).values
    return torch.where(m, idx - last_start, torch.full_like(idx, -1))


def mismatch_stats(learner: torch.Tensor, engine: torch.Tensor, mask: torch.Tensor,
                   attention_mask: torch.Tensor | None = None, turn_ids: torch.Tensor | None = None
                   ) -> dict[str, Any]:
    """Engine vs learner on the masked tokens of (B,A) log-probs: ``tokens``, ``mean_abs``, ``max_abs``,
    ``nonfinite`` (tokens where either is NaN or infinite, left out of the rest), the ratio
    ``exp(learner - engine)``'s ``ratio_mean``, ``ratio_std`` (population) and ``ratio_outside`` (share
    outside ``[RATIO_LOW, RATIO_HIGH]``); ``by_turn_position`` (:data:`TURN_BINS`: tokens, mean_abs) and
    ``by_context`` (the tokens in four equal parts by context position, the token's index among its row's
    real tokens from ``attention_mask`` (B,T): from, to, tokens, mean_abs). Means are None without tokens."""
    learner, engine = learner.detach().double().cpu(), engine.detach().double().cpu()
    m = mask.detach().cpu() > 0
    finite = torch.isfinite(learner) & torch.isfinite(engine)
    keep = m & finite
    diff = learner - engine
    d = diff[keep]
    out: dict[str, Any] = {"tokens": int(keep.sum()), "nonfinite": int((m & ~finite).sum())}
    if d.numel():
        ratio = d.exp()
        out.update(mean_abs=float(d.abs().mean()), max_abs=float(d.abs().max()), ratio_mean=float(ratio.mean()),
                   ratio_std=float(ratio.std(unbiased=False)),
                   ratio_outside=float(((ratio < RATIO_LOW) | (ratio > RATIO_HIGH)).double().mean()))
    else:
        out.update(mean_abs=None, max_abs=None, ratio_mean=None, ratio_std=None, ratio_outside=None)
    pos = turn_positions(keep, None if turn_ids is None else turn_ids.cpu())
    bins = {}
    for lo, hi, name in TURN_BINS:
        sel = keep & (pos >= lo) & (pos < (hi if hi is not None else keep.shape[1] + 1))
        if sel.any():
            bins[name] = {"tokens": int(sel.sum()), "mean_abs": float(diff[sel].abs().mean())}
    out["by_turn_position"] = bins
    out["by_context"] = _context_quarters(diff.abs(), keep, attention_mask)
    return out


def _context_quarters(abs_diff: torch.Tensor, keep: torch.Tensor, attention_mask: torch.Tensor | None
                      ) -> list[dict[str, Any]]:
    """The kept tokens sorted by context position (stable, row-major among equals) in four parts of equal
    count (the first ones one larger when it does not divide): from, to (positions), tokens, mean_abs."""
    B, A = keep.shape
    if attention_mask is None:
        ctx = torch.arange(1, A + 1).expand(B, A)
    else:
        ctx = attention_mask.detach().cpu().long().cumsum(-1)[:, 1:] - 1  # the predicted token's index
    positions, values = ctx[keep], abs_diff[keep]
    order = torch.sort(positions, stable=True).indices
    out = []
    for part in torch.tensor_split(order, 4):
        if part.numel():
            out.append({"from": int(positions[part[0]]), "to": int(positions[part[-1]]), "tokens": int(part.numel()),
                        "mean_abs": float(values[part].mean())})
    return out


def likely_cause(stats: dict[str, Any], engine_dtype: str, learner_dtype: str) -> str:
    """The most likely cause of a mismatch (see the module docstring), one line."""
    if engine_dtype != learner_dtype:
        text = f"dtypes differ: the engine runs {engine_dtype}, the learner {learner_dtype}"
        if (stats["mean_abs"] or 0.0) > FAIL_MEAN:
            text += "; a gap this large is more than precision: suspect the weights too"
        return text
    bins = stats["by_turn_position"]
    if "first" in bins and len(bins) > 1:
        rest = [b for name, b in bins.items() if name != "first"]
        rest_mean = sum(b["mean_abs"] * b["tokens"] for b in rest) / sum(b["tokens"] for b in rest)
        if bins["first"]["mean_abs"] > TURN_START_FACTOR * max(rest_mean, PASS_MEAN):
            return ("the gap sits on the first tokens of turns: the engine and the learner see different contexts "
                    "there (a tokenizer or chat-template mismatch where turns are stitched)")
    quarters = stats["by_context"]
    if len(quarters) >= 2 and quarters[-1]["mean_abs"] > GROWTH_FACTOR * max(quarters[0]["mean_abs"], PASS_MEAN):
        return (f"the gap grows along the context (positions {quarters[0]['from']}-{quarters[0]['to']}: "
                f"{quarters[0]['mean_abs']:.2g}, {quarters[-1]['from']}-{quarters[-1]['to']}: "
                f"{quarters[-1]['mean_abs']:.2g}): a KV cache, rope or long-context fault in the engine or learner")
    return ("uniform with the same dtype: the weights differ (a missed weight sync, another checkpoint, LoRA not "
            "merged into the engine) or the sampling temperature does")


def _status(stats: dict[str, Any], engine_dtype: str, learner_dtype: str) -> str:
    """pass, warn or fail by the thresholds of the module docstring."""
    if stats["nonfinite"]:
        return "fail"
    mean, outside = stats["mean_abs"], stats["ratio_outside"]
    same_low = engine_dtype == learner_dtype and engine_dtype in LOW_PRECISION
    tolerance = LOW_PRECISION_MEAN if same_low else PASS_MEAN
    if mean > FAIL_MEAN or outside > FAIL_OUTSIDE:
        return "fail"
    if engine_dtype != learner_dtype:  # small on these episodes, but a gap that grows as the policy sharpens
        return "warn"
    return "pass" if mean <= tolerance and outside <= PASS_OUTSIDE else "warn"


def check_logprobs(exp: Experience, learner: torch.Tensor, *, engine_dtype: str, learner_dtype: str) -> Check:
    """Check 4 (``logprobs``): ``exp.engine_logprobs`` (B,A) against the learner's ``learner`` (B,A) on
    ``exp.action_mask``; ``engine_dtype``/``learner_dtype`` name the two sides' dtypes (``float32``, ...).
    Details: the figures of :func:`mismatch_stats`, the dtypes and the thresholds."""
    if exp.engine_logprobs is None:
        return Check("logprobs", "skip", "the batch has no engine log-probs")
    stats = mismatch_stats(learner, exp.engine_logprobs, exp.action_mask, exp.attention_mask, exp.turn_ids)
    details = {**stats, "engine_dtype": engine_dtype, "learner_dtype": learner_dtype,
               "thresholds": {"pass_mean": PASS_MEAN, "low_precision_mean": LOW_PRECISION_MEAN,
                              "fail_mean": FAIL_MEAN, "ratio_bounds": [RATIO_LOW, RATIO_HIGH],
                              "pass_outside": PASS_OUTSIDE, "fail_outside": FAIL_OUTSIDE}}
    if stats["tokens"] == 0 and not stats["nonfinite"]:
        return Check("logprobs", "skip", "no generated tokens to compare", details=details)
    status = _status(stats, engine_dtype, learner_dtype)
    summary = _summary(stats, engine_dtype, learner_dtype)
    if status == "pass":
        return Check("logprobs", "pass", summary, details=details)
    if stats["nonfinite"]:
        cause = (f"log-probs that are NaN or infinite on {stats['nonfinite']} tokens (an overflow in 16-bit, or a "
                 f"token the engine could not have sampled)")
    else:
        cause = likely_cause(stats, engine_dtype, learner_dtype)
    return Check("logprobs", status, f"{summary}; likely cause: {cause}", advice=_advice(cause), details=details)


def _summary(stats: dict[str, Any], engine_dtype: str, learner_dtype: str) -> str:
    if not stats["tokens"]:
        return f"every one of {stats['nonfinite']} generated tokens has a non-finite log-prob"
    dtypes = engine_dtype if engine_dtype == learner_dtype else f"engine {engine_dtype}, learner {learner_dtype}"
    return (f"mean |learner - engine| {stats['mean_abs']:.2e}, max {stats['max_abs']:.2e} over {stats['tokens']:,} "
            f"tokens ({dtypes}); ratio mean {stats['ratio_mean']:.3f}, std {stats['ratio_std']:.3f}, "
            f"{100 * stats['ratio_outside']:.1f}% outside [{RATIO_LOW}, {RATIO_HIGH}]")


def _advice(cause: str) -> str:
    if cause.startswith("dtypes differ"):
        return ("run the engine and the learner in the same dtype (model.dtype), or correct for the gap "
                "(algo.tis_cap)")
    if "first tokens of turns" in cause:
        return "render turns with one tokenizer and chat template on both sides (rollout.chat_template)"
    if "grows along" in cause:
        return "compare both sides on one long sequence; check the model's max_position_embeddings and rope scaling"
    if "NaN" in cause:
        return "score in float32, or find the token the engine reports as impossible"
    return ("sync the policy's weights to the engine after loading (merged LoRA weights), load both from one "
            "checkpoint, and score at rollout.temperature")
