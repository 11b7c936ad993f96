"""Evaluation: pass@k / maj@k and the eval loop, the ``agentrl eval`` command, and the ``agentrl report`` report."""
