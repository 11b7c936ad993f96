"""The doctor's cheap checks on ``agentrl train``'s first batch: token exactness and the loss mask
(``--no-doctor`` skips them). A fail stops the run before its first update, in one line; the report is
the run directory's ``doctor.json`` either way (``agentrl view`` shows it)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrl.config import ConfigError, RunConfig
from agentrl.doctor.report import Report
from agentrl.types import Trajectory


class DoctorFailed(ConfigError):
    """A first-step check failed: the run would train on something else than it thinks."""


def first_step_check(cfg: RunConfig, run_dir: str | Path, tokenizer: Any, feedback_role: str = "user"
                     ) -> Callable[[list[Trajectory], Any], Report]:
    """The check the trainer runs on its first batch (``batch``: the trajectories ``exp`` was made from)."""
    from agentrl.doctor.mask import check_mask
    from agentrl.doctor.tokens import check_tokens

    def check(batch: list[Trajectory], exp: Any) -> Report:
        report = Report([check_tokens(batch, tokenizer, chat_template=cfg.rollout.chat_template,
                                      feedback_role=feedback_role),
                         check_mask(batch, exp)],
                        {"from": "agentrl train: the first batch", "env": cfg.env.id, "model": cfg.model.path,
                         "episodes": len(batch)})
        report.write(run_dir)
        bad = [c for c in report.checks if c.status == "fail"]
        if bad:
            c = bad[0]
            raise DoctorFailed(f"the first batch fails the doctor's {c.name} check: {c.summary}"
                               f"{' (' + c.advice + ')' if c.advice else ''}; {Path(run_dir) / 'doctor.json'} has "
                               f"the details (agentrl train --no-doctor skips the check)")
        return report

    return check
