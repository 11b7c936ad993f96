"""Dynamic sampling (refill to informative groups, never dropping accepted ones) and the overlong penalty."""

import pytest

from agentrl.config import load_config
from agentrl.rollout.dynamic_sampling import (
    apply_overlong_penalty,
    fill_batch,
    informative,
    num_groups,
    overlong_penalty,
)
from agentrl.types import Segment, Trajectory


def _traj(group: int, reward: float, length: int = 3) -> Trajectory:
    return Trajectory(prompt_ids=[1], segments=[Segment([5] * length, True, [0.0] * length)], reward=reward,
                      task_id=f"t{group}", group_id=group)


def _groups(spec: list[tuple[int, list[float]]]) -> list[Trajectory]:
    return [_traj(g, r) for g, rewards in spec for r in rewards]


class Source:
    """Rollouts of scripted groups: each draw(k) takes the next k groups; empty when it runs out."""

    def __init__(self, groups: list[list[float]], first_id: int = 100):
        self.groups, self.next_id, self.asked = list(groups), first_id, []

    def draw(self, k: int) -> list[Trajectory]:
        self.asked.append(k)
        take, self.groups = self.groups[:k], self.groups[k:]
        out = _groups([(self.next_id + i, r) for i, r in enumerate(take)])
        self.next_id += k
        return out


def test_informative_keeps_groups_with_reward_spread():
    trajs = _groups([(0, [1, 1]), (1, [0, 1]), (2, [0, 0])])
    assert [t.group_id for t in informative(trajs)] == [1, 1]


def test_refill_until_the_batch_is_full():
    first = _groups([(0, [1, 1]), (1, [0, 1]), (2, [0, 0]), (3, [1, 0])])  # 2 of 4 informative
    src = Source([[0, 0], [0, 1], [1, 1], [1, 0], [0, 1]])
    kept, generated, rounds = fill_batch(first, src.draw, target_groups=4, max_rounds=5)
    assert num_groups(kept) == 4 and rounds == 3
    assert src.asked == [2, 1, 1]  # exactly the missing groups each round: never more than the target
    assert [t.group_id for t in kept] == [1, 1, 3, 3, 101, 101, 103, 103]  # accepted groups, in order
    assert len(generated) == 8 + 4 + 2 + 2


def test_accepted_groups_survive_when_the_data_runs_out_or_the_cap_is_hit():
    first = _groups([(0, [0, 1]), (1, [0, 0])])
    src = Source([[1, 0], [0, 0]])  # only one more informative group exists
    kept, _, rounds = fill_batch(first, src.draw, target_groups=4, max_rounds=10)
    assert num_groups(kept) == 2 and {t.group_id for t in kept} == {0, 100}  # nothing accepted is lost
    assert src.asked == [3, 2] and rounds == 1  # stopped when the source was empty
    kept, _, rounds = fill_batch(first, Source([[0, 0]] * 10).draw, target_groups=4, max_rounds=3)
    assert rounds == 3 and {t.group_id for t in kept} == {0}
    kept, _, rounds = fill_batch(first, Source([]).draw, target_groups=4, max_rounds=0)
    assert rounds == 0 and {t.group_id for t in kept} == {0}


@pytest.mark.parametrize("length,want", [(0, 0.0), (12, 0.0), (13, -0.25), (14, -0.5), (16, -1.0), (20, -1.0)])
def test_overlong_penalty_by_hand(length, want):
    # budget 16, buffer 4: free up to 12 tokens, then -1/4 per token, -1 at the budget
    assert overlong_penalty(length, 16, 4, 1.0) == pytest.approx(want)
    assert overlong_penalty(length, 16, 0, 1.0) == 0.0


def test_overlong_penalty_applies_to_rewards():
    trajs = [_traj(0, 1.0, length=10), _traj(0, 1.0, length=16)]
    apply_overlong_penalty(trajs, max_tokens=16, buffer=8, penalty=0.5)
    assert [t.reward for t in trajs] == [pytest.approx(1 - 0.5 * 2 / 8), pytest.approx(0.5)]
    assert trajs[1].info["overlong_penalty"] == pytest.approx(-0.5)


def test_trainer_refills_and_penalises(tmp_path):
    from agentrl.training.trainer import Trainer

    cfg = load_config(None, ["env.kwargs={digits: 2, template: '{expr}=', bare_answer: true}",
                             "data.prompts_per_step=2", "rollout.n_samples=2", "rollout.max_new_tokens=4",
                             "data.eval_tasks=2", "log.progress=false", "log.tensorboard=false",
                             "algo.drop_zero_std_groups=true", "algo.max_refill_rounds=2",
                             "algo.overlong_buffer=2", "learner.total_steps=1", "model.warm_start.enabled=false"])
    trainer = Trainer(cfg, run_dir=tmp_path)
    metrics = trainer.step()
    assert metrics["dynamic/refill_rounds"] <= 2
    drawn = trainer.tasks.drawn
    assert drawn >= 2 and (metrics["dynamic/refill_rounds"] == 0 or drawn > 2)
    assert metrics["reward/mean"] < 0  # the untrained model runs into the budget: penalised


def test_compaction_summaries_are_not_turns_for_the_overlong_penalty():
    """A 22-turn episode with turns of at most 3 of 4 tokens and two 8-token summaries (their own budget):
    no turn is overlong, so no penalty (issue 43: the summaries were charged, reward 1.0 -> 0.0)."""
    from agentrl.types import ContextReset

    def turns(n: int) -> list[Segment]:
        return [s for _ in range(n) for s in (Segment([5, 5, 5], True, [0.0] * 3), Segment([9], False))]

    summary = Segment([7] * 8, True, [0.0] * 8)
    t = Trajectory(prompt_ids=[1], segments=turns(8) + [summary], reward=1.0, task_id="t", group_id=0,
                   resets=[ContextReset("compact", [1, 7], turns(7) + [summary]), ContextReset("compact", [1, 7], turns(7))],
                   info={"summaries": ["s1", "s2"]})
    apply_overlong_penalty([t], max_tokens=4, buffer=1, penalty=1.0)
    assert t.reward == 1.0 and t.info["overlong_penalty"] == 0.0
    t.resets[-1].segments.append(Segment([5] * 4, True, [0.0] * 4))  # one turn at the budget: penalised
    t.reward = 1.0
    apply_overlong_penalty([t], max_tokens=4, buffer=1, penalty=1.0)
    assert t.reward == pytest.approx(0.0)


def test_a_summary_that_ended_the_episode_is_not_a_turn_either():
    summary = Segment([7] * 8, True, [0.0] * 8)
    t = Trajectory(prompt_ids=[1], segments=[Segment([5, 5], True, [0.0] * 2), Segment([9], False), summary],
                   reward=1.0, task_id="t", group_id=0, info={"summaries": ["s"], "end_reason": "context_full"})
    apply_overlong_penalty([t], max_tokens=4, buffer=1, penalty=1.0)
    assert t.info["overlong_penalty"] == 0.0
