"""``agentrl doctor CONFIG``: the silent failures of an agentic run, found before it spends a GPU-day.

It plays real episodes with the config's env, tokenizer, chat template, tool parser, context policy and
model (``agentrl.doctor.play``), then checks, each ``pass | warn | fail | skip`` with one line of what it
saw and what to change (``agentrl.doctor.report``):

1. ``tokens``: the ids trained on are the chat template's rendering at every turn boundary (tokens.py);
2. ``tools``: the env's parser reads the model's calls (tools.py);
3. ``mask``: tokens trained per role; no feedback or prompt trained, no action masked (mask.py);
4. ``logprobs``: the engine's and the learner's log-probs of the same tokens agree (logprobs.py);
5. ``reward``: the reward varies within groups, failures are not zeros, the verifier is not constant
   (reward.py);
6. ``grader``: a workspace env's grader resists the audit's attacks (grader.py);
7. ``cost``: seconds per phase, tokens per step, the projected step, the memory plan (cost.py).

``agentrl train`` runs the cheap checks (1, 3) on its first batch and ``update`` (update.py: the first update
with a reward signal moves the log-probs the way the rewards say) on its first such update
(``first_step_check``), and stops on a fail. docs/doctor.md has the figures of the shipped configs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentrl.config import RunConfig
from agentrl.doctor.report import Check, Report


def run_doctor(cfg: RunConfig, *, episodes: int = 32, model: str | None = None, audit_tasks: int = 2,
               warm_start: bool = False, config_path: str = "", log: Callable[[str], None] = print) -> Report:
    """Play ``episodes`` episodes of ``cfg`` and run every check (see the module docstring)."""
    from agentrl.doctor.play import play

    start = time.perf_counter()
    log(f"doctor: playing {episodes} episodes of {cfg.env.id} with {model or cfg.model.path} on this machine")
    played = play(cfg, episodes=episodes, model=model, warm_start=warm_start, log=log)
    try:
        checks, seconds = run_checks(played, audit_tasks, log)
    finally:
        try:
            played.env.close()
        except Exception:  # noqa: BLE001 - closing must not hide the report
            pass
    facts = {"config": config_path, "env": cfg.env.id, "model": played.cfg.model.path,
             "engine": type(played.engine).__name__, "episodes": len(played.episodes),
             "tasks": len(played.tasks), "reference_episodes": len(played.reference),
             "warm_start": "loaded" if played.warm_start is not None else "none",
             "seconds": round(time.perf_counter() - start, 1),
             "seconds_by_phase": {k: round(v, 2) for k, v in {**played.seconds, **seconds}.items()}}
    return Report(checks, facts, played.notes)


def run_checks(played: Any, audit_tasks: int, log: Callable[[str], None]) -> tuple[list[Check], dict[str, float]]:
    """Every check on what was played, in order; (the checks, seconds each took)."""
    from agentrl.doctor.cost import check_cost
    from agentrl.doctor.grader import check_grader
    from agentrl.doctor.logprobs import check_logprobs, learner_logprobs, played_dtypes
    from agentrl.doctor.mask import check_mask
    from agentrl.doctor.reward import check_reward
    from agentrl.doctor.tokens import check_tokens
    from agentrl.doctor.tools import check_tools

    env, cfg, seconds = played.env, played.cfg, {}

    def timed(name: str, fn: Callable[[], Any]) -> Any:
        t = time.perf_counter()
        out = fn()
        seconds[f"check_{name}"] = time.perf_counter() - t
        return out

    checks: list[Check] = [
        timed("tokens", lambda: check_tokens(played.episodes + played.reference, played.tokenizer,
                                             chat_template=cfg.rollout.chat_template,
                                             feedback_role=getattr(env, "feedback_role", "user"))),
        timed("tools", lambda: check_tools(played.episodes, played.reference, getattr(env, "tool_parser", None)
                                           or cfg.env.kwargs.get("tool_parser", "hermes"),
                                           bool(getattr(env, "tools", None)), cfg.rollout.max_new_tokens))]
    try:
        exp, learner = timed("forward", lambda: learner_logprobs(played))
    except ValueError:  # every episode failed: nothing to build a batch from
        exp = learner = None
    if exp is None:
        checks.append(Check("mask", "skip", "no batch: every episode failed (the reward check says why)"))
        checks.append(Check("logprobs", "skip", "no batch: every episode failed"))
    else:
        checks.append(timed("mask", lambda: check_mask(played.episodes, exp)))
        engine, learner_dtype = played_dtypes(played)
        checks.append(check_logprobs(exp, learner, engine_dtype=engine, learner_dtype=learner_dtype))
    ref = played.reference_rewards + [e.reward for e in played.reference if not e.info.get("failed")]
    final = [s for s, ended in played.step_seconds if ended]
    checks.append(check_reward(played.episodes, ref, final, cfg.env.max_failure_rate))
    if callable(getattr(env, "audit_task", None)) and audit_tasks:
        log(f"doctor: attacking the grader on {min(audit_tasks, len(played.tasks))} tasks")
    checks.append(timed("grader", lambda: check_grader(env, played.tasks, n=audit_tasks)))
    forward = seconds.get("check_forward") if exp is not None else None
    checks.append(timed("cost", lambda: check_cost(played, forward, len(exp) if exp is not None else 0)))
    return checks, seconds


__all__ = ["Check", "Report", "run_doctor"]
