"""The warm start of an RL run: supervised fine-tuning on the env's reference answers until the dev
accuracy stops improving, keeping the best dev weights (never the test split). The result is cached
by a content hash of everything that determines it, so a resumed or repeated run loads it."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agentrl.config import RunConfig, to_dict
from agentrl.env import TextEnv, fixed_tasks
from agentrl.evaluation.metrics import evaluate
from agentrl.models import cache_dir
from agentrl.rollout.build import sampling_params
from agentrl.rollout.engines.hf import HFEngine
from agentrl.rollout.executors import SingleTurnExecutor, encode_prompt
from agentrl.training.supervised import train_sft


def warm_start(cfg: RunConfig, model: Any, tokenizer: Any, model_path: str, env: TextEnv, dev_env: TextEnv,
               log: Any = print) -> dict[str, float]:
    """Supervised warm start on the env's reference answers, cached by content hash."""
    from safetensors.torch import load_file, save_file

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
