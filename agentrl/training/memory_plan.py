"""``agentrl plan CONFIG``: the memory each component of a run needs, from the config alone.

The architecture comes from the model's ``config.json`` (parameters counted on the meta device, so
nothing is loaded); hub ids that are neither cached nor reachable use ``KNOWN_CONFIGS``. The workload
is the worst case of a step: every sample as long as the longest prompt (measured on 64 tasks of the
env with the model's tokenizer, or ``--prompt-tokens``) plus its whole response budget.

Rows, per device (the process on CPU, each GPU on a GPU machine):

- **weights**, **gradients**, **optimizer** (AdamW: two states per trainable weight; under DeepSpeed
  bf16 also an fp32 master copy; ZeRO stages partition them over the policy ranks);
- **activations**: the peak of the learner's largest forward/backward call. The learner's own call
  split is used (micro-batches, shared prompts, ``learner.call_tokens`` pieces); a call keeps, per
  decoder layer and token, what autograd saves for a Llama-family layer (norm inputs, projection
  inputs, attention q/k/v/out with keys repeated to every head, MLP intermediates: measured with
  saved-tensor hooks), plus ~4 float32 copies of the LM-head logits it holds at once (one
  1,024-position chunk when the head is chunked);
- **reference** (a frozen copy, when ``algo.kl_mode`` is not none and the policy is not LoRA),
  **critic** (PPO);
- **engine**: HF shares the policy's weights, adds the fused decode weights and, while generating,
  the batch's KV cache (preallocated for prompt + response, beside the prefill's own) and the prefill
  logits; vLLM holds its own weights and takes ``gpu_memory_utilization`` of the GPU for weights, KV
  cache and activations (on CPU, ``VLLM_CPU_KVCACHE_SPACE`` GiB of KV cache).

The peak is what stays resident plus the larger of the rollout's and the update's transients.
Measured against CPU runs of the tiny and SmolLM2 configs in ``tests/test_memory_plan.py`` and
``tests/real/test_memory_plan_smollm2.py``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import torch

from agentrl.config import RunConfig

GIB = 2**30
CHUNK_TOKENS, SMALL_LOGITS_BYTES = 1024, 32 * 2**20  # as agentrl.training.packing
LOGIT_COPIES = 4  # logits, the exp in logsumexp, softmax / log-softmax for the entropy (forward); grad (backward)
SAMPLING_COPIES = 8  # a decode step's float32 (batch, vocab) tensors alive at once: logits, probabilities, ...
SHARED_SCORE_COPIES = 5  # (batch, heads, prompt) tensors of one attention call over shared prompts: the weights
# grid, the scores, their per-row copy and gather, the softmax's input and output (static_decode.SharedPromptCaches)
CUDA_OVERHEAD = 1 * GIB  # CUDA context, cuBLAS workspace and allocator slack per GPU process (an estimate)

KNOWN_CONFIGS: dict[str, dict[str, Any]] = {
    # config.json fields of hub models the example configs use, for planning without the hub
    "Qwen/Qwen2.5-0.5B": dict(model_type="qwen2", hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                              num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                              tie_word_embeddings=True, max_position_embeddings=32768),
    "Qwen/Qwen2.5-1.5B": dict(model_type="qwen2", hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                              num_attention_heads=12, num_key_value_heads=2, vocab_size=151936,
                              tie_word_embeddings=True, max_position_embeddings=32768),
    "Qwen/Qwen2.5-7B": dict(model_type="qwen2", hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                            num_attention_heads=28, num_key_value_heads=4, vocab_size=152064,
                            tie_word_embeddings=False, max_position_embeddings=32768),
}
for _base in list(KNOWN_CONFIGS):
    KNOWN_CONFIGS[_base + "-Instruct"] = KNOWN_CONFIGS[_base]

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclasses.dataclass(frozen=True)
class Shape:
    """A decoder's dimensions and parameter counts (``linears``: (in, out) of each decoder-layer Linear)."""

    params: int
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    linears: tuple[tuple[str, int, int], ...]  # (name, in, out) of one decoder layer's Linears
    static_decode: bool  # HFEngine decodes it with agentrl.rollout.engines.static_decode (Llama / Qwen2)

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    def lora_params(self, r: int, targets: list[str]) -> int:
        """Adapter parameters of rank ``r`` on the decoder Linears named by ``targets`` (``all-linear``: every one)."""
        every = list(targets) == ["all-linear"]
        return self.layers * sum(r * (i + o) for name, i, o in self.linears if every or name.rsplit(".", 1)[-1] in targets)

    def linear_params(self, names: tuple[str, ...] | None = None) -> int:
        """Weights of the decoder Linears (all, or those whose last name part is in ``names``)."""
        return self.layers * sum(i * o for n, i, o in self.linears if names is None or n.rsplit(".", 1)[-1] in names)


def model_shape(config: Any) -> Shape:
    """``Shape`` of a Hugging Face causal-LM config (the model is built on the meta device: no memory)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    params = {id(p): p.numel() for p in model.parameters()}
    layers = model.model.layers
    linears = tuple((n, m.in_features, m.out_features) for n, m in layers[0].named_modules()
                    if isinstance(m, torch.nn.Linear))
    heads = config.num_attention_heads
    return Shape(params=sum(params.values()), layers=len(layers), hidden=config.hidden_size,
                 intermediate=config.intermediate_size, heads=heads,
                 kv_heads=getattr(config, "num_key_value_heads", None) or heads,
                 head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads, vocab=config.vocab_size,
                 linears=linears, static_decode=type(model).__name__ in ("LlamaForCausalLM", "Qwen2ForCausalLM"))


def load_model_config(cfg: RunConfig, model_path: str | None) -> tuple[Any, str]:
    """The HF config of the run's model and where it came from."""
    from transformers import AutoConfig

    path = model_path or cfg.model.path
    try:
        return AutoConfig.from_pretrained(path, trust_remote_code=cfg.model.trust_remote_code), path
    except OSError:
        known = KNOWN_CONFIGS.get(cfg.model.path)
        if known is None:
            raise
        fields = dict(known)
        return AutoConfig.for_model(fields.pop("model_type"), **fields), f"{cfg.model.path} (built-in config)"


# ---------------------------------------------------------------------------------------------- the workload
def response_tokens(cfg: RunConfig, env: Any = None) -> int:
    """Tokens after the prompt in the longest episode: ``rollout.max_total_tokens``, or the per-turn
    budget times the env's ``max_turns``."""
    if cfg.rollout.max_total_tokens > 0:
        return cfg.rollout.max_total_tokens
    return cfg.rollout.max_new_tokens * max(1, int(getattr(env, "max_turns", 1) or 1))


def longest_prompt(env: Any, tokenizer: Any, chat_template: bool, samples: int = 64, seed: int = 0) -> int:
    """Tokens of the longest of ``samples`` prompts the env draws (as the executor encodes them)."""
    import numpy as np

    from agentrl.rollout.executors.single_turn import encode_prompt

    rng = np.random.default_rng(seed)
    return max(len(encode_prompt(tokenizer, env.sample_task(rng).prompt, chat_template)) for _ in range(samples))


def learner_call(cfg: RunConfig, shape: Shape, prompt: int, response: int, on_gpu: bool, ranks: int = 1
                 ) -> tuple[int, int]:
    """(distinct prompts, rows) of the learner's largest forward/backward call, split as the learner splits
    a micro-batch of full-length samples (``agentrl.training.buckets.fit_calls`` with its call-token cap);
    over ``ranks`` data-parallel ranks each trains its share of the batch."""
    from agentrl.training.buckets import cache_sized_tokens, fit_calls

    n = cfg.rollout.n_samples
    batch = math.ceil(cfg.data.prompts_per_step * n / ranks)
    rows = min(batch, cfg.learner.micro_batch_size)
    if cfg.learner.micro_batch_tokens > 0:
        rows = min(batch, max(n, cfg.learner.micro_batch_tokens // (prompt + response) // n * n))
    cap = cfg.learner.call_tokens
    if cap == -1:  # auto, as agentrl.training.learner.call_token_cap
        cap = 0 if on_gpu else cache_sized_tokens(shape.intermediate, DTYPE_BYTES[cfg.model.dtype])
    shared = cfg.learner.shared_prefix and n > 1
    prompts = [(i // n, prompt) for i in range(rows)] if shared else None
    pieces = fit_calls([prompt + response] * rows, [list(range(rows))], cap, prompts)
    big = max(pieces, key=len)
    return (len({i // n for i in big}) if shared else len(big)), len(big)


def activation_bytes(shape: Shape, prompts: int, rows: int, prompt: int, response: int, *, act_bytes: int,
                     norms_train: bool, shared: bool, checkpointing: bool) -> int:
    """Peak bytes of one forward/backward call over ``rows`` samples of ``prompt + response`` tokens
    (``prompts`` distinct prompts run once when ``shared``)."""
    H, mlp, q, L = shape.hidden, shape.intermediate, shape.q_dim, shape.layers
    if shared:
        tokens = prompts * prompt + rows * response
        keys = prompts * prompt + rows * (prompt + response)  # the responses attend to the repeated prompt cache
        mask = rows * response * (prompt + response)
    else:
        tokens = keys = rows * (prompt + response)
        mask = rows * (prompt + response) ** 2
    per_token = (4 if norms_train else 2) * H + 2 * H + 4 * mlp + 2 * q + shape.heads + 2
    layer = (tokens * per_token + keys * 2 * q) * act_bytes + mask * 4
    if checkpointing:  # each layer keeps its input; in the backward pass one layer is rebuilt, with its gradients
        saved = L * tokens * H * act_bytes + layer * 3 // 2
    else:
        saved = L * layer
    head_rows = tokens if tokens <= CHUNK_TOKENS or tokens * shape.vocab * 4 <= SMALL_LOGITS_BYTES else CHUNK_TOKENS
    return saved + LOGIT_COPIES * head_rows * shape.vocab * 4


# ---------------------------------------------------------------------------------------------- the table
@dataclasses.dataclass
class Row:
    component: str
    bytes: int
    resident: bool  # held for the whole run (else only during the rollout or the update)
    phase: str = ""  # rollout | update for transients
    note: str = ""
    where: str = ""  # cluster.mode=ray: the actor group's device ("policy rank", "engine", ...); "" in one process


@dataclasses.dataclass
class Plan:
    """The rows of each device (one in a single process; one per actor group over Ray) and their inputs."""

    device: str
    rows: list[Row]
    facts: dict[str, Any]

    @property
    def places(self) -> list[str]:
        return list(dict.fromkeys(r.where for r in self.rows))

    def total(self, phase: str | None = None, where: str | None = None) -> int:
        """Resident bytes plus the transients of ``phase`` (None: the larger phase) on ``where`` (None: the
        device that needs the most)."""
        if where is None:
            return max(self.total(phase, w) for w in self.places)
        rows = [r for r in self.rows if r.where == where]
        resident = sum(r.bytes for r in rows if r.resident)
        phases = {p: sum(r.bytes for r in rows if not r.resident and r.phase == p) for p in ("rollout", "update")}
        return resident + (phases[phase] if phase else max(phases.values()))

    def get(self, component: str) -> int:
        return sum(r.bytes for r in self.rows if r.component == component)


def optimizer_bytes(trainable: int, param_bytes: int, ray_deepspeed: bool, mixed: bool) -> int:
    """AdamW state: two moments in the parameters' dtype (torch); DeepSpeed keeps fp32 moments and, for
    bf16/fp16 weights, an fp32 master copy."""
    if ray_deepspeed:
        return trainable * (12 if mixed else 8)
    return trainable * 2 * param_bytes


def make_plan(cfg: RunConfig, shape: Shape, prompt: int, response: int, *, gpu_bytes: int | None = None) -> Plan:
    """The memory plan of ``cfg`` for a model of ``shape`` (see the module docstring)."""
    on_gpu = cfg.model.device == "cuda" or (cfg.model.device == "auto" and gpu_bytes is not None)
    pb = DTYPE_BYTES[cfg.model.dtype]
    c = cfg.cluster
    ray = c.mode == "ray"
    ranks = c.policy.num if ray else 1
    zero = c.zero_stage if ray and c.strategy == "deepspeed" else 0
    lora = cfg.learner.lora
    trainable = shape.lora_params(lora.r, list(lora.target_modules)) if lora.r > 0 else shape.params
    weights = (shape.params + (trainable if lora.r > 0 else 0)) * pb
    policy = "policy rank" if ray else ""
    rows: list[Row] = [Row("weights", weights // (ranks if zero == 3 else 1), True, note=f"{shape.params:,} parameters"
                           + (f" + {trainable:,} LoRA" if lora.r > 0 else ""), where=policy)]
    opt = optimizer_bytes(trainable, pb, ray and c.strategy == "deepspeed", pb < 4) // (ranks if zero >= 1 else 1)
    rows.append(Row("optimizer", 0 if c.offload_optimizer else opt, True, where=policy,
                    note="in CPU memory" if c.offload_optimizer else f"AdamW over {trainable:,} trainable"))
    rows.append(Row("gradients", trainable * pb // (ranks if zero >= 2 else 1), False, "update", where=policy))
    n = cfg.rollout.n_samples
    prompts, call_rows = learner_call(cfg, shape, prompt, response, on_gpu, ranks)
    act = activation_bytes(shape, prompts, call_rows, prompt, response, act_bytes=pb, norms_train=lora.r == 0,
                           shared=cfg.learner.shared_prefix and n > 1,
                           checkpointing=cfg.learner.gradient_checkpointing)
    rows.append(Row("activations", act, False, "update", note=f"a call of {call_rows} samples", where=policy))
    if cfg.algo.kl_mode != "none" and lora.r == 0:
        rows.append(Row("reference", shape.params * pb, True, note="frozen copy for the KL term",
                        where="reference" if ray else ""))
    if cfg.algo.estimator == "gae":
        rows.append(Row("critic", shape.params * pb * 4, True, note="weights, AdamW, gradients",
                        where="critic" if ray else ""))
    rows += engine_rows(cfg, shape, prompt, response, pb, lora.r > 0, gpu_bytes if on_gpu else None)
    if on_gpu:
        rows += [Row("CUDA context", CUDA_OVERHEAD, True, note="context, workspaces, allocator slack (estimate)",
                     where=w) for w in dict.fromkeys(r.where for r in rows)]
    facts = dict(prompt_tokens=prompt, response_tokens=response, call_rows=call_rows, call_prompts=prompts,
                 trainable=trainable, batch=cfg.data.prompts_per_step * n)
    return Plan("GPU" if on_gpu else "CPU", rows, facts)


def engine_rows(cfg: RunConfig, shape: Shape, prompt: int, response: int, pb: int, lora: bool,
                gpu_bytes: int | None) -> list[Row]:
    """The rollout engine's rows (HF in the trainer's process, or vLLM)."""
    n = cfg.rollout.n_samples
    ray = cfg.cluster.mode == "ray"
    where = "engine" if ray else ""
    engines = cfg.cluster.engines.num if ray else 1
    batch = min(math.ceil(cfg.data.prompts_per_step * n / engines), cfg.rollout.max_batch_size)
    kv_token = shape.layers * 2 * shape.kv_heads * shape.head_dim * pb
    if cfg.rollout.engine == "vllm":
        if gpu_bytes is None:
            space = float(os.environ.get("VLLM_CPU_KVCACHE_SPACE", "4"))
            return [Row("engine weights", shape.params * pb, True, note="vLLM's own copy", where=where),
                    Row("engine KV cache", int(space * GIB), True, note="VLLM_CPU_KVCACHE_SPACE", where=where)]
        share = int(0.5 * gpu_bytes)  # VLLMEngine's gpu_memory_utilization
        need = batch * (prompt + response) * kv_token
        return [Row("engine (vLLM)", share, True, where=where, note=f"gpu_memory_utilization 0.5: weights "
                    f"{shape.params * pb / GIB:.2f} GiB, the rest KV cache (its batch needs {need / GIB:.2f} GiB)")]
    fused = 0
    if shape.static_decode:  # fused q/k/v and gate/up copies; with LoRA every adapted weight is a new tensor
        fused = pb * shape.linear_params(None if lora else ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"))
    distinct = math.ceil(batch / n) if n > 1 else batch
    from agentrl.rollout.engines.static_decode import SHARED_MIN_ROWS

    if shape.static_decode and batch >= SHARED_MIN_ROWS * distinct:
        # each prompt's cache once, the rows' new tokens, and a step's (rows x heads x prompt) score grids
        scores = SHARED_SCORE_COPIES * batch * shape.heads * prompt * pb
        kv = (distinct * prompt + batch * response) * kv_token + scores
    else:  # preallocated prompt + response, beside the prefill's cache
        kv = batch * (2 * prompt + response) * kv_token
    logits = distinct * prompt * shape.vocab * pb + SAMPLING_COPIES * batch * shape.vocab * 4
    rows = [Row("engine weights", shape.params * pb, True, note="the engine actor's model", where=where)] if ray else []
    return rows + [Row("engine decode weights", fused, True, where=where,
                       note="HF engine: fused layer weights" + ("" if ray else " (shares the policy's)")),
                   Row("engine KV cache", kv + logits, False, "rollout", where=where,
                       note=f"{batch} samples x {prompt + response} tokens; prefill and sampling logits")]


def format_plan(plan: Plan, source: str) -> str:
    """The table ``agentrl plan`` prints (one block per device kind over Ray)."""
    f = plan.facts
    lines = [f"memory plan per {plan.device} ({source}; every sample {f['prompt_tokens']} prompt + "
             f"{f['response_tokens']} response tokens)"]
    for where in plan.places:
        if where:
            lines.append(f"-- each {where} {plan.device}")
        lines.append(f"{'component':<24}{'GiB':>10}  when     note")
        for r in (r for r in plan.rows if r.where == where):
            when = "always" if r.resident else r.phase
            lines.append(f"{r.component:<24}{r.bytes / GIB:>10.3f}  {when:<8} {r.note}")
        lines.append(f"{'peak':<24}{plan.total(None, where) / GIB:>10.3f}  resident + max(rollout "
                     f"{plan.total('rollout', where) / GIB:.3f}, update {plan.total('update', where) / GIB:.3f})")
    return "\n".join(lines)


def plan_run(cfg: RunConfig, *, prompt_tokens: int | None = None, gpu_gib: float | None = None) -> tuple[Plan, str]:
    """The plan of ``cfg`` and a line saying where the model's shape and the prompt length came from.
    Builds the tiny model (cached) when ``model.path`` is tiny; loads only configs and tokenizers otherwise."""
    from agentrl.models import load_tokenizer
    from agentrl.rollout.build import make_env, resolve_model_path

    env = make_env(cfg)
    path = resolve_model_path(cfg, env)  # builds the tiny model (cached); a hub id is returned as given
    config, source = load_model_config(cfg, path)
    shape = model_shape(config)
    how = "given"
    if prompt_tokens is None:
        try:
            tokenizer = load_tokenizer(path, cfg.model.trust_remote_code)
        except OSError as e:
            raise OSError(f"{cfg.model.path}: no tokenizer here to measure prompts; give --prompt-tokens N") from e
        prompt_tokens, how = longest_prompt(env, tokenizer, cfg.rollout.chat_template), "longest of 64 sampled"
    gpu_bytes = None
    if cfg.model.device == "cuda" or (cfg.model.device == "auto" and torch.cuda.is_available()):
        gpu_bytes = int(gpu_gib * GIB) if gpu_gib else (torch.cuda.get_device_properties(0).total_memory
                                                         if torch.cuda.is_available() else 80 * GIB)
    plan = make_plan(cfg, shape, prompt_tokens, response_tokens(cfg, env), gpu_bytes=gpu_bytes)
    where = f"model {source}; prompt tokens: {how}" + (f"; GPU of {gpu_bytes / GIB:.0f} GiB" if gpu_bytes else "")
    return plan, where


MEASURED_ROWS = {"weights": "weights", "optimizer": "optimizer", "gradients": "gradients",
                 "activations": "activations", "engine decode weights": "engine decode weights",
                 "engine KV cache": "rollout"}
"""Plan row -> ``measure_run`` key (the rollout's peak is what the KV-cache row plans)."""


def compare(plan: Plan, measured: dict[str, int]) -> list[tuple[str, int, int]]:
    """(row, planned bytes, measured bytes) for every row ``measure_run`` measures, and the peak."""
    out = [(row, plan.get(row), measured[key]) for row, key in MEASURED_ROWS.items() if key in measured]
    return out + [("peak", plan.total(), measured["peak"])]


def format_comparison(rows: list[tuple[str, int, int]]) -> str:
    lines = [f"{'measured here':<24}{'planned GiB':>12}{'measured GiB':>14}{'ratio':>8}"]
    for name, planned, measured in rows:
        ratio = f"{planned / measured:.2f}" if measured else "-"
        lines.append(f"{name:<24}{planned / GIB:>12.3f}{measured / GIB:>14.3f}{ratio:>8}")
    return "\n".join(lines)
