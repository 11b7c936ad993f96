"""Off-policy guidance (``algo.guide``, agentrl.training.guidance): which groups get the env's reference
episode, what it replaces, what the step reports, and a real trainer step on a single-turn and a multi-turn env
whose tiny random policy fails every task."""

from __future__ import annotations

import pytest
import torch

from agentrl.config import ConfigError, load_config
from agentrl.rollout.engines.base import SamplingParams
from agentrl.training.guidance import (
    AnswerEngine,
    failed_groups,
    guide,
    guide_metrics,
    guided_rows,
    reported,
)
from agentrl.types import Segment, Task, Trajectory


def _traj(task: str, group: int, reward: float, **info) -> Trajectory:
    return Trajectory(prompt_ids=[1, 2], segments=[Segment([3, 4], True, [-0.5, -0.5])], reward=reward,
                      task_id=task, group_id=group, info=dict(info))


def _batch() -> list[Trajectory]:
    """Groups: 0 all fail, 1 one success, 2 partial credit only, 3 a fail and an infrastructure failure,
    4 a single sample, 5 every sample at or above 1."""
    return [_traj("a", 0, 0.0), _traj("a", 0, 0.0), _traj("a", 0, 0.0),
            _traj("b", 1, 0.0), _traj("b", 1, 1.0),
            _traj("c", 2, 0.2), _traj("c", 2, 0.5),
            _traj("d", 3, 0.0), _traj("d", 3, 0.0, failed=True), _traj("d", 3, 0.0),
            _traj("e", 4, 0.0),
            _traj("f", 5, 1.0), _traj("f", 5, 1.5)]


def test_failed_groups_by_hand():
    assert failed_groups(_batch()) == {0: [0, 1, 2], 2: [5, 6], 3: [7, 9]}
    assert failed_groups([]) == {}


def test_guide_replaces_the_last_sample_of_each_failed_group_only_with_a_better_reference():
    trajs = _batch()
    tasks = [Task(id=x, prompt=x) for x in "abcdef"]
    asked: list[list[str]] = []
    refs = {"a": 1.0, "c": 0.5, "d": 1.0}  # c's reference is no better than its best sample: not used

    def play(ts: list[Task]) -> list[Trajectory]:
        asked.append([t.id for t in ts])
        return [_traj(t.id, 99, refs[t.id], **({"failed": True} if t.id == "d" else {})) for t in ts]

    out = guide(trajs, tasks, play)
    assert asked == [["a", "c", "d"]]
    assert [i for i, t in enumerate(out) if t is not trajs[i]] == [2]  # d's reference failed: kept out
    new = out[2]
    assert new.group_id == 0 and new.reward == 1.0 and new.info["guided"] and new.info["replaced"] is trajs[2]
    assert guide_metrics(out, play) == {"guide/samples": 1.0, "guide/reward": 1.0}
    assert guide_metrics(out, None) == {}
    assert reported(out) == trajs and "replaced" not in new.info and new.info["guided"]
    assert guide(trajs[3:5], tasks, play) == trajs[3:5] and len(asked) == 1  # nothing failed: nothing played


def test_a_group_whose_task_is_not_given_is_left_alone():
    trajs = _batch()[:3]
    assert guide(trajs, [Task(id="zzz", prompt="")], lambda ts: pytest.fail("played")) == trajs


def test_answer_engine_cuts_at_the_budget_and_checks_the_prompt_count():
    eng = AnswerEngine([[5, 6, 7, 2], [8, 2]])
    got = eng.generate([[1], [1]], SamplingParams(max_new_tokens=3))
    assert [(c.token_ids, c.logprobs, c.finish_reason) for c in got] == [
        ([5, 6, 7], [0.0] * 3, "length"), ([8, 2], [0.0] * 2, "stop")]
    with pytest.raises(ValueError, match="1 prompts for 2 scripted answers"):
        eng.generate([[1]], SamplingParams())


def test_guided_rows_follow_the_episode_of_each_row():
    trajs = [_traj("a", 0, 0.0), _traj("a", 0, 1.0, guided=True), _traj("b", 1, 0.0)]
    assert guided_rows(trajs, None).tolist() == [1]
    assert guided_rows(trajs, torch.tensor([0, 1, 1, 2])).tolist() == [1, 2]  # episode 1 is two samples


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"algo.guide .*rollout.n_samples is 1"):
        load_config(None, ["algo.guide=true", "rollout.n_samples=1"])
    assert load_config(None, ["algo.guide=true"]).algo.guide is True


SMALL = ["model.warm_start.enabled=false", "data.prompts_per_step=2", "data.eval_tasks=2", "learner.total_steps=1",
         "log.progress=false", "log.tensorboard=false", "checkpoint.save_final=false", "algo.guide=true",
         "algo.drop_zero_std_groups=true", "log.samples_every=1"]


def _step(cfg, tmp_path):
    """One trainer step; returns (trainer, metrics, the batch it trained on, the Experience, the learner's
    log-probs of it before the update, the tasks the guide played)."""
    from agentrl.training.trainer import Trainer

    trainer = Trainer(cfg, run_dir=tmp_path)
    seen: dict = {"played": []}
    produce, update, play = trainer.produce, trainer.update, trainer.guide

    def keep_batch():
        made = produce()
        seen["batch"], seen["generated"] = made.batch, made.generated
        return made

    def keep_update(exp):
        seen["exp"], seen["lp"] = exp, trainer.learner.logprobs(exp)
        return update(exp)

    def keep_played(tasks):
        seen["played"] += tasks
        return play(tasks)

    trainer.produce, trainer.update, trainer.guide = keep_batch, keep_update, keep_played
    trainer.rollouts.close()
    trainer.rollouts = trainer.build_rollouts()
    try:
        metrics = trainer.step()
    finally:
        trainer.rollouts.close()
    generated = seen["generated"]  # what the step reports: the policy's own episodes, the replaced ones included
    assert not any(t.info.get("guided") for t in generated) and len(generated) >= len(seen["batch"])
    assert metrics["reward/mean"] == pytest.approx(sum(t.reward for t in generated) / len(generated))
    return trainer, metrics, seen["batch"], seen["exp"], seen["lp"], seen["played"]


def _check_guided_step(metrics, batch, exp, lp, n):
    guided = [i for i, t in enumerate(batch) if t.info.get("guided")]
    assert guided and metrics["guide/samples"] == len(guided) and metrics["guide/reward"] == 1.0
    assert metrics["reward/mean"] < 1.0  # the policy's own samples, not the reference's
    for i in guided:
        group = [t for t in batch if t.group_id == batch[i].group_id]
        assert len(group) == n and batch[i] is group[-1]
        assert max(t.reward for t in group if t is not batch[i]) < 1.0 and batch[i].reward == 1.0
    rows = guided_rows(batch, exp.episode_ids)
    m = exp.action_mask[rows].bool()
    assert (exp.advantages[rows][m] > 0).all()  # the group's success: the positive advantage on every token
    # its engine log-probs are the learner's own (an off-policy correction weights it 1)
    torch.testing.assert_close(exp.engine_logprobs[rows][m], lp[rows][m], atol=1e-4, rtol=1e-4)
    return guided


def test_a_single_turn_step_learns_from_the_reference_answer_where_the_policy_fails(tmp_path):
    cfg = load_config(None, SMALL + ["env.kwargs={digits: 2, template: '{expr}=', bare_answer: true}",
                                     "rollout.n_samples=3", "rollout.max_new_tokens=6"])
    trainer, metrics, batch, exp, lp, played = _step(cfg, tmp_path)
    guided = _check_guided_step(metrics, batch, exp, lp, 3)
    tok, tasks = trainer.tokenizer, {t.id: t for t in played}
    before = len(played)
    assert trainer.evaluate()["eval/accuracy"] < 1.0 and len(played) == before  # held-out episodes are never guided
    for i in guided:  # the reference answer's tokens and the EOS after the task's prompt, as a sample's are
        t = batch[i]
        want = tok(trainer.env.reference_answer(tasks[t.task_id]), add_special_tokens=False)["input_ids"]
        assert t.segments[0].token_ids == want + [tok.eos_token_id]
        assert t.prompt_ids == next(x for x in batch if x.group_id == t.group_id).prompt_ids


def test_a_multi_turn_step_plays_the_reference_policy_for_the_failed_groups(tmp_path):
    cfg = load_config(None, SMALL + [
        "env.id=agentrl/GuessNumber-v0", "env.kwargs={rounds: 2, guesses: 6, high: 50, feedback: interval}",
        "rollout.n_samples=2", "rollout.max_new_tokens=4"])
    _, metrics, batch, exp, lp, played = _step(cfg, tmp_path)
    guided = _check_guided_step(metrics, batch, exp, lp, 2)
    assert len(played) >= len(guided)
    for i in guided:  # bisection: several turns, each guess then the env's feedback
        assert batch[i].info["turns"] >= 2 and [s.is_action for s in batch[i].segments][:2] == [True, False]
