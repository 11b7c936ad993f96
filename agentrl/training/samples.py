"""The episodes a training run keeps in ``samples.jsonl`` (records: :mod:`agentrl.runs.episodes`).

Every ``log.samples_every`` steps, ``log.samples_per_step`` training episodes spread over the batch
(every k-th), with the learner's log-probs of their action tokens when
``log.samples_learner_logprobs`` (one no-grad forward of those few sequences on the learner before
its update: the same policy the loss sees; rollout.async: the learner's newer policy, whose gap to
the engine is what the off-policy correction weighs). At every evaluation, the episodes of the first
``log.eval_samples`` held-out tasks (the same tasks each time: one task across steps).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentrl.config import LogConfig
from agentrl.evaluation.metrics import difficulty_of
from agentrl.runs.episodes import EpisodeRecord, append_records, episode_record
from agentrl.training.experience import Experience
from agentrl.types import Task, Trajectory


def pick(trajs: list[Trajectory], k: int) -> list[Trajectory]:
    """``k`` trajectories spread over the batch (every ``len // k``-th, from the first)."""
    if k <= 0 or not trajs:
        return []
    return trajs[::max(1, len(trajs) // k)][:k]


def learner_logprobs(learner: Any, trajs: list[Trajectory], pad_token_id: int) -> list[list[list[float]] | None]:
    """Per trajectory, the learner's log-probs of each action segment's tokens (None for failed ones,
    which never reach the learner). ``learner.logprobs(exp)`` returns (B,A)."""
    ok = [t for t in trajs if not t.info.get("failed")]
    if not ok:
        return [None] * len(trajs)
    rows = learner.logprobs(Experience.from_trajectories(ok, pad_token_id)).float().cpu().tolist()
    scored = iter(rows)  # one row per sample: an episode whose context was rebuilt has several
    out: list[list[list[float]] | None] = []
    for t in trajs:
        if t.info.get("failed"):
            out.append(None)
            continue
        segs = []
        for prompt, segments in t.samples():
            row, pos = next(scored), len(prompt)
            for s in segments:  # action position p - 1 predicts the token at p
                if s.is_action:
                    segs.append(row[pos - 1:pos - 1 + len(s.token_ids)])
                pos += len(s.token_ids)
        out.append(segs)
    return out


class SampleLog:
    """Appends episode records to ``RUN_DIR/samples.jsonl`` (see the module docstring)."""

    def __init__(self, run_dir: str | Path, cfg: LogConfig, tokenizer: Any, last_step: int = 0) -> None:
        self.path = Path(run_dir) / "samples.jsonl"
        self.cfg, self.tokenizer, self.last_step = cfg, tokenizer, last_step

    def due(self, step: int) -> bool:
        """Whether training step ``step`` (1-based) writes samples: every ``log.samples_every`` steps, and the
        first and the last (``last_step``: a short run shows its episodes too)."""
        every = self.cfg.samples_every
        return bool(every) and self.cfg.samples_per_step > 0 and (step % every == 0 or step in (1, self.last_step))

    def train(self, step: int, trajs: list[Trajectory], version: int, learner: Any = None) -> list[EpisodeRecord]:
        """Record the training episodes of ``step`` when due; ``version``: the policy version that generated
        them (synchronous runs; asynchronous ones carry their own per action)."""
        if not self.due(step):
            return []
        picked = pick(trajs, self.cfg.samples_per_step)
        scores = ([None] * len(picked) if learner is None or not self.cfg.samples_learner_logprobs
                  else learner_logprobs(learner, picked, self.tokenizer.pad_token_id))
        records = [episode_record(t, self.tokenizer, step=step, split="train", learner_logprobs=lp,
                                  policy_version=version) for t, lp in zip(picked, scores)]
        append_records(self.path, records)
        return records

    def eval(self, step: int, tasks: list[Task], trajs: list[Trajectory], n_samples: int, version: int
             ) -> list[EpisodeRecord]:
        """Record the evaluation episodes of the first ``log.eval_samples`` tasks (``n_samples`` each, in the
        executor's order)."""
        keep = min(self.cfg.eval_samples, len(tasks)) * n_samples
        records = [episode_record(t, self.tokenizer, step=step, split="eval", policy_version=version,
                                  difficulty=difficulty_of(tasks[i // n_samples]))
                   for i, t in enumerate(trajs[:keep])]
        if records:
            append_records(self.path, records)
        return records

