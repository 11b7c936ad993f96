"""The warm start of an RL run: supervised fine-tuning on the env's reference answers until the dev
accuracy stops improving, keeping the best dev weights (never the test split). The result is cached
by a content hash of everything that determines it, so a resumed or repeated run loads it.

``model.warm_start.enabled: null`` (the default) turns it on with the tiny model when the env is
single-turn and its reference answers score (a randomly initialised tiny model learns nothing from RL
alone); an env without a dev split (``env.dev_kwargs`` raises) gets dev tasks held out of the
training tasks. :func:`maybe_warm_start` says on one line what it did and why."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agentrl.config import RunConfig, to_dict
from agentrl.env import TextEnv, fixed_tasks
from agentrl.evaluation.metrics import evaluate
from agentrl.models import cache_dir, cache_tmp, publish
from agentrl.rollout.build import sampling_params
from agentrl.rollout.engines.hf import HFEngine
from agentrl.rollout.executors import SingleTurnExecutor, encode_prompt
from agentrl.training.supervised import train_sft


def warm_start(cfg: RunConfig, model: Any, tokenizer: Any, model_path: str, env: TextEnv, dev_env: TextEnv,
               log: Any = print) -> dict[str, float]:
    """Supervised warm start on the env's reference answers, cached by content hash."""
    from safetensors.torch import load_file, save_file

    ws = cfg.model.warm_start
    held_out = dev_env is env  # no dev split: dev tasks are held out of the training tasks
    settings = {k: v for k, v in to_dict(ws).items() if k != "enabled"}
    key = hashlib.sha256(json.dumps([model_path, cfg.env.id, cfg.env.kwargs, cfg.env.dev_kwargs, settings, held_out,
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
    if held_out:
        seen = {t.id for t in train_tasks}
        dev_tasks = [t for t in fixed_tasks(env, ws.eval_tasks + ws.examples, cfg.data.seed + 2)
                     if t.id not in seen][:ws.eval_tasks] or dev_tasks
    result = train_sft(model, pairs, tokenizer.pad_token_id, lr=ws.lr, batch_size=ws.batch_size,
                       max_steps=ws.max_steps, eval_every=ws.eval_every, patience=ws.patience,
                       target_accuracy=ws.target_accuracy, seed=cfg.data.seed,
                       dev_accuracy=lambda: evaluate(dev_exec, dev_tasks, dev_exec.params)["accuracy"], log=log)
    summary = {"steps": result.steps, "dev_accuracy": result.best_dev_accuracy, "seconds": result.seconds}
    if ws.cache:
        tmp = cache_tmp(cached)
        tmp.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()
                   if k != "lm_head.weight" or not model.config.tie_word_embeddings},
                  str(tmp / "model.safetensors"))
        (tmp / "result.json").write_text(json.dumps(summary))
        publish(tmp, cached)
    log(f"warm start: {result.steps} steps in {result.seconds:.0f} s, best dev accuracy {result.best_dev_accuracy:.3f}")
    return summary


def reference_problem(env: TextEnv, seed: int, probes: int = 3) -> str | None:
    """Why the env cannot give reference answers for a warm start (None when it can): each of a few
    tasks' ``reference_answer`` must score above 0 through ``env.step``."""
    try:
        for task in fixed_tasks(env, probes, seed):
            env.reset(options={"task": task})
            reward = env.step(env.reference_answer(task))[1]
            if not reward > 0:
                return f"its reference answer scores {reward} on task {task.id!r}"
    except Exception as e:  # noqa: BLE001 - any failure means: no usable reference answers
        return f"reference_answer()/step() raised {type(e).__name__}: {e}"
    return None


def warm_start_decision(cfg: RunConfig, env: TextEnv) -> tuple[bool, str]:
    """(run the warm start?, why) for ``model.warm_start.enabled`` true, false or null (auto)."""
    enabled = cfg.model.warm_start.enabled
    if enabled is not None:
        return enabled, f"model.warm_start.enabled={str(enabled).lower()}"
    if cfg.model.path != "tiny":
        return False, "model.path is not tiny; set model.warm_start.enabled=true to run it"
    if getattr(env, "max_turns", 1) > 1:
        return False, "multi-turn env; set model.warm_start.enabled=true to run it on the first turn"
    problem = reference_problem(env, cfg.data.seed + 1)
    if problem:
        return False, f"the env gives no usable reference answers ({problem}); define reference_answer(task)"
    return True, "auto: tiny model and an env with reference answers"


def maybe_warm_start(cfg: RunConfig, model: Any, tokenizer: Any, model_path: str, env: TextEnv,
                     make_dev_env: Any, log: Any = print) -> dict[str, float] | None:
    """The warm start if :func:`warm_start_decision` says so (else a one-line note and None).

    ``make_dev_env()`` builds the dev env; when it raises (the env has no dev split) the dev tasks
    are held out of the training tasks instead."""
    run, why = warm_start_decision(cfg, env)
    if not run:
        log(f"warm start: off ({why})")
        return None
    log(f"warm start: on ({why})")
    try:
        dev_env = make_dev_env()
    except (ValueError, TypeError, KeyError) as e:
        log(f"warm start: env.dev_kwargs={cfg.env.dev_kwargs} gives no dev env ({e}); "
            f"dev tasks are held out of the training tasks")
        dev_env = env
    return warm_start(cfg, model, tokenizer, model_path, env, dev_env, log=log)
