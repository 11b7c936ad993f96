"""The mistakes a newcomer makes first (issue 15, finding 3 and the run-directory rules of finding 5),
driven through ``agentrl`` as a user types them: each ends in one line naming the problem and the
fix, exit status 2, no traceback; ``--debug`` shows the traceback instead."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from agentrl.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "custom_env"
CONFIG = str(EXAMPLE / "config.yaml")


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """``agentrl ARGV`` in process; returns (exit status, what it wrote to stderr)."""
    code = main(list(argv))
    return code, capsys.readouterr().err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture()
def on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))


def test_missing_model_path_says_no_such_directory(capsys, tmp_path):
    code, err = run_cli(capsys, "train", CONFIG, f"model.path={tmp_path}/no/model", "--run-dir", str(tmp_path / "r"))
    line = one_line(err)
    assert code == 2 and "model.path: no such directory" in line and "tiny" in line
    code, err = run_cli(capsys, "eval", "--model", "./runs/none")
    assert code == 2 and "--model: no such directory './runs/none'" in one_line(err)


def test_a_directory_without_a_model_is_one_line(capsys, tmp_path):
    """An empty directory, or a cached warm start (its weights without config or tokenizer), as --model or
    model.path: one line before any loading (was the tokenizer library's traceback)."""
    empty = tmp_path / "empty"
    empty.mkdir()
    code, err = run_cli(capsys, "eval", "--model", str(empty))
    assert code == 2 and f"--model: '{empty}' holds no model: no config.json" in one_line(err)
    warm = tmp_path / "warmstart" / "0123abcd"
    warm.mkdir(parents=True)
    (warm / "model.safetensors").write_bytes(b"")
    (warm / "result.json").write_text("{}")
    code, err = run_cli(capsys, "train", CONFIG, f"model.path={warm}", "--run-dir", str(tmp_path / "r"))
    assert code == 2 and "model.path: " in one_line(err) and "is a cached warm start" in err
    assert not (tmp_path / "r").exists()  # nothing made before the check


def test_a_hub_id_that_is_not_there_is_one_line(capsys, tmp_path, on_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no hub from tests
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    code, err = run_cli(capsys, "train", CONFIG, "model.path=nobody/no-model", "--run-dir", str(tmp_path / "r"))
    line = one_line(err)  # before any model is loaded: no minute of hub retries
    assert code == 2 and "model.path: 'nobody/no-model' is not a directory" in line and "HF_HUB_OFFLINE" in line


def test_custom_env_without_pythonpath_names_the_fix(capsys, tmp_path, monkeypatch):
    monkeypatch.delitem(__import__("sys").modules, "reverse_env", raising=False)
    code, err = run_cli(capsys, "train", CONFIG, "--run-dir", str(tmp_path / "r"))
    line = one_line(err)
    assert code == 2 and "no module named 'reverse_env'" in line and "PYTHONPATH" in line


def test_wrong_class_name_lists_the_env_classes(capsys, tmp_path, on_path):
    code, err = run_cli(capsys, "train", CONFIG, "env.id=reverse_env:ReverseEnvv", "env.kwargs.min_len=3",
                        "--run-dir", str(tmp_path / "r"))
    line = one_line(err)
    assert code == 2 and "has no class 'ReverseEnvv'" in line and "env classes there: ReverseEnv" in line


def test_bad_env_kwargs_key_lists_the_keywords(capsys, tmp_path, on_path):
    code, err = run_cli(capsys, "train", CONFIG, "env.kwargs={max_length: 4}", "--run-dir", str(tmp_path / "r"))
    line = one_line(err)
    assert code == 2 and "unknown keyword 'max_length' in env.kwargs" in line and "min_len, max_len" in line


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed here")
def test_wandb_project_without_wandb_gives_the_install_hint(capsys, tmp_path, on_path):
    code, err = run_cli(capsys, "train", CONFIG, "log.wandb_project=mine", "--run-dir", str(tmp_path / "r"))
    assert code == 2 and "pip install wandb" in one_line(err)
    assert not (tmp_path / "r").exists()  # refused before anything was written


def test_report_and_resume_of_a_missing_directory(capsys, tmp_path):
    code, err = run_cli(capsys, "report", str(tmp_path / "nothing"))
    assert code == 2 and "no such run directory" in one_line(err)
    code, err = run_cli(capsys, "train", CONFIG, "--resume", str(tmp_path / "nothing"))
    assert code == 2 and "cannot resume" in one_line(err) and "no such directory" in err
    (tmp_path / "empty").mkdir()
    code, err = run_cli(capsys, "train", CONFIG, "--resume", str(tmp_path / "empty"))
    assert code == 2 and "holds no checkpoint" in one_line(err) and "--overwrite" in err


def test_a_new_run_never_goes_into_a_directory_that_holds_one(capsys, tmp_path, on_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward/mean": 0.5}) + "\n")
    (run / "config.yaml").write_text("kept: true\n")
    code, err = run_cli(capsys, "train", CONFIG, "--run-dir", str(run), "learner.total_steps=1")
    line = one_line(err)
    assert code == 2 and "already holds a run" in line and f"--resume {run}" in line and "--overwrite" in line
    # a launch that fails (here: a resume with a bad kwarg) never overwrites the run's config
    (run / "checkpoints" / "step_000001").mkdir(parents=True)
    code, err = run_cli(capsys, "train", CONFIG, "--resume", str(run), "env.kwargs={nope: 1}")
    assert code == 2 and "unknown keyword 'nope'" in one_line(err)
    assert (run / "config.yaml").read_text() == "kept: true\n"
    code, err = run_cli(capsys, "sft", str(ROOT / "examples/configs/sft_tiny.yaml"), "--run-dir", str(run))
    assert code == 2 and "already holds a run" in one_line(err)


def test_debug_shows_the_traceback(capsys, tmp_path):
    from agentrl.config import ConfigError

    with pytest.raises(ConfigError, match="no such directory"):
        main(["--debug", "train", CONFIG, "model.path=./no/such/model", "--run-dir", str(tmp_path / "r")])


def test_reward_server_rejects_a_bad_port(capsys):
    with pytest.raises(SystemExit) as e:
        main(["serve-reward", "--port", "99999"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "port 99999 is out of range" in err.strip().splitlines()[-1]


def test_a_negative_call_tokens_is_one_line(capsys, tmp_path):
    code, err = run_cli(capsys, "train", CONFIG, "learner.call_tokens=-5", "--run-dir", str(tmp_path / "r"))
    line = one_line(err)
    assert code == 2 and "learner.call_tokens: expected a token count > 0, 0 (no cap) or -1 (auto), got -5" in line
    assert not (tmp_path / "r").exists()
