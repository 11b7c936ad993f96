"""The doctor's cheap checks on ``agentrl train``'s first batch (token exactness and the loss mask: a fail
stops the run before its first update) and on its first update with a reward signal (the log-probs move
the way the rewards say: a fail stops the run after it), each in one line; ``--no-doctor`` skips them. The
report is the run directory's ``doctor.json`` either way (``agentrl view`` shows it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.config import ConfigError, RunConfig
from agentrl.doctor.report import Report
from agentrl.types import Trajectory


class DoctorFailed(ConfigError):
    """A first-step check failed: the run would train on something else than it thinks."""


def first_step_check(cfg: RunConfig, run_dir: str | Path, tokenizer: Any, feedback_role: str = "user"
                     ) -> FirstStepDoctor:
    """The checks the trainer runs on its first batch and its first update."""
    return FirstStepDoctor(cfg, Path(run_dir), tokenizer, feedback_role)


class FirstStepDoctor:
    """Call it on the first batch (``batch``: the trajectories ``exp`` was made from): tokens and mask; then
    :meth:`update` with the policy's log-probs of that batch before and after its update. Each writes
    ``doctor.json`` and raises :class:`DoctorFailed` on a fail."""

    def __init__(self, cfg: RunConfig, run_dir: Path, tokenizer: Any, feedback_role: str = "user") -> None:
        self.cfg, self.run_dir, self.tokenizer, self.feedback_role = cfg, run_dir, tokenizer, feedback_role
        self.report: Report | None = None

    def __call__(self, batch: list[Trajectory], exp: Any) -> Report:
        from agentrl.doctor.mask import check_mask
        from agentrl.doctor.tokens import check_tokens

        self.report = Report([check_tokens(batch, self.tokenizer, chat_template=self.cfg.rollout.chat_template,
                                           feedback_role=self.feedback_role), check_mask(batch, exp)],
                             {"from": "agentrl train: the first batch", "env": self.cfg.env.id,
                              "model": self.cfg.model.path, "episodes": len(batch)})
        return self._verdict("the first batch")

    def wants(self, batch: list[Trajectory], exp: Any) -> bool:
        """Whether the update of ``exp`` (made from ``batch``) is the one to check: some group's rewards differ."""
        from agentrl.doctor.update import has_signal

        return has_signal(*_episode_rewards(batch, exp))

    def update(self, batch: list[Trajectory], exp: Any, before: Any, after: Any) -> Report:
        """The ``update`` check (``agentrl.doctor.update``) added to the first batch's report. The rewards come
        from the trajectories (the env's verdicts), not from ``exp``: rows paired with other episodes' rewards
        show."""
        from agentrl.doctor.update import check_update

        if self.report is None:
            raise RuntimeError("FirstStepDoctor.update before the first batch was checked")
        self.report.checks.append(check_update(*_episode_rewards(batch, exp), exp.action_mask, before, after))
        return self._verdict("the first update")

    def _verdict(self, what: str) -> Report:
        assert self.report is not None
        self.report.write(self.run_dir)
        bad = [c for c in self.report.checks if c.status == "fail"]
        if bad:
            c = bad[0]
            raise DoctorFailed(f"{what} fails the doctor's {c.name} check: {c.summary}"
                               f"{' (' + c.advice + ')' if c.advice else ''}; {self.run_dir / 'doctor.json'} has "
                               f"the details (agentrl train --no-doctor skips the checks)")
        return self.report


def _episode_rewards(batch: list[Trajectory], exp: Any) -> tuple[Any, Any]:
    """The reward and group of each row of ``exp`` (B,) read from its trajectory in ``batch``."""
    import torch

    ids = exp.episode_ids.tolist() if exp.episode_ids is not None else range(len(exp))
    return (torch.tensor([float(batch[e].reward) for e in ids], dtype=torch.float64),
            torch.tensor([int(batch[e].group_id) for e in ids]))
