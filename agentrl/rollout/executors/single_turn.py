"""``SingleTurnExecutor``: one prompt, ``n`` sampled responses, one ``env.step`` each.

Token-exact: the prompt ids and the engine's generated ids (with their log-probs) go into the
``Trajectory`` unchanged; the env sees the decoded text. An exception inside the env marks that
episode failed (reward 0, the error in its info) and the batch goes on.
"""

from __future__ import annotations

import logging
from typing import Any

from agentrl.env import TextEnv
from agentrl.rollout.engines.base import Completion, InferenceEngine, SamplingParams
from agentrl.types import Segment, Task, Trajectory

log = logging.getLogger(__name__)


def encode_prompt(tokenizer: Any, prompt: str | list[dict[str, str]], chat_template: bool) -> list[int]:
    """Token ids of a prompt: chat messages through the tokenizer's chat template when asked for."""
    if isinstance(prompt, str) and not chat_template:
        return tokenizer(prompt, add_special_tokens=False)["input_ids"]
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    if chat_template and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # transformers 5: a BatchEncoding
    text = "\n".join(m["content"] for m in messages)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


class SingleTurnExecutor:
    """Runs single-turn episodes: ``n_samples`` per task, grouped by ``group_id``."""

    def __init__(self, env: TextEnv, engine: InferenceEngine, tokenizer: Any, params: SamplingParams,
                 *, n_samples: int = 1, chat_template: bool = False) -> None:
        self.env, self.engine, self.tokenizer = env, engine, tokenizer
        self.params, self.n_samples, self.chat_template = params, n_samples, chat_template
        self.eos_id = tokenizer.eos_token_id

    def prompt_ids(self, task: Task) -> list[int]:
        """The token ids the policy sees for ``task`` (the env's rendering of it)."""
        _, info = self.env.reset(options={"task": task})
        return encode_prompt(self.tokenizer, info["prompt"], self.chat_template)

    def run(self, tasks: list[Task], group_offset: int = 0, n_samples: int | None = None,
            params: SamplingParams | None = None) -> list[Trajectory]:
        """Sample ``n`` responses per task, score each with ``env.step``; groups numbered from offset."""
        n = self.n_samples if n_samples is None else n_samples
        prompts = [self.prompt_ids(t) for t in tasks]
        flat = [p for p in prompts for _ in range(n)]
        completions = self.engine.generate(flat, params or self.params)
        texts = self.decode_batch([c.token_ids for c in completions])
        out = []
        for k, (prompt, comp, text) in enumerate(zip(flat, completions, texts)):
            task = tasks[k // n]
            out.append(self._episode(task, prompt, comp, group_offset + k // n, text))
        return out

    def decode(self, token_ids: list[int]) -> str:
        """Response text for the env: special tokens (the EOS) dropped."""
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def decode_batch(self, token_ids: list[list[int]]) -> list[str]:
        """``decode`` of many responses in one tokenizer call (cheaper than one call each)."""
        return self.tokenizer.batch_decode(token_ids, skip_special_tokens=True)

    def _episode(self, task: Task, prompt: list[int], comp: Completion, group_id: int,
                 text: str | None = None) -> Trajectory:
        text = self.decode(comp.token_ids) if text is None else text
        info: dict[str, Any] = {"finish_reason": comp.finish_reason, "response": text}
        try:
            self.env.reset(options={"task": task})
            _, reward, terminated, truncated, step_info = self.env.step(text)
            info.update(verified=step_info.get("verified", True),
                        reward_components=step_info.get("reward_components", {}))
            if "parsed" in step_info:  # the env's parsed final answer (majority voting in evaluation)
                info["parsed"] = step_info["parsed"]
        except Exception as e:  # a crashing env fails this episode, not the batch
            log.warning("env %s raised on task %s: %r", type(self.env).__name__, task.id, e)
            reward, terminated, truncated = 0.0, True, False
            info.update(error=f"{type(e).__name__}: {e}", verified=True, failed=True)
        return Trajectory(prompt_ids=list(prompt), segments=[Segment(comp.token_ids, True, comp.logprobs)],
                          reward=float(reward), task_id=task.id, group_id=group_id, turn_rewards=[float(reward)],
                          terminated=bool(terminated), truncated=bool(truncated) or comp.finish_reason == "length",
                          info=info)
