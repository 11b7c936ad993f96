"""The episode record (docs/trajectories.md): written from a trajectory token-exactly, read back at
every version (old ``samples.jsonl`` lines and ``eval.json`` reports without one), and the learner's
log-probs of the sampled episodes against a slow per-token loop."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from viewkit import CALL, ids, tokenizer, two_turn

from agentrl.config import AlgoConfig, LearnerConfig, LogConfig
from agentrl.runs.episodes import (
    EPISODE_VERSION,
    MAX_INFO_CHARS,
    EpisodeFormatError,
    EpisodeRecord,
    episode_record,
    read_eval,
    read_samples,
    truncate_samples,
)
from agentrl.training.learner import PolicyLearner
from agentrl.training.samples import SampleLog, learner_logprobs, pick
from agentrl.types import Segment, Task


@pytest.fixture(scope="module")
def tok() -> Any:
    return tokenizer()


def test_record_keeps_every_token_role_turn_and_version(tok: Any) -> None:
    traj = two_turn(tok)
    rec = episode_record(traj, tok, step=12, learner_logprobs=[[-0.4] * 3, [-0.3] * 2])
    assert rec.version == EPISODE_VERSION == 2
    assert [s.role for s in rec.segments] == ["prompt", "action", "feedback", "action"]
    assert [s.turn for s in rec.segments] == [None, 0, 0, 1]  # feedback answers turn 0
    assert [s.version for s in rec.segments] == [None, 3, None, 4]
    for seg, src in zip(rec.segments, [traj.prompt_ids] + [s.token_ids for s in traj.segments]):
        assert seg.token_ids == src and len(seg.tokens) == len(src) and "".join(seg.tokens) == seg.text
    assert rec.segments[1].text == CALL and rec.segments[3].text == "The answer is 5."
    assert rec.segments[1].logprobs == [-0.5] * len(traj.segments[0].token_ids)
    assert rec.segments[2].logprobs == [] and rec.segments[2].learner_logprobs is None
    assert rec.segments[1].learner_logprobs == [-0.4] * 3  # as given, one list per action segment
    assert (rec.step, rec.split, rec.task_id, rec.group_id, rec.turns) == (12, "train", "t-1", 7, 2)
    assert rec.turn_rewards == [0.0, 1.0] and rec.reward_components == {"correct": 1.0}
    assert rec.prompt == "What is 2+3?" and rec.response.startswith(CALL) and rec.end_reason == "terminated"
    assert rec.tool_calls == traj.info["tool_calls"]
    # what has its own field leaves info; the env's own keys stay (workspace envs: commands, outputs, diff)
    assert set(rec.info) == {"parsed", "commands", "outputs", "diff", "verifier", "blob"}
    assert rec.info["verifier"] == {"reward": 1.0, "stdout": "ok"}
    assert len(rec.info["blob"]) < MAX_INFO_CHARS + 100 and "500 characters cut" in rec.info["blob"]
    back = EpisodeRecord.from_dict(json.loads(rec.to_json()))
    assert back == rec


def test_sync_runs_get_the_step_version_and_failures_are_kept(tok: Any) -> None:
    rec = episode_record(two_turn(tok, versions=False, failed=True), tok, step=1, policy_version=9)
    assert [s.version for s in rec.segments if s.role == "action"] == [9, 9]
    assert rec.failed and rec.error.startswith("StepTimeout") and rec.end_reason == "failed"


def old_line(**kw: Any) -> str:
    """A samples.jsonl line as agentrl wrote it before records had a version."""
    row = {"step": 10, "task_id": "gsm8k-1", "group_id": 3, "prompt": "Q?", "response": "A.", "reward": 1.0,
           "turns": 1, "end_reason": "terminated", "truncated": False, "error": None}
    return json.dumps({**row, **kw})


def test_old_samples_lines_read_as_version_1(tmp_path: Path, tok: Any) -> None:
    path = tmp_path / "samples.jsonl"
    new = episode_record(two_turn(tok), tok, step=11).to_json()
    path.write_text(old_line() + "\n" + old_line(step=20, reward=0.0, end_reason="failed", error="boom") + "\n"
                    + new + "\n" + '{"step": 12, "task_id": "half-wri')  # a crash while writing the last line
    old, failed, current = read_samples(tmp_path)  # a run directory or the file
    assert (old.version, old.step, old.reward, old.prompt, old.response) == (1, 10, 1.0, "Q?", "A.")
    assert [(s.role, s.text, s.token_ids) for s in old.segments] == [("prompt", "Q?", []), ("action", "A.", [])]
    assert failed.failed and failed.error == "boom" and current.version == 2 and current.step == 11


def test_unreadable_records_are_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "samples.jsonl"
    path.write_text(old_line(version=3) + "\n")
    with pytest.raises(EpisodeFormatError, match=r"samples.jsonl:1: episode record version 3 is newer .* upgrade"):
        read_samples(path)
    path.write_text("not json\n" + old_line() + "\n")  # a bad line that is not the last: not a crash
    with pytest.raises(EpisodeFormatError, match=r"samples.jsonl:1: not JSON"):
        read_samples(path)
    path.write_text(json.dumps({"step": 1, "reward": 1.0}) + "\n")
    with pytest.raises(EpisodeFormatError, match="not an episode record"):
        read_samples(path)
    with pytest.raises(EpisodeFormatError, match="no such file"):
        read_samples(tmp_path / "elsewhere")


def test_old_eval_reports_read_as_text_records(tmp_path: Path) -> None:
    report = {"model": "m", "overall": {"accuracy": 0.5}, "samples": [
        {"task_id": "a", "dataset": "agentrl/GSM8K-v0", "difficulty": "-", "correct": [True, False],
         "rewards": [1.0, 0.0], "lengths": [4, 5], "answers": ["5", None], "responses": ["5.", "no idea"]}]}
    (tmp_path / "eval.json").write_text(json.dumps(report))
    rep, episodes = read_eval(tmp_path)
    assert rep == {"model": "m", "overall": {"accuracy": 0.5}}
    assert [(e.response, e.reward, e.reward_components["correct"], e.version) for e in episodes] == [
        ("5.", 1.0, 1.0, 1), ("no idea", 0.0, 0.0, 1)]
    assert episodes[0].info == {"parsed": "5"} and episodes[0].dataset == "agentrl/GSM8K-v0"
    (tmp_path / "eval.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(EpisodeFormatError, match="not an eval report"):
        read_eval(tmp_path)


def tiny_policy(tok: Any) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=1, num_key_value_heads=1, max_position_embeddings=256,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    return LlamaForCausalLM(cfg).eval()


def test_learner_logprobs_match_a_slow_loop_per_token(tok: Any) -> None:
    model = tiny_policy(tok)
    learner = PolicyLearner(model, LearnerConfig(micro_batch_size=1), AlgoConfig())
    trajs = [two_turn(tok), two_turn(tok, failed=True), two_turn(tok)]
    trajs[2].segments[2] = Segment(ids(tok, "ok"), True, [-1.0] * len(ids(tok, "ok")))  # another length
    scored = learner_logprobs(learner, trajs, tok.pad_token_id)
    assert scored[1] is None  # a failed sample never reaches the learner
    for traj, segs in zip([trajs[0], trajs[2]], [scored[0], scored[2]]):
        seq = traj.prompt_ids + traj.response_ids
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([seq])).logits[0].float(), -1)
        pos, expect = len(traj.prompt_ids), []
        for s in traj.segments:
            if s.is_action:
                expect.append([logp[p - 1, seq[p]].item() for p in range(pos, pos + len(s.token_ids))])
            pos += len(s.token_ids)
        assert len(segs) == len(expect)
        for got, want in zip(segs, expect):
            assert got == pytest.approx(want, abs=1e-5)


def test_sample_log_writes_on_schedule(tmp_path: Path, tok: Any) -> None:
    trajs = [two_turn(tok) for _ in range(8)]
    for i, t in enumerate(trajs):
        t.task_id = f"t-{i}"
    assert [t.task_id for t in pick(trajs, 3)] == ["t-0", "t-2", "t-4"] and pick(trajs, 0) == []
    log = SampleLog(tmp_path, LogConfig(samples_every=4, samples_per_step=3, eval_samples=1), tok, last_step=6)
    assert [log.due(k) for k in range(1, 10)] == [True, False, False, True, False, True, False, True, False]
    assert log.train(3, trajs, version=0) == [] and not (tmp_path / "samples.jsonl").exists()
    written = log.train(4, trajs, version=1, learner=PolicyLearner(tiny_policy(tok), LearnerConfig(), AlgoConfig()))
    assert len(written) == 3 and all(r.segments[1].learner_logprobs for r in written)
    tasks = [Task("e-0", "q"), Task("e-1", "q", metadata={"difficulty": 3})]
    log.eval(4, tasks, trajs[:4], n_samples=2, version=2)  # the first task's 2 samples
    back = read_samples(tmp_path)
    assert [(r.split, r.step) for r in back] == [("train", 4)] * 3 + [("eval", 4)] * 2
    assert not SampleLog(tmp_path, LogConfig(samples_every=0), tok, last_step=6).due(1)  # 0: off, first step too
    assert [s.version for s in back[-1].segments if s.role == "action"] == [3, 4]  # the trajectory's own


def test_a_resumed_run_drops_the_records_written_after_its_checkpoint(tmp_path: Path, tok: Any) -> None:
    lines = [episode_record(two_turn(tok), tok, step=k, split=split).to_json()
             for k, split in ((0, "eval"), (1, "train"), (2, "train"), (2, "eval"), (3, "train"))]
    (tmp_path / "samples.jsonl").write_text("\n".join(lines) + "\n" + '{"step": 3, "task_')  # killed mid-line
    assert truncate_samples(tmp_path, 2) == 2
    assert [(r.step, r.split) for r in read_samples(tmp_path)] == [(0, "eval"), (1, "train"), (2, "train"),
                                                                  (2, "eval")]
    assert (tmp_path / "samples.discarded.jsonl").read_text().splitlines() == [lines[4], '{"step": 3, "task_']
    assert truncate_samples(tmp_path, 2) == 0 and truncate_samples(tmp_path / "nothing", 2) == 0


def test_the_correct_column_counts_as_evaluation_does(tok: Any) -> None:
    """Agent tasks have no "correct" component: their column was empty (issue 46, finding 8)."""
    from agentrl.viewer.data import correct

    def record(reward: float, components: dict, failed: bool = False) -> EpisodeRecord:
        t = two_turn(tok, failed=failed)
        t.reward, t.info["reward_components"] = reward, components
        if failed:
            t.info.update(failed=True, error="x")
        return episode_record(t, tok)

    assert correct(record(1.0, {"reward": 1.0})) == 1.0 and correct(record(0.4, {"reward": 0.4})) == 0.0
    assert correct(record(0.0, {"correct": 1.0})) == 1.0  # the component decides when there is one
    assert correct(record(0.0, {}, failed=True)) is None
