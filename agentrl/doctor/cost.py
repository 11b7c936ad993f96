"""Check 7, cost: where a step's seconds go, how many tokens it moves, and the memory it plans for.

From the played episodes: seconds per phase (generation: inside the engine's ``generate``; env steps:
the steps that continued an episode; final steps: those that ended one, where a workspace env grades;
env seconds are summed over concurrent steps), tokens per episode (generated, and the longest context),
then per training step (``data.prompts_per_step`` groups of ``rollout.n_samples``): the projected step
time on this machine with this model (the played groups' wall time scaled to the step's groups, plus an
update of ~3 learner forwards per ``learner.ppo_epochs``) and the memory plan of the config's cluster
(``agentrl plan``). Informational: it warns only when the projected step does not fit
``learner.max_seconds``."""

from __future__ import annotations

import statistics
from typing import Any

from agentrl.doctor.report import Check
from agentrl.types import Trajectory


def tokens_per_episode(episodes: list[Trajectory]) -> dict[str, float]:
    """Mean generated tokens, mean tokens of every context, the longest context, over ``episodes``."""
    if not episodes:
        return {}
    generated = [t.num_action_tokens for t in episodes]
    total = [sum(len(p) + sum(len(s.token_ids) for s in segs) for p, segs in t.samples()) for t in episodes]
    longest = [int(t.info.get("context_max") or total[i]) for i, t in enumerate(episodes)]
    return {"generated_mean": statistics.fmean(generated), "tokens_mean": statistics.fmean(total),
            "context_max": max(longest), "turns_mean": statistics.fmean(int(t.info.get("turns") or 1)
                                                                          for t in episodes)}


def memory_plan(cfg: Any, prompt_tokens: int | None = None) -> tuple[dict[str, Any] | None, str]:
    """(the plan's peak GiB per device and its rows, one line) for ``cfg`` (``prompt_tokens``: the longest
    prompt played); None and why when it cannot be made (a hub model out of reach is found at once)."""
    from agentrl.models import check_model_source
    from agentrl.training.memory_plan import GIB, plan_run

    try:
        check_model_source(cfg.model.path)
        plan, source = plan_run(cfg, prompt_tokens=prompt_tokens)
    except Exception as e:  # noqa: BLE001 - e.g. a hub model offline: the rest of the check stands
        return None, f"no memory plan ({type(e).__name__}: {(str(e).splitlines() or [''])[0]})"
    peak = plan.total() / GIB
    rows = [{"component": r.component, "gib": r.bytes / GIB, "where": r.where, "phase": r.phase or "always"}
            for r in plan.rows]
    return ({"device": plan.device, "peak_gib": peak, "source": source, "rows": rows},
            f"memory plan: peak {peak:.2f} GiB per {plan.device}")


def check_cost(played: Any, forward_seconds: float | None, forward_rows: int) -> Check:
    """Check 7 on a :class:`agentrl.doctor.play.Played` (``forward_seconds``: one learner forward over
    ``forward_rows`` rows, from the logprobs check; None when it did not run)."""
    cfg = played.original
    s = played.seconds
    groups = max(1, len(played.tasks))
    step_groups = cfg.data.prompts_per_step
    rollout = s.get("episodes", 0.0) * step_groups / groups
    rows_per_step = step_groups * cfg.rollout.n_samples
    update = (3 * forward_seconds * cfg.learner.ppo_epochs * rows_per_step / max(1, forward_rows)
              if forward_seconds is not None else None)
    tokens = tokens_per_episode([t for t in played.episodes if not t.info.get("failed")])
    prompts = [len(t.prompt_ids) for t in played.episodes]  # by the config's tokenizer unless --model replaced it
    same = played.cfg.model.path == cfg.model.path
    plan, plan_line = memory_plan(cfg, max(prompts) if prompts and same else None)
    details = {"seconds": {k: round(v, 3) for k, v in s.items()},
               "generate_calls": len(played.generate_calls),
               "tokens_generated": sum(n for _, n in played.generate_calls),
               "env_steps": len(played.step_seconds), "tokens_per_episode": tokens,
               "tokens_per_step": {k: v * rows_per_step for k, v in tokens.items() if k.endswith("_mean")},
               "projected_step_seconds": {"rollout": rollout, "update": update,
                                          "total": rollout + (update or 0.0)},
               "step": {"groups": step_groups, "samples": rows_per_step}, "memory_plan": plan}
    total = rollout + (update or 0.0)
    gen, env = s.get("generate", 0.0), s.get("env_steps", 0.0) + s.get("final_steps", 0.0)
    summary = (f"{len(played.episodes)} episodes in {s.get('episodes', 0.0):.1f} s (generate {gen:.1f} s; env steps "
               f"{env:.1f} s over {cfg.rollout.env_workers} workers, {s.get('final_steps', 0.0):.1f} s of them ending "
               f"episodes); "
               f"{tokens.get('generated_mean', 0):.0f} tokens generated per episode; projected step of "
               f"{rows_per_step} samples here: {total:.0f} s; {plan_line}")
    budget = cfg.learner.max_seconds
    if budget and total > budget:
        return Check("cost", "warn", summary, f"learner.max_seconds={budget:g} does not fit one projected step "
                     f"here: fewer prompts_per_step or n_samples, or a faster machine", details)
    return Check("cost", "pass", summary, "", details)
