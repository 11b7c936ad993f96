"""What the doctor plays: the config's env, tokenizer, chat template, tool parser, context policy and model
(or ``--model`` instead), wired as ``agentrl train`` wires them, on this machine.

What cannot run here is replaced and said in ``notes``: ``cluster.mode: ray`` and ``rollout.async`` play in
one process, the vLLM engine becomes hf without a GPU, a CUDA device becomes the CPU (float32). The model's
episodes are ``n_samples`` per task, as a training step draws them; the env's reference policy (or its
reference answers) plays the same tasks once each, a positive control for the reward and tool checks.
Every ``generate`` and every env step is timed (the cost check)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrl.config import RunConfig
from agentrl.env import TextEnv, fixed_tasks, has_reference_policy
from agentrl.rollout.env_pool import EnvPool, Pending
from agentrl.types import Task, Trajectory


@dataclass
class Played:
    """The episodes the doctor played and what played them."""

    cfg: RunConfig  # as played here (after the replacements in ``notes``)
    original: RunConfig  # as given (the cost check plans for its cluster)
    env: TextEnv
    tokenizer: Any
    model: Any  # the learner's policy (a torch module; peft with learner.lora)
    engine: Any  # the rollout engine the episodes came from
    executor: Any
    tasks: list[Task]
    episodes: list[Trajectory]  # the model's: n_samples per task, group_id per task
    reference: list[Trajectory] = field(default_factory=list)  # the reference policy's (multi-turn), one per task
    reference_rewards: list[float] = field(default_factory=list)  # each task's reference answer, scored at once
    seconds: dict[str, float] = field(default_factory=dict)  # generate, env_steps, final_steps, episodes, ...
    step_seconds: list[tuple[float, bool]] = field(default_factory=list)  # each env step: seconds, ended the episode
    generate_calls: list[tuple[float, int]] = field(default_factory=list)  # each generate: seconds, tokens out
    notes: list[str] = field(default_factory=list)
    warm_start: dict[str, float] | None = None

    @property
    def multi_turn(self) -> bool:
        return hasattr(self.executor, "run_scripted")


class TimedEngine:
    """An engine whose ``generate`` calls are timed (every other attribute is the engine's)."""

    def __init__(self, engine: Any, calls: list[tuple[float, int]]) -> None:
        self.engine, self.calls = engine, calls

    def generate(self, prompts: list[list[int]], params: Any) -> list[Any]:
        start = time.perf_counter()
        out = self.engine.generate(prompts, params)
        self.calls.append((time.perf_counter() - start, sum(len(c.token_ids) for c in out)))
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


class TimedPool(EnvPool):
    """An env pool that times every call it runs (``steps``: seconds, whether the step ended its episode)."""

    def __init__(self, workers: int, timeout_s: float, steps: list[tuple[float, bool]]) -> None:
        super().__init__(workers=workers, timeout_s=timeout_s)
        self.steps, self._lock = steps, threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Pending:
        return super().submit(self._timed(fn), *args)

    def _timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        import inspect

        if inspect.iscoroutinefunction(fn):
            async def timed_async(*a: Any) -> Any:
                start = time.perf_counter()
                out = await fn(*a)
                self._record(time.perf_counter() - start, out)
                return out
            return timed_async

        def timed(*a: Any) -> Any:
            start = time.perf_counter()
            out = fn(*a)
            self._record(time.perf_counter() - start, out)
            return out
        return timed

    def _record(self, seconds: float, out: Any) -> None:
        ended = isinstance(out, tuple) and len(out) == 5 and bool(out[2] or out[3])
        with self._lock:
            self.steps.append((seconds, ended))


def runnable_here(cfg: RunConfig, model: str | None) -> tuple[RunConfig, list[str]]:
    """``cfg`` as this machine can play it (``model`` in place of ``model.path``) and what was changed."""
    from dataclasses import replace

    import torch

    notes, m, r, gpu = [], cfg.model, cfg.rollout, torch.cuda.is_available()
    if model:
        notes.append(f"model {model} in place of {m.path} (--model)")
        m = replace(m, path=model)
    if m.device == "cuda" and not gpu:
        notes.append("model.device cuda -> cpu (no GPU here)")
        m = replace(m, device="cpu")
    if not gpu and m.dtype in ("bfloat16", "float16"):
        notes.append(f"model.dtype {m.dtype} -> float32 on the CPU")
        m = replace(m, dtype="float32")
    if r.engine == "vllm" and not gpu:
        notes.append("rollout.engine vllm -> hf (no GPU here): the logprobs check compares hf with the learner")
        r = replace(r, engine="hf")
    if r.async_:
        notes.append("rollout.async -> off: the episodes are played inline")
        r = replace(r, async_=False)
    c = cfg.cluster
    if c.mode != "local":
        notes.append(f"cluster.mode {c.mode} -> local: played in one process (the cost check plans for the "
                     f"{c.mode} cluster)")
        c = replace(c, mode="local")
    return replace(cfg, model=m, rollout=r, cluster=c), notes


def play(cfg: RunConfig, episodes: int = 32, model: str | None = None, warm_start: bool = False,
         log: Callable[[str], None] = print) -> Played:
    """Build the run's components as the trainer does and play ``episodes`` episodes (rounded up to whole
    groups of ``rollout.n_samples``), then the reference policy on the same tasks. ``warm_start``: run the
    config's warm start when it is not cached (a cached one is always loaded: RL starts from it)."""
    from agentrl.models import load_policy
    from agentrl.rollout.build import make_engine, make_env, make_executor, resolve_model_path
    from agentrl.training.lora import apply_lora
    from agentrl.training.tasks import seed_everything
    from agentrl.training.warm_start import maybe_warm_start, warm_start_decision

    original, loading = cfg, time.perf_counter()
    cfg, notes = runnable_here(cfg, model)
    seed_everything(cfg.data.seed)
    env = make_env(cfg)
    model_path = resolve_model_path(cfg, env)
    policy, tokenizer = load_policy(cfg, model_path)
    warm = maybe_warm_start(cfg, policy, tokenizer, model_path, env, lambda: make_env(cfg, cfg.env.dev_kwargs),
                            log=log, cached_only=not warm_start)
    if warm is None and not warm_start and warm_start_decision(cfg, env, tokenizer)[0]:
        notes.append("the config warm-starts the model but no warm start is cached here: the episodes are the "
                     "model's before it (--warm-start runs it; agentrl train caches it)")
    policy = apply_lora(policy, cfg.learner.lora)
    played = Played(cfg, original, env, tokenizer, policy, None, None, [], [], notes=notes, warm_start=warm)
    played.engine = make_engine(cfg, policy, tokenizer, model_path)
    played.executor = make_executor(cfg, env, TimedEngine(played.engine, played.generate_calls), tokenizer)
    old = getattr(played.executor, "pool", None)
    if isinstance(old, EnvPool):  # a black-box agent's executor runs its own program: its steps are not timed
        played.executor.pool = TimedPool(cfg.rollout.env_workers, cfg.env.step_timeout_s, played.step_seconds)
        old.close()
    if hasattr(played.executor, "keep_observations"):
        played.executor.keep_observations = True
    played.seconds["load"] = time.perf_counter() - loading
    n = cfg.rollout.n_samples
    played.tasks = fixed_tasks(env, max(1, math.ceil(episodes / n)), cfg.data.seed)
    start = time.perf_counter()
    played.episodes = played.executor.run(played.tasks)
    played.seconds["episodes"] = time.perf_counter() - start
    played.seconds["generate"] = sum(s for s, _ in played.generate_calls)
    played.seconds["env_steps"] = sum(s for s, ended in played.step_seconds if not ended)
    played.seconds["final_steps"] = sum(s for s, ended in played.step_seconds if ended)
    start = time.perf_counter()
    play_reference(played)
    played.seconds["reference"] = time.perf_counter() - start
    return played


def play_reference(played: Played) -> None:
    """The env's reference on the played tasks: each task's reference answer scored by ``env.step`` at once
    (``reference_rewards``), and with a multi-turn reference policy its episodes through the executor
    (``reference``: the format and token boundaries RL will see). Nothing an env does not give."""
    env = played.env
    if played.multi_turn and has_reference_policy(env):
        played.reference = played.executor.run_scripted(played.tasks, lambda e: e.reference_action())
    from agentrl.rollout.env_pool import clone_env

    for task in played.tasks:
        try:
            answer = env.reference_answer(task)
        except (NotImplementedError, AttributeError):
            return
        scorer = clone_env(env)
        try:
            scorer.reset(options={"task": task})
            out = scorer.step(answer)
            if hasattr(out, "__await__"):
                import asyncio

                out = asyncio.run(out)
            played.reference_rewards.append(float("nan") if out[4].get("failed") else float(out[1]))
        except Exception:  # noqa: BLE001 - a reference answer that cannot be scored is the reward check's finding
            played.reference_rewards.append(float("nan"))
        finally:
            scorer.close()
