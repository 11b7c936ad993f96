"""Building the pieces of a run from its config: env, model (tiny or Hugging Face), warm start,
engine and executor. Constructors only wire; the training loop lives in ``agentrl.trainer``."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from agentrl.config import RunConfig, to_dict
from agentrl.engines.base import SamplingParams
from agentrl.env import TextEnv, make, register
from agentrl.evaluation import evaluate, fixed_tasks
from agentrl.executors import SingleTurnExecutor, encode_prompt
from agentrl.models import cache_dir, load_causal_lm, load_tokenizer, tiny_model_dir


def make_env(cfg: RunConfig, overrides: dict[str, Any] | None = None) -> TextEnv:
    """The configured env, with ``overrides`` on top of ``env.kwargs``."""
    for env_id, entry_point in cfg.env.register.items():
        register(env_id, entry_point)
    return make(cfg.env.id, **{**cfg.env.kwargs, **(overrides or {})})


def tiny_corpus(env: TextEnv, n: int = 2000, seed: int = 0) -> list[str]:
    """Text the tiny tokenizer is trained on: prompts and reference answers of the env."""
    tasks = fixed_tasks(env, n, seed)
    out = []
    for t in tasks:
        prompt = t.prompt if isinstance(t.prompt, str) else "\n".join(m["content"] for m in t.prompt)
        out += [prompt, env.reference_answer(t)]
    return out


def resolve_model_path(cfg: RunConfig, env: TextEnv) -> str:
    """``tiny`` -> the locally built (cached) tiny model dir; anything else as given."""
    if cfg.model.path != "tiny":
        return cfg.model.path
    t = cfg.model.tiny
    return str(tiny_model_dir(tiny_corpus(env, seed=cfg.data.seed), hidden_size=t.hidden_size,
                              num_layers=t.num_layers, num_heads=t.num_heads,
                              intermediate_size=t.intermediate_size, vocab_size=t.vocab_size,
                              max_position_embeddings=t.max_position_embeddings, seed=cfg.data.seed))


def load_policy(cfg: RunConfig, path: str) -> tuple[Any, Any]:
    """Model and tokenizer from ``path``."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tok = load_tokenizer(path, cfg.model.trust_remote_code)
    model = load_causal_lm(path, dtype=cfg.model.dtype, device=cfg.model.device,
                           trust_remote_code=cfg.model.trust_remote_code)
    return model, tok


def make_engine(cfg: RunConfig, model: Any, tokenizer: Any, model_path: str) -> Any:
    """The rollout engine. ``hf`` shares the policy's model object (weight sync is free)."""
    if cfg.rollout.engine == "hf":
        from agentrl.engines.hf import HFEngine

        return HFEngine(model, tokenizer, max_batch_size=cfg.rollout.max_batch_size)
    from agentrl.engines.vllm import VLLMEngine  # lazy: vllm is optional

    return VLLMEngine(model_path, seed=cfg.data.seed, dtype=cfg.model.dtype)


def sampling_params(cfg: RunConfig, greedy: bool = False) -> SamplingParams:
    r = cfg.rollout
    return SamplingParams(max_new_tokens=r.max_new_tokens, temperature=0.0 if greedy else r.temperature,
                          top_p=r.top_p, top_k=r.top_k)


def make_executor(cfg: RunConfig, env: TextEnv, engine: Any, tokenizer: Any) -> Any:
    """Single-turn executor (multi-turn envs get the multi-turn one)."""
    if getattr(env, "max_turns", 1) > 1:
        from agentrl.executors.multi_turn import MultiTurnExecutor

        return MultiTurnExecutor(env, engine, tokenizer, sampling_params(cfg), n_samples=cfg.rollout.n_samples,
                                 chat_template=cfg.rollout.chat_template,
                                 max_total_tokens=cfg.rollout.max_total_tokens or None)
    return SingleTurnExecutor(env, engine, tokenizer, sampling_params(cfg), n_samples=cfg.rollout.n_samples,
                              chat_template=cfg.rollout.chat_template)


def warm_start(cfg: RunConfig, model: Any, tokenizer: Any, model_path: str, env: TextEnv, dev_env: TextEnv,
               log: Any = print) -> dict[str, float]:
    """Supervised warm start on the env's reference answers, cached by content hash."""
    from safetensors.torch import load_file, save_file

    from agentrl.engines.hf import HFEngine
    from agentrl.sft import train_sft

    ws = cfg.model.warm_start
    key = hashlib.sha256(json.dumps([model_path, cfg.env.id, cfg.env.kwargs, cfg.env.dev_kwargs, to_dict(ws),
                                     cfg.rollout.chat_template, cfg.rollout.max_new_tokens, cfg.data.seed],
                                    sort_keys=True, default=str).encode()).hexdigest()[:16]
    cached = cache_dir() / "warmstart" / key
    if ws.cache and (cached / "model.safetensors").exists():
        model.load_state_dict(load_file(str(cached / "model.safetensors")), strict=False)
        log(f"warm start: loaded from cache {cached}")
        return json.loads((cached / "result.json").read_text())
    train_tasks = fixed_tasks(env, ws.examples, cfg.data.seed + 1)
    eos = [tokenizer.eos_token_id]
    pairs = [(encode_prompt(tokenizer, t.prompt, cfg.rollout.chat_template),
              tokenizer(env.reference_answer(t), add_special_tokens=False)["input_ids"] + eos)
             for t in train_tasks]
    dev_exec = SingleTurnExecutor(dev_env, HFEngine(model, tokenizer), tokenizer, sampling_params(cfg, True),
                                  chat_template=cfg.rollout.chat_template)
    dev_tasks = fixed_tasks(dev_env, ws.eval_tasks, cfg.data.seed + 2)
    result = train_sft(model, pairs, tokenizer.pad_token_id, lr=ws.lr, batch_size=ws.batch_size,
                       max_steps=ws.max_steps, eval_every=ws.eval_every, patience=ws.patience,
                       target_accuracy=ws.target_accuracy, seed=cfg.data.seed,
                       dev_accuracy=lambda: evaluate(dev_exec, dev_tasks, dev_exec.params)["accuracy"], log=log)
    summary = {"steps": result.steps, "dev_accuracy": result.best_dev_accuracy, "seconds": result.seconds}
    if ws.cache:
        tmp = cached.with_name(cached.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()
                   if k != "lm_head.weight" or not model.config.tie_word_embeddings},
                  str(tmp / "model.safetensors"))
        (tmp / "result.json").write_text(json.dumps(summary))
        if not cached.exists():
            tmp.rename(cached)
    log(f"warm start: {result.steps} steps in {result.seconds:.0f} s, best dev accuracy {result.best_dev_accuracy:.3f}")
    return summary


def ensure_dir(path: str | Path) -> Path:
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    return p
