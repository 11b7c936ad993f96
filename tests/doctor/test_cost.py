"""The cost check's figures by hand: tokens per episode and per step, the projected step, the budget warning."""

from __future__ import annotations

from types import SimpleNamespace

from agentrl.config import load_config
from agentrl.doctor.cost import check_cost, tokens_per_episode
from agentrl.types import ContextReset, Segment, Trajectory


def episode(prompt: int, actions: list[int], feedback: list[int], **info) -> Trajectory:
    segs = []
    for a, f in zip(actions, feedback + [0]):
        segs.append(Segment([1] * a, True, [0.0] * a))
        if f:
            segs.append(Segment([2] * f, False))
    return Trajectory([0] * prompt, segs, 0.0, "t", 0, info={"turns": len(actions), **info})


def test_tokens_per_episode_counts_every_context() -> None:
    a = episode(10, [3, 5], [4], context_max=22)
    b = episode(6, [2], [])
    b.resets.append(ContextReset("truncate", [0] * 7, [Segment([1] * 4, True, [0.0] * 4)]))
    t = tokens_per_episode([a, b])
    assert t == {"generated_mean": (8 + 6) / 2, "tokens_mean": (22 + (8 + 11)) / 2, "context_max": 22,
                 "turns_mean": 1.5}
    assert tokens_per_episode([]) == {}


def played(seconds: dict, episodes: list, tasks: int, cfg_overrides: list[str]) -> SimpleNamespace:
    cfg = load_config(None, ["model.path=no/such-model", *cfg_overrides])
    return SimpleNamespace(original=cfg, cfg=cfg, seconds=seconds, tasks=[None] * tasks, episodes=episodes,
                           generate_calls=[(1.0, 40)], step_seconds=[(0.5, True)])


def test_the_projected_step_scales_the_played_groups_and_adds_the_update() -> None:
    eps = [episode(10, [4], []) for _ in range(8)]
    p = played({"episodes": 2.0, "generate": 1.5, "env_steps": 0.2, "final_steps": 0.5}, eps, 2,
               ["data.prompts_per_step=6", "rollout.n_samples=4", "learner.ppo_epochs=2"])
    c = check_cost(p, forward_seconds=0.1, forward_rows=8)
    step = c.details["projected_step_seconds"]
    assert step["rollout"] == 2.0 * 6 / 2  # 2 groups played in 2 s -> 6 groups
    assert abs(step["update"] - 3 * 0.1 * 2 * 24 / 8) < 1e-12  # 3 forwards per epoch, 24 rows per step
    assert c.details["step"] == {"groups": 6, "samples": 24}
    assert c.details["tokens_per_step"]["generated_mean"] == 4 * 24
    assert c.status == "pass" and "projected step of 24 samples here: 8 s" in c.summary
    assert c.details["memory_plan"] is None and "no memory plan" in c.summary  # a model that is not there
    slow = played({"episodes": 2.0}, eps, 2, ["data.prompts_per_step=6", "learner.max_seconds=5"])
    assert check_cost(slow, None, 0).status == "warn"  # 6 s of rollout does not fit 5 s
