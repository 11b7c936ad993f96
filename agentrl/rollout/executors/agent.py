"""Executors for agents from other frameworks.

- :class:`RawFeedbackExecutor`: the multi-turn executor for envs whose feedback is raw text already
  in the model's template (``env.raw_feedback = True``, e.g. OpenRLHF agent files): the feedback is
  tokenized as it is and appended, never wrapped in a chat message or put on lines of its own.
- :class:`BlackBoxExecutor`: episodes of an agent program that calls the policy through the
  OpenAI-compatible endpoint of :mod:`agentrl.rollout.openai_server`; every completion it asks for
  is recorded token-exact and stitched into one trajectory.
"""

from __future__ import annotations

from agentrl.rollout.executors.multi_turn import MultiTurnExecutor


class RawFeedbackExecutor(MultiTurnExecutor):
    """:class:`MultiTurnExecutor` with the env's feedback appended verbatim (see the module docstring)."""

    def feedback_ids(self, observation: str, action_ids: list[int]) -> list[int]:
        """Token ids of ``observation`` exactly as the env wrote it."""
        return self.tokenizer(observation, add_special_tokens=False)["input_ids"]
