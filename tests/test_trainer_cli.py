"""The driver end to end on the tiny model, the CLI, and config errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from agentrl.algorithms import ESTIMATORS
from agentrl.config import ConfigError, load_config
from agentrl.runs.checkpoint import latest_checkpoint, load_trainer_state
from agentrl.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "configs" / "cpu_demo.yaml"
SMALL = ["model.warm_start.enabled=false", "data.prompts_per_step=4", "rollout.n_samples=4",
         "data.eval_tasks=8", "log.progress=false", "log.tensorboard=false", "learner.max_seconds=0",
         "algo.drop_zero_std_groups=false"]


def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "agentrl.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


@pytest.mark.parametrize("estimator", [e for e in ESTIMATORS if e != "gae"])
def test_every_estimator_trains_through_the_same_path(tmp_path, estimator):
    kl = ["algo.kl_mode=reward", "algo.kl_coef=0.01"] if estimator == "reinforce" else []
    cfg = load_config(DEMO, SMALL + kl + [f"algo.estimator={estimator}", "learner.total_steps=2",
                                          "algo.drop_zero_std_groups=false"])
    summary = Trainer(cfg, run_dir=tmp_path).fit()
    assert summary["steps"] == 2
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss/policy_loss" in r]
    assert len(steps) == 2 and all(r["samples_used"] == 16 for r in steps)
    if kl:
        assert "kl" in steps[0]


def test_kl_loss_mode_and_multiple_epochs(tmp_path):
    # all-zero rewards give zero advantages: the entropy bonus is what moves the policy off the reference
    cfg = load_config(DEMO, SMALL + ["algo.kl_mode=loss", "algo.kl_coef=0.1", "algo.kl_target=0.01", "algo.entropy_coef=0.05",
                                     "learner.ppo_epochs=2", "learner.mini_batch_size=8",
                                     "learner.total_steps=2", "algo.drop_zero_std_groups=false"])
    trainer = Trainer(cfg, run_dir=tmp_path)
    trainer.fit()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    step2 = [r for r in rows if "loss/kl" in r][-1]
    assert step2["loss/kl"] > 0 and step2["kl_coef"] != 0.1  # adaptive coefficient moved


def test_cli_train_writes_run_artifacts(tmp_path):
    run = tmp_path / "run"
    out = _cli("train", str(DEMO), *SMALL, "learner.total_steps=3", "log.tensorboard=true",
               "checkpoint.every=2", "--run-dir", str(run))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "held-out accuracy" in out.stdout
    assert (run / "config.yaml").exists() and (run / "learning_curve.png").exists()
    assert list((run / "tensorboard").iterdir())
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss/policy_loss" in r] == [1, 2, 3]
    ckpt = latest_checkpoint(run)
    assert ckpt.name == "step_000003"
    assert load_trainer_state(ckpt)["tasks"]["drawn"] == 12
    AutoModelForCausalLM.from_pretrained(ckpt / "policy")  # a normal Hugging Face dir
    saved = load_config(run / "config.yaml")
    assert saved.learner.total_steps == 3


@pytest.mark.parametrize("content,override,message", [
    ("model: [unclosed\n", [], "malformed YAML"),
    ("algo:\n  estimater: rloo\n", [], "unknown key 'algo.estimater'"),
    ("algo:\n  estimator: grpoo\n", [], "algo.estimator: unknown value 'grpoo'; valid: gae,"),
    ("", ["learner.lr=fast"], "learner.lr: expected a number"),
    ("env:\n  id: agentrl/Nope-v0\n", ["model.warm_start.enabled=false"], "unknown environment"),
])
def test_config_errors_are_one_line(tmp_path, content, override, message):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(content)
    out = _cli("train", str(cfg), *override, "--run-dir", str(tmp_path / "r"))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr
    assert "Traceback" not in out.stderr


def test_overrides_and_missing_file():
    cfg = load_config(DEMO, ["algo.estimator=rloo", "learner.lr=1e-4"])
    assert cfg.algo.estimator == "rloo" and cfg.learner.lr == 1e-4
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config("/nonexistent.yaml")
    with pytest.raises(ConfigError, match="dotted.key=value"):
        load_config(None, ["novalue"])


def test_envs_list():
    out = _cli("envs", "list")
    assert out.returncode == 0 and "agentrl/Arithmetic-v0" in out.stdout.split()


def test_the_step_line_says_how_many_groups_varied(tmp_path, capsys, monkeypatch):
    """A step whose groups all scored alike (no update from the reward) printed only "reward 0.000" (issue 46, 4)."""
    from agentrl.config import LogConfig
    from agentrl.runs.tracking import Tracker
    from agentrl.training.metrics import group_metrics
    from agentrl.types import Trajectory

    def ep(group: int, reward: float, **info) -> Trajectory:
        return Trajectory([1], [], reward, "t", group, info=info)

    batch = [ep(0, 1.0), ep(0, 0.0), ep(1, 0.0), ep(1, 0.0), ep(2, 1.0), ep(2, 0.0, failed=True), ep(3, 1.0)]
    assert group_metrics(batch) == {"groups/count": 2.0, "groups/varied": 1.0}  # 2 and 3 have one live sample
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False)  # plain lines, as in a log file
    tracker = Tracker(tmp_path, LogConfig(progress=True, tensorboard=False), total_steps=2)
    tracker.log(1, {"reward/mean": 0.5, **group_metrics(batch)})
    tracker.log(2, {"reward/mean": 0.0, **group_metrics(batch[2:4])})
    tracker.close()
    out = capsys.readouterr().out
    assert "step 1/2 | reward 0.500 | 1/2 groups varied" in out
    assert "step 2/2 | reward 0.000 | 0/1 groups varied: no reward signal" in out


def test_the_closing_line_says_how_accuracy_was_measured_and_its_error():
    """The final line was greedy success with no task count and no error bar (issue 46, finding 4)."""
    from agentrl.runs.tracking import closing_line

    summary = {"eval_before": 0.4, "eval_after": 0.5, "rl_seconds": 12.0, "eval_tasks": 10, "eval_samples": 1,
               "eval_greedy": True}
    line = closing_line(summary, True, 3)
    assert line.startswith("held-out accuracy: after warm start 0.400 -> after RL 0.500 (+0.100) in 3 steps, 12 s")
    assert line.endswith("; greedy on 10 held-out tasks, standard error +-0.158")  # sqrt(0.5 * 0.5 / 10)
    sampled = closing_line({**summary, "eval_samples": 4, "eval_greedy": False, "eval_before": float("nan")}, False, 1)
    assert sampled.endswith("; sampled (4 per task) on 10 held-out tasks, standard error +-0.079")  # n = 40
    assert "standard error" not in closing_line({**summary, "eval_before": float("nan"), "eval_after": float("nan")},
                                                False, 1)


def test_greedy_and_sampled_success_side_by_side(tmp_path, capsys):
    """Issue 46, finding 4: one checkpoint was 0.40 greedy and 0.013 sampled, which is why its training reward
    sat at 0.01; the evaluations before and after RL now also sample one episode per task at the rollout
    temperature, and the closing line gives both (the periodic evaluations stay greedy only)."""
    from agentrl.runs.tracking import closing_line

    summary = {"eval_before": 0.4, "eval_after": 0.5, "rl_seconds": 12.0, "eval_tasks": 10, "eval_samples": 1,
               "eval_greedy": True, "temperature": 1.0, "sampled_before": 0.013, "sampled_after": 0.1}
    assert closing_line(summary, True, 3).endswith("+-0.158; sampled (temperature 1, 1 per task) 0.013 -> 0.100")
    paired = closing_line({**summary, "eval_lift": {"lift": 0.1, "se": 0.0302, "up": 1, "down": 0}}, True, 3)
    assert "+-0.158; lift paired by task +0.100, standard error 0.030 (1 tasks up, 0 down); sampled" in paired
    both = closing_line({**summary, "sampled_lift": {"lift": 0.087, "se": 0.0412, "up": 2, "down": 1}}, True, 3)
    assert both.endswith("0.013 -> 0.100 (paired standard error 0.041; 2 up, 1 down)")
    cfg = load_config(DEMO, SMALL + ["learner.total_steps=2", "log.eval_every=1"])
    out = Trainer(cfg, run_dir=tmp_path).fit()
    assert out["sampled_before"] is not None and 0 <= out["sampled_after"] <= 1
    lift = out["eval_lift"]  # the same held-out tasks before and after, paired
    assert lift["lift"] == pytest.approx(out["eval_after"] - out["eval_before"]) and lift["se"] >= 0
    assert lift["lift"] == pytest.approx((lift["up"] - lift["down"]) / out["eval_tasks"])  # one episode a task
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/accuracy" in r]
    assert ["eval/sampled_accuracy" in r for r in evals] == [True, False, False, True]  # before, 1, 2, after
    assert "; sampled (temperature 1, 1 per task) " in capsys.readouterr().out
    sampled = out["sampled_lift"]  # one sampled episode a task, before and after, paired
    assert sampled["lift"] == pytest.approx(out["sampled_after"] - out["sampled_before"])
    assert sampled["lift"] == pytest.approx((sampled["up"] - sampled["down"]) / out["eval_tasks"])
    off = Trainer(load_config(DEMO, SMALL + ["learner.total_steps=1", "eval.sampled=false"]),
                  run_dir=tmp_path / "off").fit()
    assert off["sampled_after"] is None
