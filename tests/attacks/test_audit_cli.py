"""``agentrl tasks audit DIR|ENV_ID``: exit status 1 when a task is vulnerable (its JSON lines say which
attack), 0 on sound tasks, 2 with a one-line error on bad input; the table and its summary line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.evaluation.audit import JSON_KEYS
from environments.audit import BY_NAME

VULNERABLE = Path(__file__).resolve().parent / "vulnerable"



def folder(tmp_path: Path, *names: str) -> Path:
    out = tmp_path / "tasks"
    for name in names:
        shutil.copytree(VULNERABLE / name, out / name)
    return out


@pytest.mark.slow
def test_a_vulnerable_task_fails_the_audit_and_its_json_line_names_the_attack(tmp_path: Path, capsys) -> None:
    assert main(["tasks", "audit", str(folder(tmp_path, "sound", "trusts_exit_status")), "--json", "--jobs", "2"]) == 1
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["task"] for r in rows] == ["sound", "trusts_exit_status"]
    for r in rows:
        assert list(r) == list(JSON_KEYS) and set(r["attacks"]) == set(BY_NAME) and r["seconds"] > 0
        assert r["noop"] == 0.0 and r["noop_passes"] is False and r["error"] is None and r["failed"] == {}, r
    sound, vulnerable = rows
    assert sound["vulnerable"] == [] and set(sound["attacks"].values()) == {0.0}
    assert "exit_zero" in vulnerable["vulnerable"] and vulnerable["attacks"]["exit_zero"] == 1.0


@pytest.mark.slow
def test_a_sound_folder_passes_the_audit(tmp_path: Path, capsys) -> None:
    assert main(["tasks", "audit", str(folder(tmp_path, "sound")), "--json", "-j", "2"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["task"] == "sound" and row["vulnerable"] == [] and row["failed"] == {}


@pytest.mark.slow
def test_the_table_names_each_vulnerable_attack_and_sums_up(tmp_path: Path, capsys) -> None:
    assert main(["tasks", "audit", str(folder(tmp_path, "trusts_exit_status")), "-j", "2"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["task", "no-op", "result", "seconds"]
    assert out[1].split()[:3] == ["trusts_exit_status", "0.00", "VULNERABLE"]
    assert any(line.split()[:3] == ["exit_zero", "reward", "1.00"] for line in out)
    assert out[-1].startswith("0 of 1 task(s) resist every attack; vulnerable: trusts_exit_status (exit_zero")


@pytest.mark.slow
def test_an_env_id_audits_the_tasks_it_draws(capsys) -> None:
    assert main(["tasks", "audit", "agentrl/Terminal-v0", "--n", "1", "--seed", "2", "--json", "-j", "2",
                 "difficulty=1", "families=[csv_sum]"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "csv_sum" in row["task"] and row["noop"] == 0.0 and row["vulnerable"] == [] and row["failed"] == {}


@pytest.mark.slow
def test_attacks_and_skip_choose_what_is_played(tmp_path: Path, capsys) -> None:
    tasks = str(folder(tmp_path, "trusts_exit_status"))
    assert main(["tasks", "audit", tasks, "--json", "--attacks", "exit_zero,path_shims"]) == 1
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert list(row["attacks"]) == ["exit_zero", "path_shims"] and row["vulnerable"] == ["exit_zero"]
    skipped = [name for name in BY_NAME if name != "test_edits"]
    assert main(["tasks", "audit", tasks, "--json", "--skip", ",".join(skipped)]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert list(row["attacks"]) == ["test_edits"] and row["vulnerable"] == [] and row["failed"] == {}


@pytest.mark.parametrize("args, message", [
    (["MISSING"], "no such directory, and not a registered env id"),
    (["agentrl/Nope-v0"], "no such directory, and not a registered env id"),
    (["agentrl/Terminal-v0", "--n", "0"], "--n must be >= 1"),
    (["agentrl/Terminal-v0", "--jobs", "0"], "--jobs must be >= 1"),
    (["agentrl/Arithmetic-v0"], "cannot be audited"),
    (["agentrl/Terminal-v0", "difficulty"], "expected KEY=VALUE"),
    (["DIR", "difficulty=1"], "KEY=VALUE arguments are for an ENV_ID"),
    (["DIR", "--attacks", "exit_zero,nope"], "unknown attack 'nope'; known: forged_reward_file"),
    (["DIR", "--skip", "nope"], "unknown attack 'nope'"),
    (["DIR", "--attacks", " , "], "--attacks needs attack names"),
    (["DIR", "--attacks", "exit_zero", "--skip", "deep_tree"], "give --attacks or --skip, not both"),
    (["DIR", "--skip", ",".join(BY_NAME)], "--skip leaves no attack to play"),
])
def test_bad_input_exits_2_with_one_line(tmp_path: Path, capsys, args: list[str], message: str) -> None:
    paths = {"MISSING": str(tmp_path / "nope"), "DIR": str(folder(tmp_path, "sound"))}
    assert main(["tasks", "audit", *[paths.get(a, a) for a in args]]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("agentrl tasks: error:") and message in err[0], err
