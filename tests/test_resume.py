"""Checkpoints survive a crash: SIGKILL a training run mid-step, resume it, lose nothing.

With a fixed seed the resumed run's metrics and final weights equal an uninterrupted run's:
the checkpoint holds the policy, optimizer, scheduler, task position, KL coefficient and every
RNG state, and evaluation samples under a forked RNG so it never shifts training's randomness.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from agentrl.config import load_config
from agentrl.runs.checkpoint import latest_checkpoint, list_checkpoints, load_trainer_state, truncate_metrics
from agentrl.runs.tracking import read_metrics
from agentrl.training.tasks import TaskSource
from agentrl.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "configs" / "cpu_demo.yaml"
# zero rewards from the untrained tiny model: the entropy bonus and the KL loss move the weights,
# the adaptive KL coefficient moves too, and the eval at step 3 must not disturb anything
ARGS = ["model.warm_start.enabled=false", "data.prompts_per_step=3", "rollout.n_samples=3", "data.eval_tasks=4",
        "rollout.max_new_tokens=4", "log.progress=false", "log.tensorboard=false", "learner.max_seconds=0",
        "algo.drop_zero_std_groups=false", "algo.entropy_coef=0.05", "algo.kl_mode=loss", "algo.kl_coef=0.1",
        "algo.kl_target=0.01", "learner.lr=1e-3", "learner.total_steps=6", "checkpoint.every=2",
        "checkpoint.keep=5", "log.eval_every=3"]
COMPARED = ("reward/mean", "response_length/mean", "truncated/frac", "loss/policy_loss", "loss/entropy",
            "loss/kl", "loss/grad_norm", "kl_coef", "samples_used", "eval/accuracy", "eval/response_length")


def _env() -> dict[str, str]:
    # one thread: the same reduction order in every process, and less contention on small machines
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _train(run: Path, *extra: str, background: bool = False):
    cmd = [sys.executable, "-m", "agentrl.cli", "train", str(DEMO), *ARGS, *extra]
    log = open(run.parent / f"{run.name}.log", "a")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT)
    if background:
        return proc
    assert proc.wait(timeout=900) == 0, (run.parent / f"{run.name}.log").read_text()[-3000:]
    return proc


def _rows(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def _kill_after_step(run: Path, step: int, timeout: float = 600) -> None:
    """Start a run and SIGKILL it as soon as the metrics row of ``step`` appears (mid next step)."""
    proc = _train(run, "--run-dir", str(run), background=True)
    deadline = time.monotonic() + timeout
    path = run / "metrics.jsonl"
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and any(r.get("step") == step and "reward/mean" in r for r in read_metrics(run)):
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def _assert_same_state(a: dict, b: dict) -> None:
    assert a["step"] == b["step"] and a["tasks"] == b["tasks"] and a["scheduler"] == b["scheduler"]
    assert a["kl_coef"] == pytest.approx(b["kl_coef"], rel=1e-9)
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys()
    for k in sa:
        for name, value in sa[k].items():
            torch.testing.assert_close(value, sb[k][name], rtol=1e-6, atol=1e-8)
    assert torch.equal(a["rng"]["torch"], b["rng"]["torch"])


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = load_file(str(a / "policy" / "model.safetensors")), load_file(str(b / "policy" / "model.safetensors"))
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-6, atol=1e-7)


@pytest.mark.slow  # three training processes
def test_sigkill_mid_step_then_resume_matches_an_uninterrupted_run(tmp_path):
    full, killed = tmp_path / "full", tmp_path / "killed"
    _train(full, "--run-dir", str(full))
    _kill_after_step(killed, 3)

    ckpt = latest_checkpoint(killed)
    saved = load_trainer_state(ckpt)
    assert saved["step"] in (2, 4) and ckpt.name == f"step_{saved['step']:06d}"
    # the killed run's checkpoint is the uninterrupted run's checkpoint of the same step
    twin = full / "checkpoints" / ckpt.name
    _assert_same_state(saved, load_trainer_state(twin))
    _assert_same_weights(ckpt, twin)

    # resuming restores everything of that checkpoint (in process, without training)
    cfg = load_config(DEMO, ARGS)
    trainer = Trainer(cfg, run_dir=killed, resume=True)
    assert trainer.step_idx == saved["step"]
    assert trainer.tasks.state_dict() == saved["tasks"] and trainer.tasks.drawn == 3 * saved["step"]
    restored = {"step": trainer.step_idx, "tasks": trainer.tasks.state_dict(), "kl_coef": trainer.kl_ctl.value,
                "scheduler": trainer.learner.scheduler.state_dict(), "rng": saved["rng"],
                "optimizer": trainer.learner.optimizer.state_dict()}
    _assert_same_state(restored, saved)
    weights = load_file(str(ckpt / "policy" / "model.safetensors"))
    for name, p in trainer.model.state_dict().items():
        if name in weights:
            torch.testing.assert_close(p, weights[name])
    rows = _rows(killed)
    assert max(r["step"] for r in rows) == saved["step"]  # rows after the checkpoint were set aside
    del trainer

    _train(killed, "--resume", str(killed))
    got, want = _rows(killed), _rows(full)
    train_steps = [r["step"] for r in got if "reward/mean" in r]
    assert train_steps == [1, 2, 3, 4, 5, 6]  # nothing lost, nothing duplicated
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g["step"] == w["step"] and set(g) == set(w)
        for key in COMPARED:
            if key in w:
                assert g[key] == pytest.approx(w[key], rel=1e-5, abs=1e-7), (g["step"], key)
    final_killed, final_full = latest_checkpoint(killed), latest_checkpoint(full)
    assert final_killed.name == final_full.name == "step_000006"
    _assert_same_state(load_trainer_state(final_killed), load_trainer_state(final_full))
    _assert_same_weights(final_killed, final_full)


def test_truncate_metrics_sets_aside_rows_after_the_checkpoint_and_a_half_line(tmp_path):
    lines = [json.dumps({"step": s, "x": s}) for s in (0, 1, 2, 3)] + ['{"step": 4, "x"']
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines))
    assert truncate_metrics(tmp_path, 2) == 2
    kept = [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert kept == [0, 1, 2]
    assert len((tmp_path / "metrics.discarded.jsonl").read_text().splitlines()) == 2
    assert truncate_metrics(tmp_path, 2) == 0  # idempotent


def test_task_source_position_round_trips(tiny_arith):
    from environments.math_envs import GSM8KEnv

    for env in (tiny_arith[1], GSM8KEnv(split="test", limit=5)):
        a = TaskSource(env, seed=3)
        a.next(7)  # crosses an epoch of the 5-task dataset
        state = json.loads(json.dumps(a.state_dict(), default=lambda o: o.tolist()))
        b = TaskSource(env, seed=99)
        b.load_state_dict(state)
        assert [t.id for t in a.next(6)] == [t.id for t in b.next(6)]


def test_keep_last_k_and_atomic_temp_dirs_are_ignored(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    from agentrl.models import train_tokenizer
    from agentrl.runs.checkpoint import save_checkpoint

    tok = train_tokenizer(["1+1=2"], 300)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1))
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, model, tok, {"x": step}, keep=2)
    (tmp_path / "checkpoints" / ".tmp_step_000004").mkdir()  # a crash during the next save
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step_000002", "step_000003"]
    assert load_trainer_state(latest_checkpoint(tmp_path))["x"] == 3


@pytest.mark.slow  # starts vLLM
def test_checkpoint_policy_dir_loads_in_transformers_and_vllm(tmp_path, tiny_arith):
    pytest.importorskip("vllm")
    from agentrl.models import load_causal_lm, load_tokenizer
    from agentrl.rollout.engines.base import SamplingParams
    from agentrl.rollout.engines.hf import HFEngine
    from agentrl.rollout.engines.vllm import VLLMEngine
    from agentrl.runs.checkpoint import save_checkpoint

    model, tok = load_causal_lm(tiny_arith[0], device="cpu"), load_tokenizer(tiny_arith[0])
    policy = save_checkpoint(tmp_path, 7, model, tok, {}) / "policy"
    prompts = [tok("12+34=", add_special_tokens=False)["input_ids"], tok("5+6=", add_special_tokens=False)["input_ids"]]
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    want = HFEngine(load_causal_lm(policy, device="cpu"), load_tokenizer(policy)).generate(prompts, greedy)
    engine = VLLMEngine(policy, seed=0, dtype="float32", max_model_len=256)
    got = engine.generate(prompts, greedy)
    assert [c.token_ids for c in got] == [c.token_ids for c in want]
