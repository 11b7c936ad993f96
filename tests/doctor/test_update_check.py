"""The doctor's ``update`` check: hand-computed verdicts, then real first updates of the tiny model through
``Trainer.step`` — a sound one passes and writes its figures to ``doctor.json``; the same run with the
advantages' sign flipped, or with the batch's rewards inverted (the bug classes it exists for), stops after
its first update, in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from agentrl.doctor import update
from agentrl.doctor.first_step import DoctorFailed, first_step_check
from agentrl.doctor.update import check_update
from agentrl.env import TextEnv
from agentrl.types import Task

MASK = torch.tensor([[1.0, 1.0, 0.0]] * 4)
R, G = torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.tensor([0, 0, 0, 0])


def test_verdicts_by_hand() -> None:
    before = torch.zeros(4, 3)
    after = torch.tensor([[0.1, 0.2, 9.0], [0.0, 0.1, 9.0], [-1.0, -0.5, 9.0], [-2.0, 0.0, 9.0]])  # col 2 masked
    c = check_update(R, G, MASK, before, after)
    assert c.status == "pass" and c.details["better"] == 2 and c.details["worse"] == 2
    assert c.details["mean_change_better"] == pytest.approx(0.2)  # (0.3 + 0.1) / 2
    assert c.details["mean_change_worse"] == pytest.approx(-1.75)  # (-1.5 - 2.0) / 2
    assert c.details["correlation"] > 0.8 and "+0.2 nats" in c.summary
    reversed_ = check_update(R, G, MASK, before, -after)
    assert reversed_.status == "warn" and "do not follow" in reversed_.advice  # 4 samples: too few to fail
    big = lambda t: t.repeat(2, *([1] * (t.dim() - 1)))  # noqa: E731 - the same batch twice: 8 samples
    failed = check_update(big(R), big(G), big(MASK), big(before), -big(after))
    assert failed.status == "fail" and "sign error" in failed.advice and failed.details["correlation"] < -0.8
    assert failed.details["t"] < -3.5
    gen = torch.Generator().manual_seed(0)  # noise: 64 samples whose changes are unrelated to their rewards
    r64, g64, m64 = torch.randint(0, 2, (64,), generator=gen).double(), torch.arange(64) // 8, torch.ones(64, 3)
    noisy = [check_update(r64, g64, m64, torch.zeros(64, 3), torch.randn(64, 3, generator=gen) * 1e-3).status
             for _ in range(200)]
    assert "fail" not in noisy and noisy.count("pass") > 50  # a chance correlation never stops a run
    still = check_update(R, G, MASK, before, before + 1e-9)
    assert still.status == "warn" and "unchanged" in still.summary
    assert check_update(torch.ones(4), G, MASK, before, after).status == "skip"  # all rewards equal
    assert check_update(R, torch.arange(4), MASK, before, after).status == "skip"  # groups of one: no baseline
    assert check_update(R, G, torch.zeros(4, 3), before, after).status == "skip"  # nothing generated: no NaN


def test_rewards_are_compared_within_their_group() -> None:
    """Group 0 scores 5 and 4, group 1 scores 1 and 0: the 4 and the 1 are their groups' better samples."""
    r, g = torch.tensor([5.0, 4.0, 1.0, 0.0]), torch.tensor([7, 7, 3, 3])
    assert update.centred_rewards(r, g).tolist() == [0.5, -0.5, 0.5, -0.5]
    after = torch.tensor([[0.2, 0.0, 0.0], [-0.2, 0.0, 0.0], [0.1, 0.0, 0.0], [-0.3, 0.0, 0.0]])
    c = check_update(r, g, MASK, torch.zeros(4, 3), after)
    assert c.status == "pass" and c.details["mean_change_better"] == pytest.approx(0.15)
    assert update.has_signal(r, g) and not update.has_signal(torch.ones(4), g)
    assert not update.has_signal(r, torch.arange(4)) and not update.has_signal(torch.ones(0), torch.ones(0))


class ParityEnv(TextEnv):
    """Single-turn: reward 1 when the reply has an even number of characters (an untrained model gets both)."""

    def __init__(self, split: str = "train") -> None:
        super().__init__()
        self.split = split

    def sample_task(self, rng: np.random.Generator) -> Task:
        n = int(rng.integers(0, 10_000))
        return Task(id=f"p{n}", prompt=f"Say something ({n}).", answer="")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "", float(len(action) % 2 == 0), True, False, {}

    def reference_answer(self, task: Task) -> str:
        return "ok"


def trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    from agentrl.config import load_config
    from agentrl.training.trainer import Trainer

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    cfg = load_config(None, ["env.id=test_update_check:ParityEnv", "model.path=tiny", "model.warm_start.enabled=false",
                             "data.prompts_per_step=8", "rollout.n_samples=4", "rollout.max_new_tokens=8",
                             "data.eval_tasks=2", "learner.lr=1e-3", "learner.total_steps=1", "log.progress=false",
                             "log.tensorboard=false", "algo.estimator=group_norm"])
    return Trainer(cfg, run_dir=tmp_path / "run",
                   doctor=lambda tok, role: first_step_check(cfg, tmp_path / "run", tok, role))


def test_a_sound_first_update_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t = trainer(tmp_path, monkeypatch)
    try:
        t.step()
        assert t.update_doctor is None  # once
        report = json.loads((tmp_path / "run" / "doctor.json").read_text())
        update = {c["name"]: c for c in report["checks"]}["update"]
        assert update["status"] == "pass", update
        d = update["details"]
        assert d["better"] > 0 and d["worse"] > 0 and d["mean_change_better"] > d["mean_change_worse"]
        t.step()  # later steps are not checked again
    finally:
        t.rollouts.close()


def test_advantages_with_the_wrong_sign_stop_the_run_after_its_first_update(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import agentrl.training.trainer as trainer_module

    real = trainer_module.batch_advantages
    monkeypatch.setattr(trainer_module, "batch_advantages",
                        lambda *a, **k: tuple(-x for x in real(*a, **k)))  # a sign error in an estimator
    t = trainer(tmp_path, monkeypatch)
    try:
        with pytest.raises(DoctorFailed) as e:
            t.step()
        assert "the first update fails the doctor's update check" in str(e.value) and "\n" not in str(e.value)
        assert "sign error" in str(e.value)
        report = json.loads((tmp_path / "run" / "doctor.json").read_text())
        assert report["ok"] is False and report["checks"][-1]["status"] == "fail"
    finally:
        t.rollouts.close()


def test_rewards_inverted_inside_the_batch_stop_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The experience's rewards no longer the env's (here 1 - r: a grader's pass flag read as a fail): the check
    reads the rewards from the trajectories, so the update that followed the batch's rewards shows as reversed."""
    from agentrl.training.trainer import Trainer

    real = Trainer.make_experience

    def inverted(self: Any, trajs: Any) -> Any:
        exp = real(self, trajs)
        if exp is not None:
            exp.rewards = 1.0 - exp.rewards
        return exp

    monkeypatch.setattr(Trainer, "make_experience", inverted)
    t = trainer(tmp_path, monkeypatch)
    try:
        with pytest.raises(DoctorFailed, match="the first update fails the doctor's update check"):
            t.step()
    finally:
        t.rollouts.close()
