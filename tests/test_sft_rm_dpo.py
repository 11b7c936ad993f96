"""The stages before RL on the tiny model: SFT, the reward model (then serving an RL run on an env
that cannot verify) and DPO, through their tiny example configs; plus packing, records and configs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from agentrl.config import ConfigError, load_config
from agentrl.stages.config import DPOConfig, RMConfig, SFTConfig
from agentrl.stages.data import (
    encode_chat,
    encode_pair,
    encode_sft,
    env_preference_records,
    load_records,
    split_records,
    stage_records,
)
from agentrl.training.supervised import batch_logprobs, make_batch, train_sft
from agentrl.types import Segment, Trajectory
from environments.arithmetic import ArithmeticEnv

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "examples" / "configs"
QUIET = ["log.progress=false", "log.tensorboard=false"]


@pytest.fixture(scope="module")
def tiny(tiny_arith):
    from agentrl.models import load_causal_lm, load_tokenizer

    path, env = tiny_arith
    torch.manual_seed(0)
    return load_causal_lm(path, device="cpu").eval(), load_tokenizer(path), env


# ------------------------------------------------------------------ fast: batches, records, configs
def test_packing_gives_the_unpacked_logprobs(tiny):
    model, tok, _ = tiny
    ex = [(tok(p)["input_ids"], tok(r)["input_ids"] + [tok.eos_token_id])
          for p, r in [("12+34=", "46"), ("1+2=", "3"), ("99+99=", "198"), ("5+67=", "72"), ("8+8=", "16")]]
    plain = make_batch(ex, tok.pad_token_id)
    packed = make_batch(ex, tok.pad_token_id, packing=True, pack_length=20)
    assert packed.sequences.shape[0] < plain.sequences.shape[0]
    assert packed.action_mask.sum() == plain.action_mask.sum()
    with torch.no_grad():
        a = batch_logprobs(model, plain)
        b = batch_logprobs(model, packed)
    per_plain = sorted((a * plain.action_mask).sum(-1).tolist())
    # per example in the packed rows: split each row's loss positions by its example (position id resets)
    per_packed = []
    for r in range(packed.sequences.shape[0]):
        starts = (packed.position_ids[r] == 0).nonzero().flatten().tolist() + [packed.sequences.shape[1]]
        for s, e in zip(starts, starts[1:]):
            chunk = (b[r] * packed.action_mask[r])[s:max(s, e - 1)]
            if packed.action_mask[r, s:max(s, e - 1)].sum() > 0:
                per_packed.append(chunk.sum().item())
    assert sorted(per_packed) == pytest.approx(per_plain, abs=1e-4)


def test_chat_records_put_the_loss_on_assistant_turns_only(tiny):
    _, tok, _ = tiny
    msgs = [{"role": "user", "content": "1+2="}, {"role": "assistant", "content": "3"},
            {"role": "user", "content": "2+2="}, {"role": "assistant", "content": "4"}]
    traj = encode_chat(tok, msgs)
    full = tok.apply_chat_template(msgs, tokenize=True)
    full = list(full["input_ids"] if hasattr(full, "keys") else full)
    assert traj.prompt_ids + traj.response_ids == full
    loss_text = "".join(tok.decode(s.token_ids) for s in traj.segments if s.is_action)
    assert loss_text == "3<|im_end|>\n4<|im_end|>\n"
    with pytest.raises(ValueError, match="no assistant"):
        encode_chat(tok, msgs[:1])


def test_records_from_files_split_and_tokenize(tiny, tmp_path):
    _, tok, env = tiny
    recs = env_preference_records(env, 40, seed=3, mode="random")
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert load_records(str(path)) == recs
    train, held = split_records(recs, 0.1, seed=0)
    assert len(held) == 4 and len(train) == 36 and not {json.dumps(r) for r in held} & {json.dumps(r) for r in train}
    cfg = load_config(None, [f"data.train={path}", "data.eval_fraction=0.25"], cls=RMConfig)
    tr, ev = stage_records(cfg, "pairs", None, None)
    assert len(tr) == 30 and len(ev) == 10
    pair = encode_pair({"prompt": "12+34=", "chosen": "46", "rejected": "47", "margin": 2}, tok, cfg.data)
    assert tok.decode(pair.chosen_ids) == "46<|endoftext|>" and pair.margin == 2.0
    assert pair.prompt_ids == tok("12+34=")["input_ids"]
    sft = encode_sft({"prompt": "12+34=", "response": "46"}, tok, load_config(None, ["data.max_length=7"],
                                                                           cls=SFTConfig).data)
    assert len(sft.prompt_ids) + len(sft.response_ids) == 7  # the response is cut, the prompt kept



def test_hub_names_load_through_datasets_lazily(monkeypatch):
    import sys
    import types

    monkeypatch.setitem(sys.modules, "datasets", None)  # not installed
    with pytest.raises(ImportError, match="needs `datasets`"):
        load_records("someone/prefs")
    calls = []
    fake = types.SimpleNamespace(load_dataset=lambda name, split: calls.append((name, split)) or [{"a": 1}])
    monkeypatch.setitem(sys.modules, "datasets", fake)
    assert load_records("someone/prefs", split="train_prefs") == [{"a": 1}]
    assert calls == [("someone/prefs", "train_prefs")]


def test_parquet_needs_pyarrow_and_reads_rows(monkeypatch, tmp_path):
    import sys
    import types

    path = tmp_path / "d.parquet"
    path.write_bytes(b"")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match="needs pyarrow"):
        load_records(str(path))
    table = types.SimpleNamespace(to_pylist=lambda: [{"prompt": "1+1=", "response": "2"}])
    pq = types.SimpleNamespace(read_table=lambda p: table)
    monkeypatch.setitem(sys.modules, "pyarrow", types.SimpleNamespace(parquet=pq))
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", pq)
    assert load_records(str(path)) == [{"prompt": "1+1=", "response": "2"}]


def test_env_made_pairs_are_right_against_wrong(tiny):
    from agentrl.env import fixed_tasks

    _, _, env = tiny
    tasks = fixed_tasks(env, 30, 1)
    for mode in ("near", "random"):
        recs = env_preference_records(env, 30, seed=1, mode=mode)
        for r, task in zip(recs, tasks):
            assert r["prompt"] == task.prompt
            assert env.score(r["chosen"], task).score == 1.0 and env.score(r["rejected"], task).score < 1.0
        if mode == "near":
            assert all(0 < abs(int(r["chosen"]) - int(r["rejected"])) <= 10 for r in recs)


@pytest.mark.parametrize("cls,override,message", [
    (RMConfig, "rm.loss=hinge", "rm.loss: unknown value 'hinge'; valid: pairwise, logexp"),
    (DPOConfig, "dpo.label_smoothing=0.7", "dpo.label_smoothing: must be in [0, 0.5)"),
    (SFTConfig, "optim.batch=3", "unknown key 'optim.batch'"),
])
def test_config_errors_are_one_line(cls, override, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(")", r"\)")):
        load_config(None, [override], cls=cls)


def test_cli_config_error_exits_2(capsys):
    from agentrl.cli import main

    assert main(["rm", str(CONFIGS / "rm_tiny.yaml"), "rm.loss=hinge"]) == 2
    assert "valid: pairwise, logexp" in capsys.readouterr().err


def test_warm_start_keeps_the_best_dev_weights(tiny):
    model, tok, _ = tiny
    import copy

    model = copy.deepcopy(model)
    pairs = [(tok(f"{a}+{b}=")["input_ids"], tok(str(a + b))["input_ids"] + [tok.eos_token_id])
             for a, b in [(1, 2), (10, 20), (33, 44), (5, 5)]]
    accs = iter([0.1, 0.4, 0.2, 0.3, 0.9])
    snapshots = []

    def dev():
        snapshots.append(copy.deepcopy(model.state_dict()))
        return next(accs)

    res = train_sft(model, pairs, tok.pad_token_id, lr=1e-3, batch_size=4, max_steps=50, eval_every=2,
                    patience=2, dev_accuracy=dev, log=lambda s: None)
    assert res.steps == 8 and res.best_dev_accuracy == 0.4 and [h[2] for h in res.history] == [0.1, 0.4, 0.2, 0.3]
    assert all(torch.equal(v, snapshots[1][k]) for k, v in model.state_dict().items())


def test_a_warm_start_shorter_than_eval_every_still_evaluates_its_weights(tiny):
    """max_steps below eval_every ran no dev evaluation and reported -1.000 ("does not learn") (issue 46)."""
    model, tok, _ = tiny
    import copy

    model = copy.deepcopy(model)
    pairs = [(tok(f"{a}+{b}=")["input_ids"], tok(str(a + b))["input_ids"] + [tok.eos_token_id]) for a, b in [(1, 2)]]
    res = train_sft(model, pairs, tok.pad_token_id, lr=1e-3, batch_size=1, max_steps=3, eval_every=10, patience=2,
                    dev_accuracy=lambda: 0.6, log=lambda s: None)
    assert res.steps == 3 and res.best_dev_accuracy == 0.6 and [(h[0], h[2]) for h in res.history] == [(3, 0.6)]
    res = train_sft(model, pairs, tok.pad_token_id, lr=1e-3, batch_size=1, max_steps=4, eval_every=2, patience=9,
                    dev_accuracy=lambda: 0.5, log=lambda s: None)
    assert [h[0] for h in res.history] == [2, 4]  # the last step was an evaluation: not evaluated twice


def test_a_long_warm_start_is_never_silent_between_evaluations(tiny):
    """A line with the step, the loss and the seconds whenever ``heartbeat_s`` passed without one (issue 46,
    finding 3: a warm start said nothing for minutes between its evaluations); evaluations reset the clock."""
    model, tok, _ = tiny
    import copy

    model = copy.deepcopy(model)
    pairs = [(tok(f"{a}+{b}=")["input_ids"], tok(str(a + b))["input_ids"] + [tok.eos_token_id]) for a, b in [(1, 2)]]
    lines: list[str] = []
    train_sft(model, pairs, tok.pad_token_id, lr=1e-3, batch_size=1, max_steps=4, eval_every=4, patience=2,
              dev_accuracy=lambda: 0.5, log=lines.append, heartbeat_s=1e-9)
    assert [ln.split(":")[0] for ln in lines] == ["warm start step 1/4", "warm start step 2/4", "warm start step 3/4",
                                                 "warm start step 4/4", "warm start step 4"]
    assert lines[0].endswith(" s)") and "loss " in lines[0] and "dev accuracy 0.500" in lines[-1]
    quiet: list[str] = []
    train_sft(model, pairs, tok.pad_token_id, lr=1e-3, batch_size=1, max_steps=4, eval_every=4, patience=2,
              dev_accuracy=lambda: 0.5, log=quiet.append)  # the default 20 s: none in a 4-step run
    assert [ln.split(":")[0] for ln in quiet] == ["warm start step 4"]


# ------------------------------------------------------------------ the three stages (slow tier)
@pytest.fixture(scope="module")
def sft_run(tmp_path_factory) -> dict[str, Any]:
    from agentrl.stages.sft import run_sft

    cfg = load_config(CONFIGS / "sft_tiny.yaml", QUIET, cls=SFTConfig)
    return run_sft(cfg, tmp_path_factory.mktemp("sft"))


@pytest.fixture(scope="module")
def rm_run(sft_run, tmp_path_factory) -> dict[str, Any]:
    from agentrl.stages.rm import run_rm

    cfg = load_config(CONFIGS / "rm_tiny.yaml", QUIET + [f"model.path={sft_run['model_dir']}"], cls=RMConfig)
    return run_rm(cfg, tmp_path_factory.mktemp("rm"))


@pytest.mark.slow
def test_sft_raises_greedy_success(sft_run):
    before, after = sft_run["before"], sft_run["after"]
    print("sft:", json.dumps({k: sft_run[k] for k in ("steps", "seconds", "before", "after")}))
    # a training outcome, so its bound sits outside its spread: over data.seed 0-7 (one machine) greedy success
    # on 200 test tasks went 0.0 -> 0.025-0.09 and the eval loss 5.5 -> ~0.9; a bound of +0.03 failed 1 seed in 8
    assert after["eval/greedy_accuracy"] >= before["eval/greedy_accuracy"] + 0.01
    assert after["eval/loss"] < 0.3 * before["eval/loss"]
    assert (Path(sft_run["model_dir"]) / "config.json").exists()


def _trajs(tok: Any, tasks: list, answers: list[str]) -> list[Trajectory]:
    return [Trajectory(prompt_ids=tok(t.prompt)["input_ids"],
                       segments=[Segment(tok(a)["input_ids"] + [tok.eos_token_id], True)], reward=0.0,
                       task_id=t.id, group_id=0) for t, a in zip(tasks, answers)]


@pytest.mark.slow
def test_reward_model_ranks_held_out_answers_and_loads_as_the_learner_reward_model(rm_run, tiny):
    from agentrl.env import fixed_tasks
    from agentrl.stages.data import wrong_answer
    from agentrl.training.reward_model import RewardModel

    _, tok, _ = tiny
    print("rm:", json.dumps({k: rm_run[k] for k in ("steps", "seconds", "before", "after", "reward_stats")}))
    # bounds outside the spread of this training outcome and far above chance (0.46 before training): over
    # data.seed 0-7 (one machine) dev accuracy 0.855-0.955, test-split ranking 0.87-0.97 (5 of them); 0.9
    # failed 2 in 8, seed 0 among them on a fresh CI machine where earlier machines had passed it
    assert rm_run["after"]["eval/accuracy"] >= 0.8
    stats = json.loads((Path(rm_run["model_dir"]) / "reward_stats.json").read_text())
    assert stats["std"] > 0
    # the learner's loader, on test-split tasks the trainer never saw (neither train nor dev)
    rm = RewardModel.load(rm_run["model_dir"], tokenizer=tok, device="cpu")
    test_env = ArithmeticEnv(digits=2, template="{expr}=", bare_answer=True, split="test")
    tasks = fixed_tasks(test_env, 200, seed=7)
    pool, rng = [test_env.reference_answer(t) for t in tasks], np.random.default_rng(0)
    good = rm.score(_trajs(tok, tasks, pool))
    bad = rm.score(_trajs(tok, tasks, [wrong_answer(test_env, t, rng, pool, "random") for t in tasks]))
    ranked = float(np.mean([g > b for g, b in zip(good, bad)]))
    print(f"rm: test-split ranking accuracy through RewardModel.score {ranked:.3f}")
    assert ranked >= 0.8
    assert abs(float(np.mean(good + bad))) < 1.0  # normalised by the stored mean/std


class UnverifiedArithmetic(ArithmeticEnv):
    """Arithmetic that cannot verify: reward 0.0 with ``info["verified"] = False``."""

    def step(self, action: str):
        obs, _, terminated, truncated, info = super().step(action)
        return obs, 0.0, terminated, truncated, {**info, "verified": False}


@pytest.mark.slow
def test_reward_model_serves_rl_steps_on_an_unverifiable_env(sft_run, rm_run, tmp_path):
    import agentrl
    from agentrl.training.trainer import Trainer

    agentrl.register("test/UnverifiedArithmetic-v0", UnverifiedArithmetic)
    cfg = load_config(None, QUIET + [
        "env.id=test/UnverifiedArithmetic-v0", "env.kwargs={digits: 2, template: '{expr}=', bare_answer: true}",
        f"model.path={sft_run['model_dir']}", f"reward.model={rm_run['model_dir']}", "model.device=cpu",
        "data.prompts_per_step=8", "rollout.n_samples=4", "rollout.max_new_tokens=4", "data.eval_tasks=16",
        "learner.total_steps=3", "learner.lr=1e-4", "checkpoint.save_final=false"])
    trainer = Trainer(cfg, run_dir=tmp_path)
    rewards = []
    for _ in range(3):
        trajs = trainer.score_unverified(trainer.rollout(trainer.tasks.next(8)))
        assert all("reward_model_score" in t.info for t in trajs)
        rewards += [t.reward for t in trajs]
        exp = trainer.make_experience(trajs)
        trainer.reference_and_values(exp)
        trainer.advantages(exp)
        metrics = trainer.update(exp)
        trainer.sync_weights()
        trainer.step_idx += 1
        assert np.isfinite(metrics["loss/policy_loss"])
    assert np.std(rewards) > 0  # the reward model tells samples apart


@pytest.mark.slow
def test_dpo_cli_increases_the_held_out_margin(sft_run, tmp_path, capsys):
    from agentrl.cli import main
    from agentrl.runs.tracking import read_metrics

    rc = main(["dpo", str(CONFIGS / "dpo_tiny.yaml"), f"model.path={sft_run['model_dir']}", *QUIET,
               "--run-dir", str(tmp_path)])
    assert rc == 0
    rows = [r for r in read_metrics(tmp_path) if "eval/margin" in r]
    before, after = rows[0], rows[-1]
    print("dpo:", json.dumps({"before": before, "after": after}))
    assert before["eval/margin"] == pytest.approx(0.0, abs=1e-5)  # the policy starts as its reference
    # over data.seed 0-7 (one machine): accuracy 0.84-0.92, margin 1.2-1.7; bounds below that spread, far from a
    # policy that learned nothing (margin 0, accuracy ~0.5)
    assert after["eval/margin"] > 0.5 and after["eval/accuracy"] >= 0.75
    assert after["eval/logp_margin"] > before["eval/logp_margin"]
    assert (tmp_path / "final" / "config.json").exists()


def test_cpu_demo_warm_start_runs_through_this_trainer(tiny_arith):
    from agentrl.models import load_policy
    from agentrl.rollout.build import make_env
    from agentrl.training.warm_start import warm_start

    path, _ = tiny_arith
    cfg = load_config(CONFIGS / "cpu_demo.yaml", [
        "model.warm_start.examples=64", "model.warm_start.max_steps=20", "model.warm_start.batch_size=32",
        "model.warm_start.eval_every=10", "model.warm_start.eval_tasks=20", "model.warm_start.cache=false",
        "model.device=cpu"])
    model, tok = load_policy(cfg, str(path))
    lines: list[str] = []
    out = warm_start(cfg, model, tok, str(path), make_env(cfg), make_env(cfg, cfg.env.dev_kwargs), log=lines.append)
    assert out["steps"] == 20 and 0.0 <= out["dev_accuracy"] <= 1.0
    assert [line.split(":")[0] for line in lines if "dev accuracy" in line][:2] == [
        "warm start step 10", "warm start step 20"]  # the last step is evaluated too


def test_sft_cli_on_chat_jsonl_with_packing(tmp_path, tiny_arith):
    from agentrl.cli import main
    from agentrl.runs.tracking import read_metrics

    path, _ = tiny_arith
    rng = np.random.default_rng(0)
    chats = []
    for _ in range(24):
        a, b, c = (int(x) for x in rng.integers(0, 50, 3))
        chats.append({"messages": [{"role": "user", "content": f"{a}+{b}="}, {"role": "assistant", "content": str(a + b)},
                                   {"role": "user", "content": f"{c}+1="}, {"role": "assistant", "content": str(c + 1)}]})
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in chats))
    rc = main(["sft", str(CONFIGS / "sft_tiny.yaml"), f"model.path={path}", f"data.train={data}",
               "data.eval_fraction=0.25", "data.chat_template=true", "sft.packing=true", "sft.pack_length=128",
               "sft.greedy_eval_tasks=0", "optim.max_steps=6", "optim.batch_size=8", "optim.micro_batch_size=4",
               "optim.eval_every=3", "checkpoint.every=3", *QUIET, "--run-dir", str(tmp_path / "run")])
    assert rc == 0
    rows = read_metrics(tmp_path / "run")
    losses = [r["eval/loss"] for r in rows if "eval/loss" in r]
    assert [r["step"] for r in rows if "eval/loss" in r] == [0, 3, 6] and losses[-1] < losses[0]
    assert all(r["train/rows"] < 8 for r in rows if "train/rows" in r)  # packed: fewer rows than examples
    assert (tmp_path / "run" / "final" / "config.json").exists()
    assert (tmp_path / "run" / "checkpoints" / "step_000006" / "policy" / "config.json").exists()
