"""Supervised training: the optimizer loop the SFT, reward-model and DPO stages share, and SFT itself
(the ``agentrl sft`` stage and the warm start of RL runs use the same code).

``train_loop`` runs epochs of shuffled examples, micro-batches accumulated into one step per batch.
Each caller supplies ``micro_loss(micro, batch)``: the loss of the examples ``micro`` already scaled
by its share of ``batch`` (so the step does not depend on the micro-batch size) and metric sums.

SFT examples are token-exact :class:`~agentrl.types.Trajectory` records whose action segments carry
the loss (the response, or every assistant turn of a chat); the loss is
``agentrl.algorithms.sft_loss`` normalised by the response tokens of the whole batch. Packing puts
several examples in one row with a block-diagonal causal attention mask (a 4D mask) and position
ids restarting at 0 per example: exactly the log-probs of the unpacked examples (tested), for
models that accept 4D masks (Llama, Qwen2, Mistral, GPT-2 ...). ``train_sft`` (the warm start) keeps
the weights of the best dev accuracy (never the test split).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from agentrl.algorithms import sft_loss
from agentrl.config import OptimConfig
from agentrl.training.experience import Experience
from agentrl.training.learner import make_optimizer, sequence_logprobs
from agentrl.training.packing import SHARED_PREFIX_MIN, common_prefix
from agentrl.types import Segment, Trajectory

MicroLoss = Callable[[Sequence[Any], Sequence[Any]], tuple[torch.Tensor, dict[str, float]]]


@dataclass
class LoopResult:
    """What an optimizer loop did."""

    steps: int
    seconds: float
    last: dict[str, float] = field(default_factory=dict)  # the last logged training metrics


def batches(n: int, batch_size: int, rng: np.random.Generator):
    """Endless batches of indices: shuffled epochs over ``range(n)``; the last short batch of an epoch
    is joined with the start of the next, so every batch has ``min(batch_size, n)`` examples."""
    order: list[int] = []
    size = min(batch_size, n)
    while True:
        while len(order) < size:
            order += rng.permutation(n).tolist()
        yield order[:size]
        order = order[size:]


def train_loop(model: Any, items: Sequence[Any], optim: OptimConfig, micro_loss: MicroLoss, *,
               on_eval: Callable[[int], Any] | None = None,
               on_log: Callable[[int, dict[str, float]], None] | None = None,
               on_save: Callable[[int, dict[str, Any]], None] | None = None, save_every: int = 0,
               seed: int = 0) -> LoopResult:
    """``optim.max_steps`` optimizer steps over ``items``; ``on_eval(step)`` every ``optim.eval_every``
    steps (the last included) stops the loop by returning ``True``; ``on_save(step, state)`` every ``save_every`` steps gets the optimizer
    and scheduler states. Metrics of each step: the micro-batches' sums, grad norm, lr."""
    if not items:
        raise ValueError("no training examples (all empty or truncated away?)")
    params = [p for p in model.parameters() if p.requires_grad]
    opt, sched = make_optimizer(params, optim.lr, optim.weight_decay, optim.warmup_steps)
    clip = optim.grad_clip if optim.grad_clip > 0 else math.inf
    rng, start, step, metrics = np.random.default_rng(seed), time.perf_counter(), 0, {}
    model.train()
    for step, idx in enumerate(batches(len(items), optim.batch_size, rng), start=1):
        batch = [items[i] for i in idx]
        opt.zero_grad(set_to_none=True)
        metrics = {}
        for k in range(0, len(batch), max(1, optim.micro_batch_size)):
            loss, m = micro_loss(batch[k:k + optim.micro_batch_size], batch)
            loss.backward()
            for key, v in m.items():
                metrics[key] = metrics.get(key, 0.0) + v
        metrics["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, clip))
        metrics["lr"] = sched.get_last_lr()[0]
        opt.step()
        sched.step()
        if on_log is not None and (step % max(1, optim.log_every) == 0 or step == optim.max_steps):
            on_log(step, metrics)
        if on_save is not None and save_every and step % save_every == 0:
            on_save(step, {"optimizer": opt.state_dict(), "scheduler": sched.state_dict()})
        if on_eval is not None and optim.eval_every and step % optim.eval_every == 0:
            if on_eval(step) is True:
                break
            model.train()
        out_of_time = bool(optim.max_seconds) and time.perf_counter() - start > optim.max_seconds
        if step >= optim.max_steps or out_of_time:
            break
    return LoopResult(step, time.perf_counter() - start, metrics)


@dataclass
class SFTResult:
    """What a supervised run did."""

    steps: int
    best_dev_accuracy: float
    final_loss: float
    seconds: float
    history: list[tuple[int, float, float]]  # (step, train loss, dev accuracy)
    out_of_time: bool = False  # stopped by its max_seconds before max_steps or its dev accuracy stopped it
    curve: list[tuple[int, float, float]] = field(default_factory=list)  # (step, train loss, seconds): LossCurve


@dataclass
class LossCurve:
    """The training loss of a supervised run, bounded in size: every ``stride``-th step's (step, loss,
    seconds since the start); when more than ``max_points`` are kept the stride doubles and the kept points
    are thinned alike, so a run of any length keeps between ``max_points / 2`` and ``max_points`` (and its
    last step, see :meth:`points`)."""

    max_points: int = 1000
    stride: int = 1
    kept: list[tuple[int, float, float]] = field(default_factory=list)
    last: tuple[int, float, float] | None = None

    def add(self, step: int, loss: float, seconds: float) -> None:
        """Step ``step``'s loss, ``seconds`` into the run (kept when the step is on the stride)."""
        self.last = (step, loss, seconds)
        if step % self.stride:
            return
        self.kept.append(self.last)
        if len(self.kept) > self.max_points:
            self.stride *= 2
            self.kept = [p for p in self.kept if p[0] % self.stride == 0]

    def points(self) -> list[tuple[int, float, float]]:
        """The kept points, then the last step's when it was not kept."""
        missing = self.last is not None and (not self.kept or self.kept[-1][0] != self.last[0])
        return self.kept + [self.last] if missing else list(self.kept)


@dataclass
class SFTBatch:
    """Model inputs of a micro-batch. R rows of T tokens, A = T-1."""

    sequences: torch.Tensor               # (R,T) long
    attention_mask: torch.Tensor          # (R,T) long, or (R,1,T,T) float additive when packed
    action_mask: torch.Tensor             # (R,A) float: 1 where token t+1 carries the loss
    position_ids: torch.Tensor | None = None  # (R,T) long, restarting per packed example


def pairs_to_experience(pairs: list[tuple[list[int], list[int]]], pad_id: int) -> Experience:
    """(prompt ids, response ids) pairs laid out like RL samples: loss mask on the response."""
    return Experience.from_trajectories(_as_trajectories(pairs), pad_id)


def _as_trajectories(examples: Sequence[Any]) -> list[Trajectory]:
    """Examples as one-context trajectories: a pair becomes one, an episode whose context was rebuilt
    (``Trajectory.resets``) one per context."""
    out = []
    for i, e in enumerate(examples):
        if not isinstance(e, Trajectory):
            out.append(Trajectory(prompt_ids=list(e[0]), segments=[Segment(list(e[1]), True)], reward=0.0,
                                  task_id="", group_id=i))
        elif not e.resets:
            out.append(e)
        else:
            out += [Trajectory(prompt_ids=list(p), segments=list(segs), reward=e.reward, task_id=e.task_id,
                               group_id=e.group_id) for p, segs in e.samples()]
    return out


def pack(examples: Sequence[Any], pad_id: int, pack_length: int, dtype: torch.dtype = torch.float32) -> SFTBatch:
    """First-fit packing into rows of ``pack_length`` (an example longer than that gets its own row).

    The 4D mask lets a token see only earlier tokens of its own example; padding sees only itself.
    """
    trajs = _as_trajectories(examples)
    rows: list[list[Experience]] = []
    lengths: list[int] = []
    for t in sorted(trajs, key=lambda t: -(len(t.prompt_ids) + len(t.response_ids))):
        n = len(t.prompt_ids) + len(t.response_ids)
        k = next((i for i, used in enumerate(lengths) if used + n <= pack_length), None)
        if k is None:
            rows.append([])
            lengths.append(0)
            k = len(rows) - 1
        rows[k].append(Experience.from_trajectories([t], pad_id))
        lengths[k] += n
    T = max(lengths)
    R = len(rows)
    seq = torch.full((R, T), pad_id, dtype=torch.long)
    pos = torch.zeros((R, T), dtype=torch.long)
    seg = torch.zeros((R, T), dtype=torch.long)   # example number within the row, 0 = padding
    amask = torch.zeros((R, T - 1))
    for r, parts in enumerate(rows):
        at = 0
        for j, e in enumerate(parts, start=1):
            n = e.sequences.shape[1]
            seq[r, at:at + n] = e.sequences[0]
            pos[r, at:at + n] = torch.arange(n)
            seg[r, at:at + n] = j
            amask[r, at:at + n - 1] = e.action_mask[0]  # never across an example boundary
            at += n
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    same = (seg[:, :, None] == seg[:, None, :]) & (seg[:, :, None] > 0)
    allowed = (same & causal) | torch.eye(T, dtype=torch.bool)
    mask = torch.zeros((R, 1, T, T), dtype=dtype).masked_fill(~allowed[:, None], torch.finfo(dtype).min)
    return SFTBatch(seq, mask, amask, pos)


def make_batch(examples: Sequence[Any], pad_id: int, packing: bool = False, pack_length: int = 1024,
               dtype: torch.dtype = torch.float32) -> SFTBatch:
    """A padded batch (one example per row), or a packed one."""
    if packing:
        return pack(examples, pad_id, pack_length, dtype)
    e = Experience.from_trajectories(_as_trajectories(examples), pad_id)
    return SFTBatch(e.sequences, e.attention_mask, e.action_mask)


def batch_logprobs(model: Any, batch: SFTBatch) -> torch.Tensor:
    """Log-prob of each next token (R,A) through ``sequence_logprobs`` (LM head in chunks; packed rows
    with their 4D mask and position ids). Rows of a padded batch that begin alike (``SHARED_PREFIX_MIN``
    tokens or more: the system prompt every warm-start example repeats) run that prefix once, its cache
    under every row (``shared_prefix_logprobs``: the same log-probs and gradients, tested)."""
    device = next(model.parameters()).device
    pos = None if batch.position_ids is None else batch.position_ids.to(device)
    prefix = common_prefix(batch.sequences, batch.attention_mask) if pos is None else 0
    lens = torch.full((batch.sequences.shape[0],), prefix, device=device) if prefix >= SHARED_PREFIX_MIN else None
    lp, _ = sequence_logprobs(model, batch.sequences.to(device), batch.attention_mask.to(device), position_ids=pos,
                              prompt_lens=lens)
    return lp


def num_loss_tokens(examples: Sequence[Any]) -> int:
    return sum(t.num_action_tokens for t in _as_trajectories(examples))


def sft_micro_loss(model: Any, pad_id: int, packing: bool = False, pack_length: int = 1024):
    """The ``micro_loss`` of ``train_loop``: token-mean NLL over the whole batch's response tokens."""
    dtype = next(model.parameters()).dtype

    def micro_loss(micro: Sequence[Any], batch: Sequence[Any]) -> tuple[torch.Tensor, dict[str, float]]:
        b = make_batch(micro, pad_id, packing, pack_length, dtype)
        mask = b.action_mask.to(next(model.parameters()).device)
        loss = sft_loss(batch_logprobs(model, b), mask, num_tokens=num_loss_tokens(batch))
        return loss, {"loss": loss.item(), "rows": float(b.sequences.shape[0])}

    return micro_loss


@torch.no_grad()
def eval_loss(model: Any, examples: Sequence[Any], pad_id: int, micro_batch_size: int = 32) -> float:
    """Token-mean NLL of the loss tokens of ``examples`` (no gradients)."""
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    for k in range(0, len(examples), max(1, micro_batch_size)):
        b = make_batch(examples[k:k + micro_batch_size], pad_id)
        mask = b.action_mask.to(next(model.parameters()).device)
        total -= float((batch_logprobs(model, b) * mask).sum())
        tokens += int(mask.sum())
    model.train(was_training)
    return total / max(tokens, 1)


HEARTBEAT_S = 20.0
"""Seconds a warm start may go without saying where it is (between its evaluations)."""


def train_sft(model: Any, pairs: Sequence[Any], pad_id: int, *, lr: float, batch_size: int, max_steps: int,
              eval_every: int, patience: int, target_accuracy: float = 1.0, min_accuracy: float = 0.0,
              dev_accuracy: Callable[[], float] | None = None, seed: int = 0,
              log: Callable[[str], None] = print, micro_batch_size: int = 0,
              heartbeat_s: float = HEARTBEAT_S, max_seconds: float = 0.0) -> SFTResult:
    """The warm start: train until ``max_steps``, ``target_accuracy`` on dev, or ``patience``
    evaluations without progress (a better accuracy under ``min_accuracy`` is no progress, so a warm
    start that never reaches a useful accuracy stops after ``patience`` evaluations). Keeps (and
    restores) the weights of the best dev accuracy; the last weights are evaluated too when the last
    step was not an evaluation step. Between evaluations a line says where it is (step, loss, seconds)
    whenever ``heartbeat_s`` have passed without one (0: never), so a long warm start is never silent.
    ``max_seconds`` (0: none) stops it between steps (``SFTResult.out_of_time``). The loss of every step
    is kept in ``SFTResult.curve``, bounded (:class:`LossCurve`).

    ``pairs``: (prompt ids, response ids) pairs or Trajectories (loss on their action segments).
    """
    optim = OptimConfig(lr=lr, batch_size=batch_size, micro_batch_size=micro_batch_size or batch_size,
                        max_steps=max_steps, eval_every=eval_every if dev_accuracy else 0, grad_clip=1.0,
                        log_every=1, max_seconds=max_seconds)
    best = {"acc": -1.0, "state": None, "stale": 0}
    history: list[tuple[int, float, float]] = []
    curve = LossCurve()
    last_loss = [float("nan")]
    started = said = time.monotonic()

    def on_log(step: int, metrics: dict[str, float]) -> None:
        nonlocal said
        last_loss[0] = metrics["loss"]
        curve.add(step, metrics["loss"], time.monotonic() - started)
        if heartbeat_s and time.monotonic() - said >= heartbeat_s:
            said = time.monotonic()
            log(f"warm start step {step}/{max_steps}: loss {last_loss[0]:.3f} ({said - started:.0f} s)")

    def on_eval(step: int) -> bool:
        nonlocal said
        acc = dev_accuracy()
        said = time.monotonic()
        history.append((step, last_loss[0], acc))
        log(f"warm start step {step}: loss {last_loss[0]:.3f}, dev accuracy {acc:.3f}")
        improved = acc > best["acc"]
        if improved:
            best.update(acc=acc, state=copy.deepcopy(model.state_dict()))
        best["stale"] = 0 if improved and acc >= min_accuracy else best["stale"] + 1
        return bool(acc >= target_accuracy or best["stale"] >= patience)

    result = train_loop(model, list(pairs), optim, sft_micro_loss(model, pad_id), on_eval=on_eval,
                        on_log=on_log, seed=seed)
    stopped = bool(history) and history[-1][0] == result.steps and (
        history[-1][2] >= target_accuracy or best["stale"] >= patience)  # stopped by its dev accuracy
    out_of_time = bool(max_seconds) and result.steps < max_steps and not stopped
    if dev_accuracy is not None and result.steps and (not history or history[-1][0] != result.steps):
        on_eval(result.steps)  # the last weights are a candidate too (max_steps below eval_every: the only one)
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    return SFTResult(result.steps, best["acc"], last_loss[0], result.seconds, history, out_of_time, curve.points())
