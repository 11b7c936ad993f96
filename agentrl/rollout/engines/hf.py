"""``HFEngine``: generation with transformers ``generate`` (CPU or GPU), keeping per-token log-probs.

The engine may share its model object with the learner (single process): then ``load_weights`` is
free because the weights are already the policy's. Log-probs are those of the sampling distribution
(logits / temperature, before top-p/top-k truncation), as the learner computes them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import torch

from agentrl.rollout.engines import static_decode
from agentrl.rollout.engines.base import Completion, SamplingParams, check_row_seeds

log = logging.getLogger(__name__)


class HFEngine:
    """Batched sampling with a Hugging Face causal LM; left-pads prompts of different lengths.

    ``sampler="loop"`` (default) runs our own KV-cached decode loop (one forward per token, no
    logits processors, stops as soon as every row has ended); ``"generate"`` calls transformers'
    ``generate`` for architectures the loop does not suit. Both give the same greedy tokens.
    """

    def __init__(self, model: Any, tokenizer: Any, *, max_batch_size: int = 512, sampler: str = "loop") -> None:
        if sampler not in ("loop", "generate"):
            raise ValueError(f"unknown sampler {sampler!r}; valid: loop, generate")
        self.sampler = sampler
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.eos_id = tokenizer.eos_token_id
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        self.share_prompts = True  # prefill a repeated prompt once (benchmarks turn it off to compare)
        # Llama-family models decode over a preallocated KV cache, compacting finished rows away
        self.static = static_decode.supports(model)
        self._decoder = static_decode.StaticDecoder()
        self._offloaded = False
        self._warned_row_seeds = False

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.inference_mode()  # cheaper per op than no_grad (no version counters); nothing here is trained on
    def generate(self, prompt_token_ids: list[list[int]], params: SamplingParams) -> list[Completion]:
        check_row_seeds(params, len(prompt_token_ids))
        if params.seed is not None:
            torch.manual_seed(params.seed)
        # similar lengths together: less padding; results are put back in the caller's order
        order = sorted(range(len(prompt_token_ids)), key=lambda i: len(prompt_token_ids[i]))
        results: dict[int, Completion] = {}
        for start in range(0, len(order), self.max_batch_size):
            chunk = order[start:start + self.max_batch_size]
            part = params if params.row_seeds is None else replace(
                params, row_seeds=tuple(params.row_seeds[i] for i in chunk))
            for i, c in zip(chunk, self._generate_batch([prompt_token_ids[i] for i in chunk], part)):
                results[i] = c
        return [results[i] for i in range(len(prompt_token_ids))]

    def _generate_batch(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        if any(len(p) == 0 for p in prompts):
            raise ValueError("every prompt needs at least one token")
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, p in enumerate(prompts):
            ids[row, width - len(p):] = torch.tensor(p)
            mask[row, width - len(p):] = 1
        stops = [self.eos_id, *params.stop_token_ids]
        was_training = self.model.training
        self.model.eval()
        try:
            if self.sampler == "loop":
                new, logprobs = self._decode_loop(ids.to(self.device), mask.to(self.device), params, stops)
            else:
                new, logprobs = self._hf_generate(ids, mask, params, stops)
        finally:
            self.model.train(was_training)
        return [self._completion(new[row], logprobs[row], set(stops)) for row in range(len(prompts))]

    def _decode_loop(self, ids: torch.Tensor, mask: torch.Tensor, params: SamplingParams,
                     stops: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """KV-cached sampling: prefill once, then one token per forward. Returns (B,S) ids, logprobs.

        Identical prompts (the ``n`` samples of one task) are prefilled once and their KV cache is
        repeated to every sample, so a group costs one prompt forward instead of ``n``. Llama-family
        models then decode with ``static_decode`` (preallocated cache, finished rows dropped); others
        with the transformers forward per token.
        """
        B = ids.shape[0]
        draws = row_uniforms(params, B)  # (B,S) on the CPU, the same on every device
        draws = None if draws is None else draws.to(ids.device)
        first, inverse = _distinct_rows(torch.cat([ids, mask], dim=1)) if self.share_prompts else (None, None)
        uids, umask = (ids, mask) if inverse is None else (ids[first], mask[first])
        pos = (umask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=uids, attention_mask=umask, position_ids=pos, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1].float()
        # the static loop keeps a prompt's cache once for its rows when there are enough rows per prompt
        shared = self.static and inverse is not None and B >= static_decode.SHARED_MIN_ROWS * uids.shape[0]
        if inverse is not None:
            if not shared:  # one cache row per sample
                past.reorder_cache(inverse)
            logits, pos = logits[inverse], pos[inverse]
        next_pos = pos[:, -1:] + 1
        if self.static:
            return self._decoder.decode(self.model, past, logits, mask, next_pos, params, stops, self.pad_id, _sample,
                                        groups=inverse if shared else None, draws=draws)
        stop_t = torch.tensor(stops, device=ids.device)
        done = torch.zeros(B, dtype=torch.bool, device=ids.device)
        toks, lps = [], []
        for step in range(params.max_new_tokens):
            tok, lp = _sample(logits, params, None if draws is None else draws[:, step, None])
            tok = torch.where(done, torch.full_like(tok, self.pad_id), tok)
            toks.append(tok)
            lps.append(lp)
            done |= torch.isin(tok, stop_t)
            if bool(done.all()) or step == params.max_new_tokens - 1:
                break
            mask = torch.cat([mask, torch.ones((B, 1), dtype=mask.dtype, device=mask.device)], dim=1)
            out = self.model(input_ids=tok[:, None], attention_mask=mask, position_ids=next_pos,
                             past_key_values=past, use_cache=True)
            past, logits = out.past_key_values, out.logits[:, -1].float()
            next_pos = next_pos + 1
        return torch.stack(toks, 1).cpu(), torch.stack(lps, 1).cpu()

    def _hf_generate(self, ids: torch.Tensor, mask: torch.Tensor, params: SamplingParams,
                     stops: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """transformers ``generate`` with per-step logits kept. Returns (B,S) ids, logprobs. It samples from the
        global RNG: ``params.row_seeds`` are not honoured here (a warning, once)."""
        if params.row_seeds is not None and not params.greedy and not self._warned_row_seeds:
            self._warned_row_seeds = True
            log.warning("HFEngine(sampler='generate') samples from torch's global RNG: SamplingParams.row_seeds "
                        "are ignored, so a row's tokens depend on the rows beside it (sampler='loop' honours them)")
        width = ids.shape[1]
        gen = self.model.generate(
            input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
            max_new_tokens=params.max_new_tokens, do_sample=not params.greedy,
            temperature=params.temperature if not params.greedy else None,
            top_p=params.top_p if not params.greedy else None,
            top_k=params.top_k if not params.greedy else None,
            eos_token_id=stops, pad_token_id=self.pad_id,
            output_logits=True, return_dict_in_generate=True,
        )
        new = gen.sequences[:, width:].cpu()
        logits = torch.stack(gen.logits, dim=1).float()
        if not params.greedy:
            logits = logits / params.temperature
        logprobs = (logits.gather(-1, new.to(logits.device).unsqueeze(-1)).squeeze(-1)
                    - torch.logsumexp(logits, dim=-1)).cpu()
        return new, logprobs

    @staticmethod
    def _completion(tokens: torch.Tensor, logprobs: torch.Tensor, stops: set[int]) -> Completion:
        toks = tokens.tolist()
        for j, t in enumerate(toks):
            if t in stops:
                return Completion(toks[:j + 1], logprobs[:j + 1].tolist(), "stop")
        return Completion(toks, logprobs.tolist(), "length")

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        params = dict(self.model.named_parameters())
        for name, tensor in named_tensors:
            p = params.get(name)
            if p is None:
                raise KeyError(f"engine model has no parameter {name!r}")
            if p.data_ptr() != tensor.data_ptr():
                p.copy_(tensor.to(p.device, p.dtype))

    def sleep(self) -> None:
        """Move the weights to CPU memory (frees GPU memory; a no-op on CPU)."""
        if self.device.type != "cpu":
            self._home = self.device
            self.model.to("cpu")
            self._offloaded = True

    def wake_up(self) -> None:
        if self._offloaded:
            self.model.to(self._home)
            self._offloaded = False


def _distinct_rows(rows: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Distinct rows of a (B,T) tensor: (index of each one's first occurrence, row -> distinct index),
    or (None, None) when every row is distinct."""
    uniq, inverse = torch.unique(rows.cpu(), dim=0, return_inverse=True)
    if uniq.shape[0] == rows.shape[0]:
        return None, None
    first = torch.full((uniq.shape[0],), rows.shape[0], dtype=torch.long)
    first = first.scatter_reduce(0, inverse, torch.arange(rows.shape[0]), reduce="amin")
    return first.to(rows.device), inverse.to(rows.device)


def row_uniforms(params: SamplingParams, rows: int) -> torch.Tensor | None:
    """(rows, max_new_tokens) uniforms in [0, 1), row ``i`` drawn from a generator seeded by
    ``params.row_seeds[i]`` (its stream's prefix, whatever ``max_new_tokens``); None without row seeds or
    when greedy (nothing is drawn)."""
    if params.row_seeds is None or params.greedy:
        return None
    check_row_seeds(params, rows)
    return torch.stack([torch.rand(params.max_new_tokens, generator=torch.Generator().manual_seed(s))
                        for s in params.row_seeds])


def _sample(logits: torch.Tensor, params: SamplingParams, u: torch.Tensor | None = None
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row from logits (B,V): greedy, or temperature with optional top-k / top-p; ``u`` (B,1)
    the rows' uniforms for this token (None: drawn from the global RNG).

    Returns the tokens (B,) and their log-probs under logits / temperature (before truncation).
    """
    if params.greedy:
        tok = logits.argmax(-1)
        return tok, logits.gather(-1, tok[:, None]).squeeze(-1) - torch.logsumexp(logits, -1)
    scaled = logits / params.temperature
    logp = torch.log_softmax(scaled, dim=-1)
    probs = logp.exp()
    if params.top_k and params.top_k < probs.shape[-1]:
        kth = probs.topk(params.top_k, dim=-1).values[:, -1:]
        probs = torch.where(probs < kth, torch.zeros_like(probs), probs)
    if params.top_p < 1.0:
        sorted_p, idx = probs.sort(dim=-1, descending=True)
        cut = sorted_p.cumsum(-1) - sorted_p > params.top_p
        probs = probs.scatter(-1, idx, sorted_p.masked_fill(cut, 0.0))
    # inverse CDF: one uniform per row (an exponential per vocabulary entry cost ~10x more at V=260)
    cdf = probs.cumsum(-1)
    total = cdf[:, -1:]
    u = torch.rand_like(total) if u is None else u.to(total.device, total.dtype)
    u = torch.minimum(u * total, torch.nextafter(total, torch.zeros_like(total)))
    tok = torch.searchsorted(cdf, u, right=True).squeeze(-1).clamp_(max=cdf.shape[-1] - 1)
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1)
