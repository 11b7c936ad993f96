"""``agentrl doctor CONFIG`` end to end on deliberately broken setups (a constant verifier, one that
crashes on 30% of episodes, a grader an attack can write to) and on a sound one; its JSON, its
doctor.json and its exit status; one-line errors on bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agentrl.cli import main

ROOT = Path(__file__).resolve().parents[2]
DEMO = str(ROOT / "examples" / "configs" / "cpu_demo.yaml")
HERE = Path(__file__).resolve().parent
FAST = ["model.warm_start.enabled=false", "data.eval_tasks=4"]


def doctor(capsys, *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    status = main(["doctor", *args, "--json"])
    out = capsys.readouterr().out
    return status, json.loads(out)


def by_name(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"]}


def test_a_sound_single_turn_config_passes_and_writes_doctor_json(tmp_path: Path, capsys) -> None:
    status, report = doctor(capsys, DEMO, *FAST, "--episodes", "16", "--out", str(tmp_path))
    checks = by_name(report)
    assert list(checks) == ["tokens", "tools", "mask", "logprobs", "reward", "grader", "cost"]
    assert status == (1 if report["ok"] is False else 0) and report["facts"]["episodes"] == 16
    assert checks["tools"]["status"] == "skip" and checks["grader"]["status"] == "skip"
    assert checks["tokens"]["status"] == "skip"  # cpu_demo prompts in plain text, no chat template
    for name in ("mask", "logprobs"):
        assert checks[name]["status"] == "pass", checks[name]
    assert checks["reward"]["status"] in ("pass", "warn") and checks["cost"]["status"] == "pass"
    assert json.loads((tmp_path / "doctor.json").read_text()) == report


def test_a_constant_verifier_fails(capsys) -> None:
    status, report = doctor(capsys, DEMO, *FAST, f"reward.fn={HERE / 'broken_verifiers.py'}:constant", "--episodes", "16")
    reward = by_name(report)["reward"]
    assert status == 1 and reward["status"] == "fail" and "does not depend on the answer" in reward["advice"]


def test_a_verifier_that_crashes_on_30_percent_fails(capsys) -> None:
    status, report = doctor(capsys, DEMO, *FAST, f"reward.fn={HERE / 'broken_verifiers.py'}:crashes_3_in_10",
                            "--episodes", "40")
    reward = by_name(report)["reward"]
    assert status == 1 and reward["status"] == "fail", reward
    assert "verifier crashed" in reward["advice"] and 0.2 <= reward["details"]["failed"] / 40 <= 0.4


@pytest.mark.slow
def test_a_grader_an_attack_can_write_to_fails(tmp_path: Path, capsys) -> None:
    tasks = tmp_path / "tasks"
    shutil.copytree(ROOT / "tests" / "attacks" / "vulnerable" / "trusts_exit_status", tasks / "trusts_exit_status")
    status, report = doctor(capsys, str(ROOT / "examples" / "configs" / "harbor_grpo_tiny.yaml"),
                            f"env.id=harbor:{tasks}", "--episodes", "2", "--audit-tasks", "1")
    grader = by_name(report)["grader"]
    assert status == 1 and grader["status"] == "fail" and "trusts_exit_status" in grader["summary"]
    assert "exit_zero" in grader["summary"]


@pytest.mark.parametrize("args, message", [
    (["missing.yaml"], "missing.yaml"),
    ([DEMO, "--episodes", "0"], "--episodes must be >= 1"),
    ([DEMO, "--audit-tasks", "-1"], "--audit-tasks must be >= 0"),
    ([DEMO, "--model", "no/such-model-dir"], "--model"),
    ([DEMO, "algo.estimator=nope"], "estimator"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, args: list[str], message: str) -> None:
    assert main(["doctor", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.slow
@pytest.mark.parametrize("config", ["harbor_grpo_tiny.yaml", "terminal_tiny.yaml", "tool_math_grpo_tiny.yaml"])
def test_the_shipped_agent_configs_pass_what_an_untrained_model_can(config: str, capsys) -> None:
    """Token exactness, the mask, engine vs learner and the grader pass on the shipped configs; an untrained
    model (no warm start cached in a fresh cache) makes no call and earns nothing: tools and reward warn,
    never fail, and the reference answers score."""
    status, report = doctor(capsys, str(ROOT / "examples" / "configs" / config), "--episodes", "16",
                            "--audit-tasks", "1")
    checks = by_name(report)
    assert status == 0 and report["ok"], [(c["name"], c["summary"]) for c in report["checks"] if c["status"] == "fail"]
    for name in ("tokens", "mask", "logprobs", "cost"):
        assert checks[name]["status"] == "pass", checks[name]
    assert checks["grader"]["status"] == ("skip" if config.startswith("tool_math") else "pass")
    assert checks["reward"]["details"]["reference"]["mean"] > 0  # the reference answers score (cut episodes may not)
