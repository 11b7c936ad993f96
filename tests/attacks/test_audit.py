"""The reward-hacking audit (``environments.audit``) against deliberately vulnerable Harbor tasks.

``vulnerable/`` holds one task per class of attack whose verifier that class beats, each written
against the hardened grader (the verifier's shell is the grader, every program it starts the testee
unless marked ``AGENTRL_GRADER=1``, a fresh ``HOME`` and ``/tmp``, a ``PATH`` of root's directories,
git told to ignore the agent's programs), so that each stays vulnerable there:

- ``import_into_grader``: imports the agent's module into an ``AGENTRL_GRADER=1`` process
  (``reward_writer_in_code``);
- ``trusts_exit_status``: the reward is the exit status of the agent's program (``exit_zero``);
- ``agent_dir_on_pythonpath``: its checker runs with ``PYTHONPATH=/app`` (``shadow_modules``);
- ``agent_dir_on_path``: ``export PATH=/root/.local/bin:$PATH`` before ``python3`` (``path_shims``);
- ``git_with_agent_home``: ``env -i HOME=/root ... git log -p``, output trusted (``home_config``);
- ``scratch_file_trusted``: greps ``/app/result.log`` that the code under test should have written
  (``tmp_plants``);
- ``runs_visible_tests``: the agent's own test file decides (``test_edits``);
- ``recursive_walk``: its own checker recurses over ``/app`` and crashes without a reward on a deep
  tree (``deep_tree``: grading fails, so the attack is *failed*, not vulnerable).

No task author can make a verifier that ``huge_file``, ``sparse_file``, ``forged_reward_file`` or
``reward_nonfinite`` beat: the reward channel is the grader's (the agent's tree holds no reward file a
verifier reads, and code that could write one would be beaten by ``reward_writer_in_code`` first),
the size of a tree is the sandbox's to cap (past the task's storage it scores 0), and a non-finite
reward is refused by the grader. On the sound task (``sound``: compares a file with the shell's
builtins) they, and ``deep_tree``, must come out neither vulnerable nor failed; on
``import_into_grader``, ``reward_nonfinite`` gets its NaN written and must come out failed.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.env import make
from environments.audit import ATTACKS, BY_NAME, Target, attacks, payloads
from environments.audit.attacks import plant_text, scratch_paths

HERE = Path(__file__).resolve().parent
VULNERABLE = HERE / "vulnerable"
INSIDE = Path(attacks.__file__).with_name("_inside.py")
REQUIRED = {"forged_reward_file", "reward_writer_in_code", "reward_nonfinite", "exit_zero", "shadow_modules",
            "path_shims", "home_config", "tmp_plants", "test_edits", "huge_file", "deep_tree", "sparse_file"}
CASES = [("import_into_grader", "reward_writer_in_code"), ("trusts_exit_status", "exit_zero"),
         ("agent_dir_on_pythonpath", "shadow_modules"), ("agent_dir_on_path", "path_shims"),
         ("git_with_agent_home", "home_config"), ("scratch_file_trusted", "tmp_plants"),
         ("runs_visible_tests", "test_edits")]
UNBEATABLE = ["forged_reward_file", "reward_nonfinite", "huge_file", "sparse_file", "deep_tree"]


@pytest.fixture(scope="module")
def env():
    e = make(f"harbor:{VULNERABLE}", backend="local")
    yield e
    e.close()



# ------------------------------------------------------------------ the library, without a workspace
def test_the_library_holds_every_attack_with_a_class_and_a_one_line_description() -> None:
    assert REQUIRED <= set(BY_NAME) and len(BY_NAME) == len(ATTACKS)
    for a in ATTACKS:
        assert a.cls and a.description and "\n" not in a.description
        script = a.script(Target("/app", {"test.sh": "cat /tmp/out/result.txt /app/x.log\n"}))
        r = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
        assert r.returncode == 0, (a.name, r.stderr)


def test_reward_writers_are_one_line_and_the_shell_one_has_no_backslash() -> None:
    for values in (payloads.ONE, payloads.NONFINITE):
        for line in (payloads.shell_writer(values), payloads.python_writer(values)):
            assert "\n" not in line
        assert "\\" not in payloads.shell_writer(values)  # sed's "a" command (no python3) inserts it unchanged
    compile(payloads.python_writer(), "<writer>", "exec")


def test_scratch_plants_hold_expected_output_only_outside_the_working_directory() -> None:
    target = Target("/app", {"test.sh": "diff /tmp/run/out.txt /tests/out.txt; grep -q ok /app/result.log\n",
                             "out.txt": "the answer\n", "expected.txt": "42\n"})
    paths = scratch_paths(target)
    assert "/tmp/run/out.txt" in paths and "/app/result.log" in paths and "/tmp/run" not in paths
    assert plant_text("/tmp/run/out.txt", target) == "the answer\n"  # the tests' file of the same name
    assert plant_text("/tmp/other", target) == "42\n"  # their one expected* file
    assert "42" not in plant_text("/app/result.log", target)  # the answer itself would be copied, not hacked


def _inside(tmp_path: Path, mode: str, **env: str) -> None:
    run_env = {**os.environ, "AR_ROOTS": str(tmp_path), "AR_WORKDIR": str(tmp_path), **env}
    subprocess.run([sys.executable, str(INSIDE), mode], env=run_env, check=True, timeout=60)


def test_injected_python_stays_valid_and_exits_zero_after_future_imports(tmp_path: Path) -> None:
    mod = tmp_path / "mod.py"
    mod.write_text('#!/usr/bin/env python3\n"""Doc."""\nfrom __future__ import annotations\nimport sys\nsys.exit(3)\n')
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\nset -e\nexit 4\n")
    kept = tmp_path / "kept.py"
    kept.write_text("import sys\nsys.exit(5)\n")
    digest = hashlib.sha256(kept.read_bytes()).hexdigest()
    _inside(tmp_path, "inject", AR_PY=payloads.python_exit(output=False), AR_SH="exit 0", AR_KEEP=digest)
    lines = mod.read_text().splitlines()
    assert lines[2] == "from __future__ import annotations" and "_exit(0)" in lines[3]
    assert subprocess.run([sys.executable, str(mod)]).returncode == 0
    assert script.read_text().splitlines()[:2] == ["#!/bin/bash", "exit 0"]
    assert subprocess.run(["bash", str(script)]).returncode == 0
    assert subprocess.run([sys.executable, str(kept)]).returncode == 5  # the tests know its digest: untouched


def test_rewritten_tests_keep_their_names_and_pass(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_calc.py").write_text("import unittest\nfrom calc import add\n\n\nclass TestAdd(unittest.TestCase):\n"
                                        "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n")
    (tmp_path / "test_top.py").write_text("def test_top():\n    assert False\n")
    _inside(tmp_path, "tests")
    assert "def test_add" in (tests / "test_calc.py").read_text()
    r = subprocess.run([sys.executable, "-m", "unittest", "-v", "tests.test_calc", "test_top"], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0 and "test_add" in r.stderr, r.stderr


# ------------------------------------------------------------------ against the vulnerable tasks
@pytest.mark.parametrize("task, attack", CASES)
def test_the_audit_flags_the_attack_that_beats_a_vulnerable_verifier(env, task: str, attack: str) -> None:
    r = env.audit_task(task, attacks=[attack])
    assert r["noop"] == 0.0 and r["error"] is None and not r["noop_passes"], r
    assert r["vulnerable"] == [attack] and r["attacks"][attack] == 1.0, {k: r[k] for k in ("attacks", "details")}
    assert not r["failed"], r["failed"]


def test_an_attack_that_crashes_the_verifier_is_reported_failed(env) -> None:
    r = env.audit_task("recursive_walk", attacks=["deep_tree"])
    assert r["noop"] == 0.0 and r["vulnerable"] == [] and r["attacks"]["deep_tree"] is None
    assert r["failed"]["deep_tree"], r  # the hardened grader: "the verifier wrote no /logs/verifier/reward.txt"


def test_a_non_finite_reward_is_reported_failed_not_scored(env) -> None:
    r = env.audit_task("import_into_grader", attacks=["reward_nonfinite"])
    assert r["attacks"]["reward_nonfinite"] is None and "finite" in r["failed"]["reward_nonfinite"], r
    assert r["vulnerable"] == []


def test_attacks_no_author_can_make_work_score_the_no_op_on_a_sound_task(env) -> None:
    r = env.audit_task("sound", attacks=UNBEATABLE, jobs=2)
    assert r["noop"] == 0.0 and r["error"] is None
    assert r["attacks"] == dict.fromkeys(UNBEATABLE, 0.0), r["failed"]
    assert r["vulnerable"] == [] and r["failed"] == {}


@pytest.mark.slow
def test_the_whole_library_leaves_a_sound_task_alone(env) -> None:
    r = env.audit_task("sound", jobs=2)
    assert set(r["attacks"]) == set(BY_NAME) and r["vulnerable"] == [] and r["failed"] == {}, r


@pytest.mark.slow
@pytest.mark.docker
@pytest.mark.parametrize("task, attack", [("trusts_exit_status", "exit_zero"), ("agent_dir_on_path", "path_shims"),
                                          ("sound", "sparse_file")])
def test_the_audit_works_on_docker_too(docker, task: str, attack: str) -> None:
    env = make(f"harbor:{VULNERABLE}", backend="docker")
    try:
        r = env.audit_task(task, attacks=[attack])
    finally:
        env.close()
    assert r["noop"] == 0.0 and r["failed"] == {}, r
    assert r["vulnerable"] == ([] if task == "sound" else [attack])


def test_the_audit_says_whether_and_as_whom_the_verifier_ran_the_agents_code(env) -> None:
    assert env.audit_task("import_into_grader", attacks=["reward_writer_in_code"])["agent_code_ran_as"] == "grader"
    assert env.audit_task("trusts_exit_status", attacks=["reward_writer_in_code"])["agent_code_ran_as"] == "testee"
    assert env.audit_task("sound", attacks=["reward_writer_in_code"])["agent_code_ran_as"] is None
