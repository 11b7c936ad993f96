"""The ``mask`` check on real episodes: a tiny model (HFEngine) playing GuessNumber through the multi-turn
executor under a compaction context policy (several samples per episode, summaries and compaction requests)
and a truncating one, laid out by the trainer's ``Experience.from_trajectories``. The real batch passes (also
padded on the left); faults put into its
``action_mask`` fail naming the role they hit; an empty action segment fails; rows that are not the
episodes' samples fail in one line."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from agentrl.doctor.mask import check_mask, episode_samples
from agentrl.env import fixed_tasks
from agentrl.models import load_causal_lm, load_tokenizer, tiny_model_dir
from agentrl.rollout.context import ContextPolicy, marker_text
from agentrl.rollout.engines.base import SamplingParams
from agentrl.rollout.engines.hf import HFEngine
from agentrl.rollout.executors.multi_turn import MultiTurnExecutor
from agentrl.training.experience import Experience
from agentrl.types import Segment, Trajectory
from environments.guess_number import GuessNumberEnv


@pytest.fixture(scope="module")
def engine() -> HFEngine:
    env = GuessNumberEnv(rounds=3, guesses=3, high=50, feedback="direction")
    corpus = [env._prompt(), "1 is too low. 2 is too high. Round 1 of 3, 3 left.", env.reference_summary(),
              env.compaction_instruction, marker_text(3)] * 4
    path = tiny_model_dir(corpus, hidden_size=64, num_layers=1, num_heads=2, intermediate_size=64,
                          max_position_embeddings=512)
    return HFEngine(load_causal_lm(path, device="cpu"), load_tokenizer(path))


def play(engine: HFEngine, context: ContextPolicy, tasks: int) -> list[Trajectory]:
    """``tasks`` x 2 episodes of 3 rounds x 3 guesses under ``context``."""
    env = GuessNumberEnv(rounds=3, guesses=3, high=50, feedback="direction")
    ex = MultiTurnExecutor(env, engine, engine.tokenizer, SamplingParams(max_new_tokens=6), n_samples=2,
                           context=context)
    torch.manual_seed(0)
    return ex.run(fixed_tasks(env, tasks, seed=0))


@pytest.fixture(scope="module")
def played(engine) -> tuple[list[Trajectory], Any]:
    """Six episodes in a context of 300 tokens: some compact."""
    episodes = play(engine, ContextPolicy("compact", 300, turn_tokens=6, summary_tokens=8), tasks=3)
    assert any(r.reason == "compact" for t in episodes for r in t.resets), "the fixture must compact"
    return episodes, engine.tokenizer


def batch(episodes: list[Trajectory], tok: Any) -> Experience:
    return Experience.from_trajectories([t for t in episodes if not t.info.get("failed")], tok.pad_token_id)


def positions(episodes: list[Trajectory], episode: int, sample: int, segment: int) -> list[int]:
    """Action positions of one segment in a right-padded batch (position p predicts token p+1)."""
    row = sum(len(t.samples()) for t in episodes[:episode]) + sample
    prompt, segments = episodes[episode].samples()[sample]
    start = len(prompt) + sum(len(s.token_ids) for s in segments[:segment])
    return [(row, p - 1) for p in range(start, start + len(segments[segment].token_ids))]


def find(episodes: list[Trajectory], want) -> tuple[int, int, int]:
    """(episode, sample, segment) of the first segment for which ``want(segments, j)`` holds."""
    for e, t in enumerate(episodes):
        for k, (_, segments) in enumerate(t.samples()):
            for j in range(len(segments)):
                if want(t, k, segments, j):
                    return e, k, j
    raise AssertionError("no such segment in the fixture")


def feedback(t, k, segs, j):
    return not t.info.get("summaries") and not segs[j].is_action  # an episode without compaction


def summary(t, k, segs, j):
    return segs[j].is_action and k < len(t.resets) and t.resets[k].reason == "compact" and j == len(segs) - 1


def request(t, k, segs, j):
    return j + 1 < len(segs) and summary(t, k, segs, j + 1)


def test_real_batch_passes(played):
    episodes, tok = played
    exp = batch(episodes, tok)
    c = check_mask(episodes, exp)
    assert c.status == "pass", c.summary
    roles = c.details["roles"]
    assert roles["summary"]["tokens"] > 0 and roles["request"]["tokens"] > 0 and roles["feedback"]["tokens"] > 0
    assert all(roles[r]["trained"] == roles[r]["tokens"] for r in ("action", "summary"))
    assert all(roles[r]["trained"] == 0 for r in ("prompt", "feedback", "request", "padding"))
    assert roles["action"]["trained"] + roles["summary"]["trained"] == exp.num_action_tokens
    assert len(exp) > len(episodes)  # several rows for the episodes that compacted
    assert f"{exp.num_action_tokens:,} action tokens trained" in c.summary


def test_truncated_contexts_pass(engine):
    """A truncated context's kept history is prompt: trained once, in the sample it was generated in."""
    episodes = play(engine, ContextPolicy("truncate", 200, turn_tokens=6, keep=0.5), tasks=1)
    assert any(r.reason == "truncate" for t in episodes for r in t.resets), "the test must truncate"
    exp = batch(episodes, engine.tokenizer)
    c = check_mask(episodes, exp)
    assert c.status == "pass", c.summary
    assert c.details["roles"]["action"]["trained"] == exp.num_action_tokens == sum(t.num_action_tokens
                                                                                  for t in episodes)


def test_left_padded_batch_passes(played):
    """Rows are read by their attention mask: the same batch padded on the left still maps back."""
    episodes, tok = played
    exp = batch(episodes, tok)
    left = copy.deepcopy(exp)
    for row in range(len(exp)):
        pad = int((exp.attention_mask[row] == 0).sum())
        for name in ("sequences", "attention_mask", "action_mask"):
            getattr(left, name)[row] = getattr(exp, name)[row].roll(pad)
    assert check_mask(episodes, left).status == "pass"


FAULTS = {  # role: (which segment, what to write on its positions)
    "feedback": (feedback, 1.0),
    "action": (lambda t, k, segs, j: j == 0 and segs[j].is_action and segs[j].token_ids, 0.0),
    "summary": (summary, 0.0),
    "request": (request, 1.0),
}


@pytest.mark.parametrize("role", sorted(FAULTS))
def test_fault_in_a_segment_fails_naming_its_role(played, role):
    episodes, tok = played
    exp = batch(episodes, tok)
    want, value = FAULTS[role]
    hit = positions(episodes, *find(episodes, want))[:2]
    for row, pos in hit:
        exp.action_mask[row, pos] = value
    c = check_mask(episodes, exp)
    assert c.status == "fail"
    assert f"{role} tokens" in c.summary and c.advice
    counts = c.details["roles"][role]
    assert (counts["trained"] if value else counts["tokens"] - counts["trained"]) == len(hit)


def test_trained_prompt_and_padding_fail(played):
    episodes, tok = played
    exp = batch(episodes, tok)
    exp.action_mask[0, 3] = 1.0  # predicts the prompt's 5th token
    short = int(exp.attention_mask.sum(-1).argmin())
    exp.action_mask[short, -1] = 1.0  # past the shortest row's tokens
    c = check_mask(episodes, exp)
    assert c.status == "fail"
    assert "1 prompt tokens trained (first: episode 0 sample 0 token 4)" in c.summary
    assert "1 padding tokens trained" in c.summary


def test_mask_off_by_one_is_named(played):
    episodes, tok = played
    exp = batch(episodes, tok)
    exp.action_mask = torch.cat([exp.action_mask[:, 1:], torch.zeros(len(exp), 1)], dim=1)
    c = check_mask(episodes, exp)
    assert c.status == "fail" and c.summary.startswith("the mask is off by one position")


def test_empty_action_segment_fails(played):
    episodes, tok = played
    broken = copy.deepcopy(episodes)
    e, k, j = find(broken, feedback)
    broken[e].samples()[k][1].insert(j + 1, Segment([], True, [], turn=1))  # a turn of no tokens
    c = check_mask(broken, batch(broken, tok))
    assert c.status == "fail" and "1 empty action segment(s)" in c.summary and "empty turn" in c.advice
    assert c.details["empty_actions"] == 1


def test_empty_last_turn_of_a_truncated_episode_passes(played):
    """A last turn cut to nothing by a spent budget only ends its episode: an empty last action of a truncated
    episode is allowed; of one that was not cut it is a fault."""
    episodes, tok = played
    cut = copy.deepcopy(episodes)
    cut[0].truncated = True
    cut[0].samples()[-1][1].append(Segment([], True, [], turn=9))
    c = check_mask(cut, batch(cut, tok))
    assert c.status == "pass" and c.details["empty_final_actions"] == 1 and "empty turn" in c.summary
    cut[0].truncated = False
    assert check_mask(cut, batch(cut, tok)).status == "fail"


def test_rows_that_are_not_the_episodes_fail(played):
    episodes, tok = played
    c = check_mask(episodes, batch(episodes[1:], tok))
    assert c.status == "fail" and "rows but the episodes hold" in c.summary
    c = check_mask(episodes, batch([episodes[1], episodes[0]] + episodes[2:], tok))
    assert c.status == "fail" and ("are not those of episode" in c.summary or "episode id" in c.summary)


def test_failed_episodes_are_left_out(played):
    episodes, tok = played
    some_failed = copy.deepcopy(episodes)
    some_failed[1].info["failed"] = True
    assert check_mask(some_failed, batch(some_failed, tok)).status == "pass"
    for t in some_failed:
        t.info["failed"] = True
    assert check_mask(some_failed, batch(episodes, tok)).status == "skip"


def test_roles_by_hand():
    """A summary the episode ended on (its rebuilt context did not fit: no reset) is still a summary; the
    segment before it is its request; a compact reset's context is prompt."""
    ended = Trajectory([1, 2], [Segment([3], True, [-1.0]), Segment([4, 5], False), Segment([6, 7], True, [-1.0] * 2)],
                       0.0, "t", 0, info={"summaries": ["s"]})
    [s] = episode_samples(ended, 0)
    assert s.roles == ["prompt"] * 2 + ["action"] + ["request"] * 2 + ["summary"] * 2
    from agentrl.types import ContextReset

    compacted = copy.deepcopy(ended)
    compacted.resets = [ContextReset("compact", [1, 2, 6, 7, 8], [Segment([9], True, [-1.0])])]
    first, second = episode_samples(compacted, 0)
    assert first.roles[-2:] == ["summary"] * 2 and second.roles == ["prompt"] * 5 + ["action"]
    exp = Experience.from_trajectories([compacted], 0)
    assert check_mask([compacted], exp).status == "pass"
