"""The warm start of an RL run: supervised fine-tuning on the env's reference answers until the dev
accuracy stops improving, keeping the best dev weights (never the test split). The result is cached
by a content hash of everything that determines it, so a resumed or repeated run loads it.

A multi-turn env gives a reference policy instead: ``reference_action(self) -> str``, the next action
in the env's current state. The warm start plays episodes with it through the multi-turn executor
(``MultiTurnExecutor.run_scripted``: the token boundaries RL sees) and trains on their actions, the
feedback masked out of the loss as in RL; dev accuracy is the success of greedy episodes.

``model.warm_start.enabled: null`` (the default) turns it on with the tiny model when the env's
reference answers (multi-turn: its reference policy's episodes) score (a randomly initialised tiny
model learns nothing from RL alone); an env without a dev split (``env.dev_kwargs`` raises) gets dev
tasks held out of the training tasks. :func:`maybe_warm_start` says on one line what it did and why."""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from agentrl.config import RunConfig, to_dict
from agentrl.env import TextEnv, fixed_tasks, has_reference_policy, reference_episode
from agentrl.evaluation.metrics import evaluate
from agentrl.models import cache_dir, cache_tmp, publish
from agentrl.rollout.build import make_executor, sampling_params
from agentrl.rollout.engines.hf import HFEngine
from agentrl.rollout.env_pool import clone_env, failure_info
from agentrl.rollout.executors import SingleTurnExecutor, encode_prompt
from agentrl.runs.tracking import heartbeat
from agentrl.training.supervised import SFTResult, train_sft
from agentrl.types import Task


def warm_start(cfg: RunConfig, model: Any, tokenizer: Any, model_path: str, env: TextEnv, dev_env: TextEnv,
               log: Any = print, cached_only: bool = False, max_seconds: float = 0.0,
               run_dir: str | Path | None = None) -> dict[str, float] | None:
    """Supervised warm start on the env's reference answers (multi-turn: its reference policy's
    episodes), cached by content hash. With ``cached_only`` a warm start not in the cache is not run (None).
    ``max_seconds`` (0: none; the run budget's share) stops its training early; one so cut is not cached.
    With a ``run_dir`` its curve is written there as ``warm_start.jsonl`` (:func:`curve_rows`; kept beside the
    cached weights, so a warm start loaded from the cache gives it too)."""
    ws = cfg.model.warm_start
    held_out = dev_env is env  # no dev split: dev tasks are held out of the training tasks
    settings = {k: v for k, v in to_dict(ws).items() if k != "enabled"}
    train_tasks = fixed_tasks(env, ws.examples, cfg.data.seed + 1)
    key = hashlib.sha256(json.dumps([model_path, cfg.env.id, cfg.env.kwargs, cfg.env.dev_kwargs, settings, held_out,
                                     cfg.rollout.chat_template, cfg.rollout.max_new_tokens, cfg.data.seed,
                                     *multi_turn_key(cfg, env), examples_digest(env, train_tasks)],
                                    sort_keys=True, default=str).encode()).hexdigest()[:16]
    cached = cache_dir() / "warmstart" / key
    if ws.cache and (cached / "model.safetensors").exists():
        return load_cached(cached, model, run_dir, log)
    if cached_only:
        log("warm start: none cached for this config (agentrl train makes it; --warm-start here)")
        return None
    began = time.monotonic()
    engine = HFEngine(model, tokenizer)
    examples = reference_examples(cfg, env, engine, tokenizer, train_tasks, log)
    dev_exec = (make_executor(cfg, dev_env, engine, tokenizer) if getattr(env, "max_turns", 1) > 1  # as RL runs it
                else SingleTurnExecutor(dev_env, engine, tokenizer, sampling_params(cfg, True),
                                        chat_template=cfg.rollout.chat_template))
    dev_tasks = (held_out_dev_tasks(env, train_tasks, ws.eval_tasks, cfg.data.seed + 2, log) if held_out
                 else fixed_tasks(dev_env, ws.eval_tasks, cfg.data.seed + 2))
    result = train_sft(model, examples, tokenizer.pad_token_id, lr=ws.lr, batch_size=ws.batch_size,
                       max_steps=ws.max_steps, eval_every=ws.eval_every, patience=ws.patience,
                       target_accuracy=ws.target_accuracy, min_accuracy=ws.min_accuracy, seed=cfg.data.seed,
                       dev_accuracy=lambda: dev_evaluation(dev_exec, dev_tasks, cfg, log),
                       log=log, max_seconds=max_seconds and max(1e-3, max_seconds - (time.monotonic() - began)))
    summary = {"steps": result.steps, "dev_accuracy": result.best_dev_accuracy, "seconds": result.seconds}
    curve = "".join(json.dumps(row) + "\n" for row in curve_rows(result))
    if run_dir is not None:
        write_curve(Path(run_dir), curve)
    if result.out_of_time:
        log(f"warm start: stopped by the run budget after {result.seconds:.0f} s (run.max_seconds x "
            f"run.warm_start_share); not cached, so a run with more time trains it further")
    elif ws.cache:
        save_cached(cached, model, summary, curve)
    log(f"warm start: {result.steps} steps in {result.seconds:.0f} s, best dev accuracy {result.best_dev_accuracy:.3f}")
    if result.best_dev_accuracy < ws.min_accuracy:
        log(f"warm start: stopped early: no dev accuracy of model.warm_start.min_accuracy={ws.min_accuracy:g} in "
            f"{len(result.history)} evaluations (the model does not learn the reference answers in this budget); "
            f"RL starts from these weights (model.warm_start.enabled=false skips the warm start)")
    return summary


def load_cached(cached: Path, model: Any, run_dir: str | Path | None, log: Any = print) -> dict[str, float]:
    """The cached warm start ``cached`` loaded into ``model``; its curve copied to ``run_dir`` (when given)."""
    from safetensors.torch import load_file

    model.load_state_dict(load_file(str(cached / "model.safetensors")), strict=False)
    log(f"warm start: loaded from cache {cached}")
    if run_dir is not None and (cached / CURVE_FILE).is_file():
        write_curve(Path(run_dir), (cached / CURVE_FILE).read_text(encoding="utf-8"))
    elif run_dir is not None:
        log(f"warm start: this cache entry was made before warm starts kept their curve: no {CURVE_FILE}")
    return json.loads((cached / "result.json").read_text())


def save_cached(cached: Path, model: Any, summary: dict[str, float], curve: str) -> None:
    """Publish the weights of ``model``, its ``summary`` and its ``curve`` (JSON lines) as cache entry ``cached``."""
    from safetensors.torch import save_file

    tmp = cache_tmp(cached)
    tmp.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()
               if k != "lm_head.weight" or not model.config.tie_word_embeddings},
              str(tmp / "model.safetensors"))
    (tmp / "result.json").write_text(json.dumps(summary))
    (tmp / CURVE_FILE).write_text(curve, encoding="utf-8")
    publish(tmp, cached)


CURVE_FILE = "warm_start.jsonl"
"""The warm start's curve in a run directory (and beside its cached weights); ``agentrl view`` draws it."""


def curve_rows(result: SFTResult) -> list[dict[str, float]]:
    """The curve of a warm start, a row per kept step (``SFTResult.curve``, bounded) and per evaluation, by step:
    ``step``, ``loss`` (train), ``seconds`` (since its training began) and, where evaluated, ``dev_accuracy``.
    A NaN loss is written as null."""
    rows: dict[int, dict[str, Any]] = {s: {"step": s, "loss": loss, "seconds": round(sec, 3)}
                                       for s, loss, sec in result.curve}
    for s, loss, acc in result.history:
        rows.setdefault(s, {"step": s, "loss": loss})["dev_accuracy"] = acc
    return [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in rows[s].items()}
            for s in sorted(rows)]


def write_curve(run_dir: Path, text: str) -> None:
    """Write the curve's JSON lines ``text`` to ``run_dir/warm_start.jsonl`` in one rename (a viewer never
    reads half of it)."""
    tmp = run_dir / f".{CURVE_FILE}.tmp{os.getpid()}"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, run_dir / CURVE_FILE)


MIN_HELD_OUT_DEV = 20
"""Fewer tasks than this held out of the training tasks are no dev set: a model that learns its training
tasks fails a handful of unseen ones by chance, and the warm start would stop, saying it does not learn."""


def held_out_dev_tasks(env: TextEnv, train_tasks: list[Task], n: int, seed: int, log: Any = print) -> list[Task]:
    """Dev tasks of an env without a dev split: up to ``n`` tasks held out of ``train_tasks``; with fewer than
    ``MIN_HELD_OUT_DEV`` to hold out (a folder of eleven Harbor tasks), the training tasks, said in one line."""
    seen = {t.id for t in train_tasks}
    rest = [t for t in fixed_tasks(env, n + len(train_tasks), seed) if t.id not in seen][:n]
    if len(rest) >= min(n, MIN_HELD_OUT_DEV):
        return rest
    log(f"warm start: {len(rest)} task(s) besides the {len(train_tasks)} it learns from are too few to hold out; "
        f"dev accuracy is measured on training tasks (it shows the reference is learned, not that it generalises)")
    return train_tasks[:n]


def dev_evaluation(executor: Any, tasks: list[Task], cfg: RunConfig, log: Any = print) -> float:
    """Greedy accuracy on the dev ``tasks``, saying where it is every ``HEARTBEAT_S`` when that takes long."""
    with heartbeat(f"warm start: evaluating {len(tasks)} dev tasks", getattr(executor, "progress", None), log):
        return evaluate(executor, tasks, sampling_params(cfg, True))["accuracy"]


DIGEST_TASKS = 1024
"""How many of the warm start's training tasks (evenly spaced) :func:`examples_digest` reads."""


def examples_digest(env: TextEnv, tasks: list[Task]) -> str:
    """A hash of what the warm start learns from: the prompts and reference answers of up to ``DIGEST_TASKS`` of
    its training ``tasks``, evenly spaced, so that a cached warm start is not loaded after the env's tasks or
    references changed under the same config (a new version of the env's code). A task without a usable
    reference answer (a multi-turn reference policy alone) adds its prompt."""
    digest = hashlib.sha256()
    for task in tasks[::max(1, -(-len(tasks) // DIGEST_TASKS))]:  # a stride rounded up: at most DIGEST_TASKS
        try:
            answer = env.reference_answer(task)
        except Exception:  # noqa: BLE001 - the reference policy decides its episodes: the prompt stands for it
            answer = ""
        digest.update(json.dumps([task.id, task.prompt, answer], default=str).encode())
    return digest.hexdigest()[:16]


def multi_turn_key(cfg: RunConfig, env: TextEnv) -> list[Any]:
    """What else decides a multi-turn warm start (nothing for a single-turn env)."""
    turns = int(getattr(env, "max_turns", 1))
    return [] if turns <= 1 else [turns, cfg.rollout.max_total_tokens, has_reference_policy(env)]


def reference_examples(cfg: RunConfig, env: TextEnv, engine: Any, tokenizer: Any, tasks: list[Task],
                       log: Any = print) -> list[Any]:
    """What the warm start learns from. Single-turn: (prompt ids, reference answer ids + EOS) pairs.
    Multi-turn with a reference policy: its episodes, rolled out by the executor RL uses, so that actions
    and feedback have the token boundaries RL will see (feedback masked out of the loss); failed episodes
    are left out. When the first ``model.warm_start.check_episodes`` of them each end in one turn whose
    action is exactly the env's reference answer (same prompt and action tokens), the rest are built as
    (prompt, reference answer) pairs without being played. Multi-turn without one: the first turn's
    reference answer."""
    executor = make_executor(cfg, env, engine, tokenizer) if getattr(env, "max_turns", 1) > 1 else None
    if has_reference_policy(env) and hasattr(executor, "run_scripted"):
        check = max(1, cfg.model.warm_start.check_episodes)
        episodes = executor.run_scripted(tasks[:check], lambda e: e.reference_action(), seed=cfg.data.seed)
        if all(t.info.get("failed") for t in episodes):
            raise RuntimeError(f"every reference episode failed, e.g. {episodes[0].info.get('error')}")
        rest = tasks[check:]
        pairs = one_turn_pairs(cfg, env, tokenizer, tasks[:check], episodes) if rest else None
        if pairs is None:  # the reference policy needs playing: every episode is
            with heartbeat(f"warm start: playing {len(rest)} more reference episodes", None, log):
                episodes += executor.run_scripted(rest, lambda e: e.reference_action(), first_group=check,
                                                  seed=cfg.data.seed)
        kept = [t for t in episodes if not t.info.get("failed")]
        turns = sum(t.info.get("turns", 0) for t in kept) / len(kept)
        log(f"warm start: {len(kept)} reference episodes ({turns:.1f} turns on average, mean return "
            f"{sum(t.reward for t in kept) / len(kept):.2f})")
        if pairs is None:
            return kept
        read = [answer_pair(cfg, env, tokenizer, t) for t in rest]
        short = [p for p in read if len(p[1]) <= cfg.rollout.max_new_tokens]
        fit = [p for p in short if executor.context.fits(len(p[0]), 0)]  # as a played episode's first turn
        log(f"warm start: each ended in one turn with the env's reference answer, so {len(fit)} more examples are "
            f"its reference answers, not played ({len(read) - len(short)} longer than rollout.max_new_tokens, "
            f"{len(short) - len(fit)} with a prompt that leaves no room for a turn left out)")
        return pairs + fit
    if getattr(env, "max_turns", 1) > 1:
        log("warm start: the env has no reference policy (reference_action); learning the first turn only")
    return [answer_pair(cfg, env, tokenizer, t) for t in tasks]


def answer_pair(cfg: RunConfig, env: TextEnv, tokenizer: Any, task: Task) -> tuple[list[int], list[int]]:
    """(prompt ids, reference answer ids + EOS) of ``task``."""
    answer = tokenizer(env.reference_answer(task), add_special_tokens=False)["input_ids"]
    return encode_prompt(tokenizer, task.prompt, cfg.rollout.chat_template), answer + [tokenizer.eos_token_id]


def one_turn_pairs(cfg: RunConfig, env: TextEnv, tokenizer: Any, tasks: list[Task], episodes: list[Any]
                   ) -> list[tuple[list[int], list[int]]] | None:
    """The played reference ``episodes`` of ``tasks`` as (prompt, action) pairs when every one succeeded in
    one turn whose tokens are its task's :func:`answer_pair` (else None: the reference policy needs playing)."""
    out = []
    for task, ep in zip(tasks, episodes):
        if ep.info.get("failed") or ep.info.get("turns") != 1 or not ep.reward > 0 or ep.resets:
            return None
        try:
            pair = answer_pair(cfg, env, tokenizer, task)
        except Exception:  # noqa: BLE001 - no usable reference_answer: play every episode
            return None
        if ([s.is_action for s in ep.segments] != [True] or list(ep.prompt_ids) != pair[0]
                or list(ep.segments[0].token_ids) != pair[1]):
            return None
        out.append(pair)
    return out


def reference_problem(env: TextEnv, seed: int, probes: int = 3, tokenizer: Any = None,
                      max_new_tokens: int = 0) -> str | None:
    """Why the env cannot give reference answers for a warm start (None when it can): each of a few
    tasks' ``reference_answer`` (multi-turn: its reference policy's episode) must score above 0 and,
    with a ``tokenizer``, fit in ``max_new_tokens`` with its EOS (a longer one could never be finished,
    so no dev task could be solved)."""
    multi = getattr(env, "max_turns", 1) > 1
    probe = clone_env(env) if multi else env  # a reference episode may start tools: they go with the copy
    try:
        for i, task in enumerate(fixed_tasks(env, probes, seed)):
            if multi:
                texts, reward = reference_episode(probe, task, seed=seed + i)
                actions = texts[::2]
            else:
                env.reset(options={"task": task})
                actions = [env.reference_answer(task)]
                reward = env.step(actions[0])[1]
            if not reward > 0:
                what = "reference policy's episode" if multi else "reference answer"
                return f"its {what} scores {reward} on task {task.id!r}"
            if tokenizer is not None and max_new_tokens:
                need = max(len(tokenizer(a, add_special_tokens=False)["input_ids"]) + 1 for a in actions)
                if need > max_new_tokens:
                    return (f"a reference {'action' if multi else 'answer'} of task {task.id!r} takes {need} tokens "
                            f"with its EOS, more than rollout.max_new_tokens={max_new_tokens}")
    except Exception as e:  # noqa: BLE001 - any failure means: no usable reference answers
        where = failure_info(e)["error_at"]
        call = "reference_action()/step()" if multi else "reference_answer()/step()"
        return f"{call} raised {type(e).__name__}: {e}" + (f" at {where}" if where else "")
    finally:
        if probe is not env:
            probe.close()
    return None


def warm_start_decision(cfg: RunConfig, env: TextEnv, tokenizer: Any = None) -> tuple[bool, str]:
    """(run the warm start?, why) for ``model.warm_start.enabled`` true, false or null (auto)."""
    enabled = cfg.model.warm_start.enabled
    if enabled is not None:
        return enabled, f"model.warm_start.enabled={str(enabled).lower()}"
    if cfg.model.path != "tiny":
        return False, "model.path is not tiny; set model.warm_start.enabled=true to run it"
    multi = getattr(env, "max_turns", 1) > 1
    if multi and not has_reference_policy(env):
        return False, ("multi-turn env without a reference policy; define reference_action(self) -> str "
                       "(examples/custom_env/README.md)")
    problem = reference_problem(env, cfg.data.seed + 1, tokenizer=tokenizer, max_new_tokens=cfg.rollout.max_new_tokens)
    if problem:
        fix = "fix reference_action()" if multi else "define reference_answer(task)"
        if "rollout.max_new_tokens" in problem:
            fix = "raise rollout.max_new_tokens or shorten the reference"
        return False, f"the env gives no usable reference answers ({problem}); {fix}"
    return True, ("auto: tiny model and an env with a reference policy (reference_action)" if multi
                  else "auto: tiny model and an env with reference answers")


def maybe_warm_start(cfg: RunConfig, model: Any, tokenizer: Any, model_path: str, env: TextEnv,
                     make_dev_env: Any, log: Any = print, cached_only: bool = False,
                     max_seconds: float = 0.0, run_dir: str | Path | None = None) -> dict[str, float] | None:
    """The warm start if :func:`warm_start_decision` says so (else a one-line note and None); with
    ``cached_only``, only when it is in the cache; its curve goes to ``run_dir`` when given (:func:`warm_start`).

    ``make_dev_env()`` builds the dev env; when it raises (the env has no dev split) the dev tasks
    are held out of the training tasks instead. An env whose episodes run on env servers (``env.remote``)
    warm-starts on its local twin, the ``env.id`` the run builds for its tasks: a server's protocol carries
    no reference policy, and the reference episodes play here."""
    local = getattr(env, "local", None) if getattr(env, "remote_episodes", False) else None
    if local is not None and has_reference_policy(local) and not has_reference_policy(env):
        log(f"warm start: the env's episodes run on env servers, whose protocol has no reference policy; "
            f"its reference episodes play here, on {cfg.env.id} built locally")
        env = local
    run, why = warm_start_decision(cfg, env, tokenizer)
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
    return warm_start(cfg, model, tokenizer, model_path, env, dev_env, log=log, cached_only=cached_only,
                      max_seconds=max_seconds, run_dir=run_dir)
