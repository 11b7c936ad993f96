"""``agentrl plan CONFIG --measure``: run the plan's worst case once on this machine and measure it.

One policy update on a batch of full-length samples (every group one prompt of the planned length,
every response its whole budget) and one generation of the full batch with end-of-sequence disabled,
in this process, on the config's device: the single-process trainer's components (HF engine). Bytes
are the tensors' own (parameters, optimizer state, gradients, the fused decode weights) and the peak
of what the allocator holds above the resident state during the update, during one learner call, and
during the generation — on CPU from the profiler's allocator trace, on CUDA from
``torch.cuda.max_memory_allocated``. The test suite compares these with :func:`make_plan`.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from typing import Any

import torch

from agentrl.config import RunConfig


def peak_bytes(fn: Callable[[], Any], device: torch.device) -> int:
    """Peak bytes allocated by ``fn`` above what was allocated when it started."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    fd, trace = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(trace)
        with open(trace) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.remove(trace)
    # replay the allocator's events: blocks allocated while profiling, less those of them freed since
    # (frees of blocks from before are left out, as is the profiler's own running total, which misses some)
    live: dict[int, int] = {}
    held = peak = 0
    for e in sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"]):
        addr, size = e["args"]["Addr"], e["args"]["Bytes"]
        if size > 0:
            live[addr] = size
            held += size
            peak = max(peak, held)
        elif addr in live:
            held -= live.pop(addr)
    return peak


def tensor_bytes(tensors: Any, skip: set[int] | None = None) -> int:
    """Bytes of distinct storages among ``tensors`` (those in ``skip``, by data pointer, left out)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.numel():
            ptr = t.untyped_storage().data_ptr()
            if ptr not in (skip or set()):
                seen[ptr] = t.untyped_storage().nbytes()
    return sum(seen.values())


def worst_case_batch(groups: int, n: int, prompt: int, response: int, vocab: int, device: torch.device,
                     seed: int = 0) -> Any:
    """An ``Experience`` of ``groups`` prompts of ``prompt`` random tokens, ``n`` samples each with ``response``
    action tokens, random advantages (so every weight gets a gradient)."""
    from agentrl.training.experience import Experience

    g = torch.Generator().manual_seed(seed)
    B, T = groups * n, prompt + response
    seq = torch.cat([torch.randint(3, vocab, (groups, prompt), generator=g).repeat_interleave(n, 0),
                     torch.randint(3, vocab, (B, response), generator=g)], 1)
    action = torch.zeros(B, T - 1)
    action[:, prompt - 1:] = 1
    return Experience(sequences=seq, attention_mask=torch.ones(B, T, dtype=torch.long), action_mask=action,
                      rewards=torch.zeros(B), group_ids=torch.arange(groups).repeat_interleave(n),
                      advantages=torch.randn(B, T - 1, generator=g) * action).to(device)


def measure_run(cfg: RunConfig, prompt: int, response: int) -> dict[str, int]:
    """The measured counterparts of the plan's rows for the single-process trainer (see the module docstring):
    weights, optimizer, gradients, activations (one learner call), update (peak of a step above the
    resident state), engine decode weights, rollout (peak of a generation), peak (resident + the larger)."""
    from agentrl.models import load_policy
    from agentrl.rollout.build import make_env, resolve_model_path
    from agentrl.rollout.engines.base import SamplingParams
    from agentrl.rollout.engines.hf import HFEngine
    from agentrl.training.learner import PolicyLearner, sequence_logprobs, shared_prompts
    from agentrl.training.lora import apply_lora

    env = make_env(cfg)
    model, tokenizer = load_policy(cfg, resolve_model_path(cfg, env))
    model = apply_lora(model, cfg.learner.lora)
    device = next(model.parameters()).device
    params = list(model.parameters())
    own = {p.untyped_storage().data_ptr() for p in params}
    learner = PolicyLearner(model, cfg.learner, cfg.algo, temperature=cfg.rollout.temperature, max_new_tokens=response)
    exp = worst_case_batch(cfg.data.prompts_per_step, cfg.rollout.n_samples, prompt, response, model.config.vocab_size,
                           device)
    learner.train_step(exp)  # the optimizer state now exists
    out = {"weights": tensor_bytes(params),
           "optimizer": tensor_bytes(t for s in learner.optimizer.state.values() for t in s.values()
                                     if isinstance(t, torch.Tensor) and t.dim() > 0),
           "gradients": tensor_bytes(p.grad for p in params if p.grad is not None)}
    out["update"] = peak_bytes(lambda: learner.train_step(exp), device)
    call = max(learner.micro_batches(exp), key=len).trim()

    def forward_backward() -> None:
        lp, _ = sequence_logprobs(model, call.sequences, call.attention_mask, with_entropy=True,
                                  prompt_lens=shared_prompts(call, cfg.learner.shared_prefix))
        (lp * call.action_mask).sum().backward()

    out["activations"] = peak_bytes(forward_backward, device)  # the gradients exist already: only activations
    engine = HFEngine(model, tokenizer, max_batch_size=cfg.rollout.max_batch_size)
    engine.eos_id = -1  # every sample runs its whole budget
    prompts = exp.sequences[:, :prompt].tolist()
    full = SamplingParams(max_new_tokens=response, temperature=1.0)
    learner.optimizer.zero_grad(set_to_none=True)  # between steps the gradients are gone
    engine.generate(prompts, full)  # builds the fused decode weights, kept between calls
    fused = engine._decoder.weights.layers if engine.static else []  # noqa: SLF001 (our engine's cache)
    out["engine decode weights"] = tensor_bytes((t for layer in fused for t in layer), skip=own)
    out["rollout"] = peak_bytes(lambda: engine.generate(prompts, full), device)
    resident = out["weights"] + out["optimizer"] + out["engine decode weights"]
    out["peak"] = resident + max(out["update"], out["rollout"])
    return out
