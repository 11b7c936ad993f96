"""Off-policy guidance (``algo.guide``): a group none of whose samples succeeded gets the env's reference
episode of its task in place of one sample, so the group holds a success to learn from.

A group estimator (GRPO, RLOO, ...) learns nothing from a group whose samples agree, so a task the policy
never solves stays unsolved however long RL runs. With ``algo.guide`` every group whose best reward is
below :data:`SUCCESS` (failed samples, an infrastructure fault, not counted) has the env's reference episode
of its task played: multi-turn, the env's reference policy (``reference_action``) through the executor RL
uses (``MultiTurnExecutor.run_scripted``: the token boundaries and context policy of a sampled episode);
single-turn, its ``reference_answer`` as the response, cut at ``rollout.max_new_tokens``. When the reference
scores above the group's best it replaces the group's last sample, marked ``info["guided"] = True``; the
estimator then gives it the group's positive advantage like any sample (the mixed-policy groups of LUFFY,
Yan et al. 2025, without its policy shaping). The sample it replaced stays in what the step reports
(reward, rollouts, ``samples.jsonl``: the policy's own episodes); ``guide/*`` counts the guided ones.

A guided sample's tokens were not sampled from the engine, so its engine log-probs are set to the learner's
own (:func:`learner_logprobs_for_guided`): an off-policy correction (TIS/MIS) weights it 1 and the
``mismatch/*`` figures describe the engine only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from agentrl.env import TextEnv
from agentrl.rollout.engines.base import Completion, SamplingParams
from agentrl.types import Task, Trajectory

SUCCESS = 1.0
"""A group whose best reward is below this has no success: it is guided."""


class AnswerEngine:
    """An engine that answers the i-th prompt of its next ``generate`` with ``answers[i]`` (token ids with
    the EOS, cut at the request's ``max_new_tokens``); log-probs 0. The single-turn guide's scripted policy."""

    def __init__(self, answers: list[list[int]], version: int | None = None) -> None:
        self.answers, self.version = answers, version

    def generate(self, prompt_token_ids: list[list[int]], params: SamplingParams) -> list[Completion]:
        if len(prompt_token_ids) != len(self.answers):
            raise ValueError(f"{len(prompt_token_ids)} prompts for {len(self.answers)} scripted answers")
        out = []
        for ids in self.answers:
            cut = ids[:params.max_new_tokens]
            out.append(Completion(cut, [0.0] * len(cut), "stop" if len(cut) == len(ids) else "length"))
        return out


def failed_groups(trajs: list[Trajectory]) -> dict[int, list[int]]:
    """Group id -> indices into ``trajs`` of its samples, for the groups of two or more samples that did not
    fail whose best reward is below :data:`SUCCESS` (in first-seen order)."""
    groups: dict[int, list[int]] = {}
    for i, t in enumerate(trajs):
        if not t.info.get("failed"):
            groups.setdefault(t.group_id, []).append(i)
    return {g: ix for g, ix in groups.items() if len(ix) >= 2 and max(trajs[i].reward for i in ix) < SUCCESS}


def guide(trajs: list[Trajectory], tasks: list[Task], play: Callable[[list[Task]], list[Trajectory]]
          ) -> list[Trajectory]:
    """``trajs`` with the last sample of each failed group (:func:`failed_groups`) replaced by its task's
    reference episode, ``play([task, ...])`` (one trajectory each, in order), where that scores above the
    group's best; a reference that failed or scored no higher changes nothing. A group's task is the one of
    ``tasks`` whose id its samples carry. The guided trajectory takes the group id and gets
    ``info["guided"] = True`` and ``info["replaced"]`` (the sample it replaced, for the step's report)."""
    groups = failed_groups(trajs)
    if not groups:
        return trajs
    by_id = {t.id: t for t in tasks}
    task_of = {g: by_id[trajs[ix[0]].task_id] for g, ix in groups.items() if trajs[ix[0]].task_id in by_id}
    wanted = list(task_of)
    played = play([task_of[g] for g in wanted]) if wanted else []
    out = list(trajs)
    for g, ref in zip(wanted, played):
        last = groups[g][-1]
        if ref.info.get("failed") or not ref.reward > max(trajs[i].reward for i in groups[g]):
            continue
        ref.group_id = g
        ref.info.update(guided=True, replaced=trajs[last])
        out[last] = ref
    return out


def reported(trajs: list[Trajectory]) -> list[Trajectory]:
    """The policy's own episodes of ``trajs``: each guided sample's ``info["replaced"]`` in its place (the key
    is removed, so a guided trajectory is reported once)."""
    return [t.info.pop("replaced") if "replaced" in t.info else t for t in trajs]


def guide_metrics(batch: list[Trajectory], play: Any) -> dict[str, float]:
    """``guide/samples``: guided samples in the batch; ``guide/reward``: their mean reward (0 without any);
    none when ``play`` (the trainer's reference player) is None: ``algo.guide`` is off."""
    if play is None:
        return {}
    guided = [t.reward for t in batch if t.info.get("guided")]
    return {"guide/samples": float(len(guided)), "guide/reward": sum(guided) / len(guided) if guided else 0.0}


def reference_player(env: TextEnv, executor: Any, tokenizer: Any,
                     make_single: Callable[[Any], Any]) -> Callable[[list[Task]], list[Trajectory]]:
    """``play(tasks)``: one reference episode per task. ``executor``: a multi-turn executor of its own (its
    ``run_scripted`` plays ``env.reference_action``); None for a single-turn env, whose episodes are
    ``make_single(engine)``'s (a single-turn executor over an :class:`AnswerEngine` of the reference answers)."""
    if executor is not None:
        if not hasattr(executor, "run_scripted"):
            raise ValueError(f"algo.guide: {type(executor).__name__} cannot play the env's reference episodes "
                             f"(black-box agents and raw-feedback envs have no scripted policy)")
        return lambda tasks: executor.run_scripted(tasks, lambda e: e.reference_action())

    eos = tokenizer.eos_token_id

    def play(tasks: list[Task]) -> list[Trajectory]:
        answers = [tokenizer(env.reference_answer(t), add_special_tokens=False)["input_ids"] + [eos]
                   for t in tasks]
        return make_single(AnswerEngine(answers)).run(tasks, n_samples=1)

    return play


def guided_rows(trajs: list[Trajectory], episode_ids: torch.Tensor | None) -> torch.Tensor:
    """Indices (long) of the Experience rows of ``trajs``' guided samples; ``episode_ids`` (B,) maps each
    row to its trajectory (None: one row each)."""
    guided = torch.tensor([bool(t.info.get("guided")) for t in trajs], dtype=torch.bool)
    per_row = guided if episode_ids is None else guided[episode_ids]
    return torch.nonzero(per_row).flatten()


def learner_logprobs_for_guided(exp: Any, trajs: list[Trajectory], logprobs: Callable[[Any], torch.Tensor]
                                ) -> int:
    """Set ``exp.engine_logprobs`` (B,A) of the guided samples' rows to ``logprobs(exp.select(rows))`` (the
    learner's, (R,A)); returns the number of rows set."""
    rows = guided_rows(trajs, exp.episode_ids)
    if len(rows) and exp.engine_logprobs is not None:
        exp.engine_logprobs[rows] = logprobs(exp.select(rows)).to(exp.engine_logprobs.dtype)
    return len(rows)
