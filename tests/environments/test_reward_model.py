"""Reward-model fallback: the on-disk format, scoring, and training on an env that cannot verify."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import agentrl
from agentrl.config import load_config
from agentrl.env import TextEnv
from agentrl.training.reward_model import RewardModel, save_reward_model
from agentrl.types import Segment, Task, Trajectory

TOPICS = ["cats", "rain", "music", "bread", "rivers", "stars", "chess", "tea"]
TINY = ["model.tiny.hidden_size=64", "model.tiny.num_heads=2", "model.tiny.num_layers=2",
        "model.tiny.intermediate_size=128"]


class OpinionEnv(TextEnv):
    """Open-ended prompts no program can verify: reward 0.0 with ``verified=False``."""

    def sample_task(self, rng: np.random.Generator) -> Task:
        topic = TOPICS[int(rng.integers(len(TOPICS)))]
        return Task(id=f"opinion-{topic}", prompt=f"Say something nice about {topic}.", answer=f"I like {topic}.")

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "", 0.0, True, False, {"verified": False, "reward_components": {}}


def tiny_rm(policy_dir: Path, out: Path, tokenizer: Any = None, stats: dict | None = None) -> Path:
    """A randomly initialised sequence-classification model on the policy's architecture and vocab."""
    from transformers import AutoConfig, LlamaForSequenceClassification

    config = AutoConfig.from_pretrained(str(policy_dir), num_labels=1)
    torch.manual_seed(0)
    return save_reward_model(LlamaForSequenceClassification(config), out, tokenizer=tokenizer, stats=stats)


@pytest.fixture(scope="module")
def policy() -> tuple[Path, Any]:
    from agentrl.models import load_tokenizer
    from agentrl.rollout.build import resolve_model_path

    agentrl.register("test/Opinion-v0", OpinionEnv)
    cfg = load_config(None, ["env.id=test/Opinion-v0", "model.path=tiny", *TINY])
    path = Path(resolve_model_path(cfg, OpinionEnv()))
    return path, load_tokenizer(path)


def trajectories(tok: Any) -> list[Trajectory]:
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    return [Trajectory(enc("Say something nice about tea."), [Segment(enc(" I like tea."), True, [])], 0.0, "a", 0),
            Trajectory(enc("Say something nice about cats."), [Segment(enc(" Cats"), True, []),
                                                                Segment(enc(" are great."), False)], 0.0, "b", 1)]


def test_scores_match_an_unbatched_forward_and_are_normalised(policy: tuple[Path, Any], tmp_path: Path) -> None:
    path, tok = policy
    rm = RewardModel.load(tiny_rm(path, tmp_path / "rm", stats={"mean": 1.0, "std": 2.0}), tokenizer=tok, device="cpu")
    trajs = trajectories(tok)
    scores = rm.score(trajs)
    for t, s in zip(trajs, scores):
        raw = rm.model(input_ids=torch.tensor([t.prompt_ids + t.response_ids])).logits[0, 0].item()
        assert s == pytest.approx((raw - 1.0) / 2.0, abs=1e-5)
    assert json.loads((tmp_path / "rm" / "reward_stats.json").read_text()) == {"mean": 1.0, "std": 2.0}


def test_own_tokenizer_retokenizes_through_its_chat_template(policy: tuple[Path, Any], tmp_path: Path) -> None:
    path, tok = policy
    rm = RewardModel.load(tiny_rm(path, tmp_path / "rm", tokenizer=tok), tokenizer=tok, device="cpu")
    [t] = trajectories(tok)[:1]
    ids = rm.sequences([t])[0]
    assert tok.decode(ids) == ("<|im_start|>user\nSay something nice about tea.<|im_end|>\n"
                               "<|im_start|>assistant\n I like tea.<|im_end|>\n")
    assert rm.score([t]) == pytest.approx(rm.score_texts(["Say something nice about tea."], [" I like tea."]))


def test_a_causal_lm_without_score_head_is_refused(policy: tuple[Path, Any]) -> None:
    path, tok = policy
    with pytest.raises(ValueError, match="without a score head"):
        RewardModel.load(path, tokenizer=tok, device="cpu")


def test_unverified_samples_are_scored_by_the_reward_model_in_training(policy: tuple[Path, Any],
                                                                        tmp_path: Path) -> None:
    from agentrl.training.trainer import Trainer

    path, _ = policy
    rm_dir = tiny_rm(path, tmp_path / "rm", stats={"mean": 0.0, "std": 0.01})
    cfg = load_config(None, ["env.id=test/Opinion-v0", "env.eval_kwargs={}", "model.path=tiny", "model.device=cpu",
                             *TINY, f"reward.model={rm_dir}", "data.prompts_per_step=2", "data.eval_tasks=2",
                             "rollout.n_samples=3", "rollout.max_new_tokens=6", "learner.total_steps=2",
                             "learner.lr=1e-4", "log.tensorboard=false", "log.progress=false",
                             "checkpoint.save_final=false"])
    trainer = Trainer(cfg, run_dir=tmp_path / "run")
    assert trainer.model_path == str(path)
    trainer.fit()
    trajs = trainer.score_unverified(trainer.rollout(trainer.tasks.next(2)))
    assert all("reward_model_score" in t.info and t.reward == t.info["reward_model_score"] for t in trajs)
    assert len({round(t.reward, 6) for t in trajs}) > 1, "the reward model should tell samples apart"
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines if "reward/std" in m] == [1, 2]
    assert any(m["reward/std"] > 0 for m in lines if "reward/std" in m)


def test_an_episode_whose_context_was_rebuilt_is_scored_on_its_last_context(policy: tuple[Path, Any],
                                                                            tmp_path: Path) -> None:
    """Two episodes that differ only after a compaction get different scores (issue 43: only the first
    context reached the reward model, so how the episode ended never did)."""
    from agentrl.types import ContextReset

    path, tok = policy
    rm = RewardModel.load(tiny_rm(path, tmp_path / "rm"), tokenizer=tok, device="cpu")
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    first = [Segment(enc(" guess 5"), True, []), Segment(enc(" too low"), False), Segment(enc(" summary"), True, [])]

    def episode(ending: str) -> Trajectory:
        rebuilt = enc("Find the number.") + enc(" summary") + enc(" too low")
        return Trajectory(enc("Find the number."), list(first), 0.0, "a", 0,
                          resets=[ContextReset("compact", rebuilt, [Segment(enc(ending), True, [])])])

    won, lost = episode(" guess 7: found it"), episode(" guess 9: out of guesses")
    assert rm.sequences([won])[0][-len(enc(" guess 7: found it")):] == enc(" guess 7: found it")
    a, b = rm.score([won, lost])
    assert a != b
