"""``agentrl report RUN_DIR``: PNG panels and a markdown summary from ``metrics.jsonl``."""

import json

from agentrl.cli import main
from agentrl.config import RunConfig, save_config
from agentrl.evaluation.report import PANELS, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _fake_run(run):
    save_config(RunConfig(), run / "config.yaml")
    rows = [{"step": 0, "eval/accuracy": 0.25, "eval/pass@1": 0.25}]
    for s in range(1, 5):
        rows.append({"step": s, "reward/mean": 0.1 * s, "kl": 0.01 * s, "loss/entropy": 2.0 - 0.1 * s,
                     "response_length/mean": 10 + s, "time/generate": 0.5, "time/update": 0.25, "time/step": 0.8})
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
