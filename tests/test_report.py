"""``agentrl report RUN_DIR``: PNG panels and a markdown summary from ``metrics.jsonl``, with the
multi-turn and asynchronous metrics (issue 29), shares on a 0-1 axis; every metric key real runs
write is described in docs/metrics.md."""

import json
import re
from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.config import RunConfig, load_config, save_config
from agentrl.evaluation.report import PANELS, write_report, y_range

ROOT = Path(__file__).resolve().parents[1]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _fake_run(run):
    save_config(RunConfig(), run / "config.yaml")
    rows = [{"step": 0, "eval/accuracy": 0.25, "eval/pass@1": 0.25}]
    for s in range(1, 5):
        rows.append({"step": s, "reward/mean": 0.1 * s, "kl": 0.01 * s, "loss/entropy": 2.0 - 0.1 * s,
                     "response_length/mean": 10 + s, "time/generate": 0.5, "time/update": 0.25, "time/step": 0.8,
                     "episode/turns": 1.0 + s, "episode/end_reason/terminated": 0.2 * s,
                     "episode/end_reason/max_turns": 1 - 0.2 * s, "staleness/mean": 0.5, "staleness/max": 1.0,
                     "mismatch/logprob_abs_diff_mean": 0.01, "failed/count": 0.0})
    rows[-1].update({"eval/accuracy": 0.5, "eval/pass@1": 0.5})
    text = "\n".join(json.dumps(r) for r in rows) + '\n{"step": 5, "rew'  # a crashed run's half line
    (run / "metrics.jsonl").write_text(text)
    (run / "checkpoints" / "step_000004").mkdir(parents=True)
    (run / "checkpoints" / "step_000004" / "trainer_state.pt").write_bytes(b"")


def test_report_renders_every_panel_and_a_summary(tmp_path):
    _fake_run(tmp_path)
    md = write_report(tmp_path)
    for name in PANELS:
        png = tmp_path / "report" / f"{name}.png"
        assert png.read_bytes()[:8] == PNG_MAGIC, name
    text = md.read_text()
    assert "| reward/mean | 0.1 → 0.4 |" in text
    assert "| 4 | 0.500 | 0.500 |" in text  # the eval table: step, accuracy, pass@1
    assert "| generate | 0.500 |" in text and "checkpoints/step_000004" in text
    assert "![reward](report/reward.png)" in text and "estimator: `group_norm`" in text
    assert "| episode/turns | 2 → 5 |" in text and "| episode/end_reason/max_turns | 0.8 → 0.2 |" in text
    assert "| staleness/mean | 0.5 → 0.5 |" in text and "![end_reasons](report/end_reasons.png)" in text


def test_shares_are_drawn_from_0_to_1_and_other_panels_from_0():
    assert y_range("eval_accuracy", [0.05, 0.1]) == (0.0, 1.02)  # one task of twenty is not a crash
    assert y_range("end_reasons", [0.5]) == (0.0, 1.02)
    assert y_range("reward", [0.3, 0.4]) == (0.0, None)
    assert y_range("reward", [-2.0, 0.4])[0] < -2.0


def test_staleness_keys_are_the_same_every_step():
    import torch

    from agentrl.algorithms import staleness_metrics

    mask = torch.ones(2, 3)
    fresh = staleness_metrics(torch.full((2, 3), 5), mask, 5, max_staleness=2)
    stale = staleness_metrics(torch.tensor([[4, 4, 4], [3, 5, 5]]), mask, 5, max_staleness=2)
    assert set(fresh) == set(stale) == {"staleness/mean", "staleness/max", "staleness/frac_0", "staleness/frac_1",
                                        "staleness/frac_2"}
    assert fresh["staleness/frac_0"] == 1.0 and fresh["staleness/frac_2"] == 0.0
    assert stale["staleness/frac_1"] == 0.5 and stale["staleness/frac_2"] == 0.5


def documented_keys() -> list[re.Pattern[str]]:
    """The keys docs/metrics.md describes (its tables' first column), ``<name>`` as a wildcard."""
    text = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    keys = [k for row in re.findall(r"^\| (.*?) \|", text, re.M) for k in re.findall(r"`([^`]+)`", row)]
    return [re.compile(re.sub(r"<[a-z]+>", r"[^/]+", re.escape(k).replace(r"\<", "<").replace(r"\>", ">")) + "$")
            for k in keys]


@pytest.mark.slow  # two short runs: an asynchronous PPO run with a critic and KL, and a multi-turn GRPO run
def test_every_metric_key_of_real_runs_is_documented(tmp_path, monkeypatch):
    from agentrl.runs.tracking import read_metrics
    from agentrl.training.trainer import Trainer

    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    small = ["model.warm_start.enabled=false", "data.prompts_per_step=4", "rollout.n_samples=4", "data.eval_tasks=4",
             "log.tensorboard=false", "log.progress=false", "checkpoint.save_final=false", "learner.total_steps=2",
             "log.eval_every=1", "eval.n_samples=2", "eval.k=[1,2]", "model.tiny.hidden_size=64",
             "model.tiny.num_heads=2", "model.tiny.num_layers=2", "model.tiny.intermediate_size=128"]
    runs = {"ppo": ["algo.estimator=gae", "algo.kl_mode=reward", "algo.kl_coef=0.01", "algo.drop_zero_std_groups=false",
                    "rollout.async=true", "rollout.max_staleness=1"],
            "multi_turn": ["env.id=newcomer_envs:GuessEnv", "env.kwargs={}", "rollout.max_new_tokens=4",
                           "algo.drop_zero_std_groups=true", "algo.max_refill_rounds=1"]}
    keys: set[str] = set()
    for name, extra in runs.items():
        cfg = load_config(ROOT / "examples" / "configs" / "cpu_demo.yaml", small + extra)
        Trainer(cfg, run_dir=tmp_path / name).fit()
        keys |= {k for r in read_metrics(tmp_path / name) for k in r if k != "step"}
    assert {"critic/value_loss", "staleness/frac_1", "episode/end_reason/max_turns", "eval/pass@2",
            "dynamic/refill_rounds"} <= keys
    patterns = documented_keys()
    missing = sorted(k for k in keys if not any(p.match(k) for p in patterns))
    assert not missing, f"metric keys not described in docs/metrics.md: {missing}"


def test_report_cli_and_missing_metrics(tmp_path, capsys):
    _fake_run(tmp_path)
    assert main(["report", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip().endswith("report.md")
    empty = tmp_path / "empty"
    empty.mkdir()
    try:
        write_report(empty)
    except FileNotFoundError as e:
        assert "metrics.jsonl" in str(e)
    else:
        raise AssertionError("a run without metrics must fail clearly")
