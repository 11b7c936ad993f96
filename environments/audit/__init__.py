"""Reward-hacking audit: known attacks played against a task's verifier, graded exactly as training grades.

For one task, :func:`audit_task` plays the no-op agent and every attack of the library
(:data:`ATTACKS`, :mod:`environments.audit.attacks`) as episodes of the task's env
(:func:`environments.audit.run.play`), and reports per attack the reward it got, whether it beat the
no-op (``vulnerable``), and whether it made grading fail (``failed``: an attack must never turn a
sample into an infrastructure failure, since such a sample leaves the loss instead of scoring 0).
``WorkspaceEnv.audit_task`` calls it; ``agentrl tasks audit`` (``agentrl.evaluation.audit``) runs it
over a folder of Harbor tasks or a workspace env's tasks.
"""

from __future__ import annotations

from environments.audit.attacks import ATTACKS, BY_NAME, Attack, Target
from environments.audit.run import audit_task, play

__all__ = ["ATTACKS", "BY_NAME", "Attack", "Target", "audit_task", "play"]
