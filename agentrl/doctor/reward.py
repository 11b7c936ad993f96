"""Check 5, the reward signal: is there a gradient in it, and are zeros the agent's?

On the model's episodes: the reward distribution, the share of groups (``n_samples`` episodes of one
task) whose rewards do not vary (GRPO-style estimators give them no gradient), failed samples by class
(verifier error, timeout, env exception: they leave the batch, and past ``env.max_failure_rate`` the
run stops) against the agent's zeros, and the seconds of the steps that ended an episode (where a
workspace env grades). The reference policy's rewards are the positive control: a reward that is the
same constant for the model and the reference policy does not depend on the answer."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from agentrl.doctor.report import Check
from agentrl.types import Trajectory


def failure_class(info: dict[str, Any]) -> str:
    """``timeout``, ``verifier error`` or ``env exception`` for a failed sample's info."""
    error = str(info.get("error") or "")
    if "Timeout" in error or "deadline" in error:
        return "timeout"
    if error.startswith("EnvFailed") or "verifier" in error.lower() or "grader" in error.lower():
        return "verifier error"
    return "env exception"


def group_spreads(episodes: list[Trajectory]) -> list[float]:
    """The standard deviation of each group's rewards (groups of >= 2 samples that did not fail)."""
    groups: dict[int, list[float]] = {}
    for t in episodes:
        if not t.info.get("failed"):
            groups.setdefault(t.group_id, []).append(t.reward)
    return [statistics.pstdev(r) for r in groups.values() if len(r) >= 2]


def seconds_summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {"n": len(values), "mean": statistics.fmean(values), "p50": statistics.median(values),
            "max": max(values)}


def check_reward(episodes: list[Trajectory], reference_rewards: list[float], final_step_seconds: list[float],
                 max_failure_rate: float) -> Check:
    """Check 5 (``reference_rewards``: the reference answers' and the reference policy's episodes' rewards, []
    without either; NaN for one that could not be scored)."""
    ok = [t for t in episodes if not t.info.get("failed")]
    failed = [t for t in episodes if t.info.get("failed")]
    rewards = [t.reward for t in ok]
    spreads = group_spreads(episodes)
    flat = sum(s == 0 for s in spreads)
    classes = Counter(failure_class(t.info) for t in failed)
    errors = Counter(str(t.info.get("error"))[:160] for t in failed)
    ref = [r for r in reference_rewards if r == r]  # NaN: a reference answer that could not be scored
    details: dict[str, Any] = {
        "episodes": len(episodes), "failed": len(failed), "failed_by_class": dict(classes),
        "errors": dict(errors.most_common(3)), "agent_zeros": sum(r == 0 for r in rewards),
        "reward": {"mean": statistics.fmean(rewards), "std": statistics.pstdev(rewards), "min": min(rewards),
                   "max": max(rewards), "values": {str(k): v for k, v in Counter(rewards).most_common(8)}}
        if rewards else {},
        "groups": len(spreads), "groups_without_variance": flat,
        "reference": {"episodes": len(reference_rewards), "mean": statistics.fmean(ref) if ref else None,
                      "unscorable": len(reference_rewards) - len(ref)},
        "final_step_seconds": seconds_summary(final_step_seconds)}
    rate = len(failed) / len(episodes) if episodes else 0.0
    mean = f"{statistics.fmean(rewards):.3f}" if rewards else "-"
    summary = (f"reward mean {mean} over {len(ok)} episodes, {flat} of {len(spreads)} groups without variance; "
               f"{len(failed)} failed ({_classes(classes)}), {details['agent_zeros']} agent zeros")
    if ref:
        summary += f"; reference policy {statistics.fmean(ref):.3f}"
    if not ok:
        return Check("reward", "fail", summary, f"every episode failed: {next(iter(errors), '')}", details)
    if rate > min(0.1, max_failure_rate):
        return Check("reward", "fail", summary, f"{rate:.0%} of episodes failed (a run stops past "
                     f"env.max_failure_rate={max_failure_rate:g}): {errors.most_common(1)[0][0]}", details)
    constant = len(set(rewards)) == 1
    if constant and ref and set(ref) == set(rewards) and (rewards[0] != 0 or len(ref) >= 2):
        return Check("reward", "fail", summary + f"; the reward is {rewards[0]:g} for every episode, the env's "
                     f"reference answers' too", "the verifier does not depend on the answer (or the reference "
                     "answers are wrong): score a right and a wrong answer by hand", details)
    if constant and rewards[0] > 0 and not ref:
        return Check("reward", "fail", summary + f"; every episode scores {rewards[0]:g}",
                     "the verifier rewards every answer: check it on a wrong one", details)
    if ref and max(ref) <= 0:
        return Check("reward", "warn", summary + "; the reference policy never scores",
                     "the reference policy cannot succeed under this config (budgets? rollout.max_new_tokens?)",
                     details)
    if failed:
        return Check("reward", "warn", summary, f"failed samples leave the batch: {errors.most_common(1)[0][0]}",
                     details)
    if spreads and flat == len(spreads):
        return Check("reward", "warn", summary + "; no group varies: no gradient",
                     "warm-start the model, sample more per task, or use easier tasks", details)
    if spreads and flat / len(spreads) > 0.5:
        return Check("reward", "warn", summary, "most groups carry no gradient: algo.drop_zero_std_groups "
                     "refills them, at the cost of more episodes", details)
    return Check("reward", "pass", summary, "", details)


def _classes(classes: Counter) -> str:
    return ", ".join(f"{n} {k}" for k, n in classes.most_common()) or "none"
