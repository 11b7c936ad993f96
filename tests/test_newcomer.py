"""A newcomer's first hour (issue 15), driven through ``agentrl`` as a user would: an env written
from the README trains with the tiny model by default (warm start on), multi-turn episodes get the
turns they are given and say how they ended, options go anywhere, resume counts the steps that ran,
``eval --model RUN`` evaluates as the run did, run directories never mix, the reward server says
where it is and refuses what it does not have, and the docs say what the code does.
(The one-line errors of finding 3 are in tests/test_cli_errors.py.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from agentrl.cli import main
from agentrl.runs.tracking import read_metrics

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXAMPLE = ROOT / "examples" / "custom_env"
FAST = ["data.prompts_per_step=4", "rollout.n_samples=4", "data.eval_tasks=8", "log.tensorboard=false"]
SMALL_WARM = ["model.warm_start.examples=32", "model.warm_start.max_steps=4", "model.warm_start.batch_size=8",
              "model.warm_start.eval_every=2", "model.warm_start.eval_tasks=8", "model.warm_start.cache=false"]
TINY = ["model.tiny.hidden_size=64", "model.tiny.num_heads=2", "model.tiny.num_layers=2",
        "model.tiny.intermediate_size=128"]


def readme_blocks(path: Path, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", path.read_text(encoding="utf-8"), re.S)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture()
def readme_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The README's env file, try-it snippet and config, written where a user would put them."""
    readme = ROOT / "README.md"
    section = readme.read_text(encoding="utf-8").split("## Write your own environment")[1].split("\n## ")[0]
    py = re.findall(r"```python\n(.*?)```", section, re.S)
    yml = re.findall(r"```yaml\n(.*?)```", section, re.S)
    (tmp_path / "sort_env.py").write_text(py[0])
    (tmp_path / "try_it.py").write_text(py[1])
    (tmp_path / "sort.yaml").write_text(yml[0])
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # PYTHONPATH=. of the documented command
    return tmp_path


# ------------------------------------------------------------------ 8: the docs say what the code does
def test_readme_snippet_prints_what_its_comment_says(readme_env: Path) -> None:
    out = subprocess.run([sys.executable, "try_it.py"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(readme_env), str(ROOT)])})
    promised = re.search(r"# -> (.*)", (readme_env / "try_it.py").read_text()).group(1)
    assert out.returncode == 0 and out.stdout.strip() == promised, out.stderr[-2000:]


def test_readme_and_example_teach_sample_task_and_score() -> None:
    sys.path.insert(0, str(EXAMPLE))
    try:
        from reverse_env import ReverseEnv
    finally:
        sys.path.remove(str(EXAMPLE))
    assert {"sample_task", "score"} <= set(vars(ReverseEnv)) and "step" not in vars(ReverseEnv)
    example = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    assert "def score(self, action, task)" in example and "def score(self, action, task)" in readme_blocks(
        ROOT / "README.md", "python")[0]
    for words in ("feedback_role", "rollout.max_total_tokens", "episode/end_reason", "chat template"):
        assert words in example


# ------------------------------------------------------------------ 1 (+8): a README env learns by default
@pytest.mark.slow  # a short warm start and one RL step with the tiny model
def test_env_from_the_readme_trains_with_a_warm_start_by_default(readme_env: Path, capsys) -> None:
    code, out, err = run_cli(capsys, "train", "sort.yaml", "--run-dir", "runs/sort", *FAST, *TINY, *SMALL_WARM,
                             "learner.total_steps=1")
    assert code == 0, err[-2000:]
    assert "warm start: on (auto: tiny model and an env with reference answers)" in out
    assert "warm start: 4 steps" in out
    assert re.search(r"held-out accuracy: after warm start \d\.\d+ -> after RL \d\.\d+ .* in 1 step,", out), out


# ------------------------------------------------------------------ 2 (+7): multi-turn episodes get their turns
@pytest.mark.slow  # one RL step of a 4-turn env with the tiny model
def test_multi_turn_episodes_use_their_turns_and_say_how_they_ended(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    run, cfg = tmp_path / "guess", tmp_path / "guess.yaml"
    cfg.write_text("env:\n  id: newcomer_envs:GuessEnv\nrollout:\n  max_new_tokens: 4\nlearner:\n  lr: 3.0e-4\n")
    code, out, err = run_cli(capsys, "train", str(cfg), "--run-dir", str(run), *FAST, *TINY,
                             "learner.total_steps=1", "log.samples_every=1", "checkpoint.save_final=false")
    assert code == 0, err[-2000:]
    assert "warm start: off (multi-turn env without a reference policy" in out and "after warm start" not in out
    assert "held-out accuracy: before RL" in out
    step = next(r for r in read_metrics(run) if "reward/mean" in r)
    # every turn of a 4-token budget is cut off, yet the episode goes on to the env's 4 turns
    assert step["episode/turns"] > 3.0 and step["episode/end_reason/episode_budget"] == 0.0
    assert step["episode/end_reason/max_turns"] + step["episode/end_reason/terminated"] == pytest.approx(1.0)
    samples = [s for x in (run / "samples.jsonl").read_text().splitlines() if (s := json.loads(x))["split"] == "train"]
    assert len(samples) == 4 and all(s["prompt"] == "Guess my digit:" and s["step"] == 1 for s in samples)
    assert any(s["turns"] > 1 and ("higher" in s["response"] or "lower" in s["response"]) for s in samples)
    # 7: the progress line is whole in a log that is not a terminal
    line = next(x for x in out.splitlines() if x.startswith("step 1/1 | reward"))
    assert "s/step (tasks" in line and line.rstrip().endswith(")")


# ------------------------------------------------------------------ 4, 5 (+1, 7): one run's life from the CLI
@pytest.mark.slow  # three short trainings and an evaluation of the example env
def test_run_lifecycle_overwrite_resume_eval(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    cfg = str(EXAMPLE / "config.yaml")
    run = tmp_path / "run"
    (run / "checkpoints" / "step_000009").mkdir(parents=True)  # an old run in the way
    (run / "metrics.jsonl").write_text(json.dumps({"step": 9, "reward/mean": 0.1}) + "\n")
    # options between the config and the overrides; the estimator by the name users know
    code, out, err = run_cli(capsys, "train", cfg, "--run-dir", str(run), "algo.estimator=grpo", "--overwrite",
                             *FAST, *SMALL_WARM, "learner.total_steps=2", "checkpoint.every=1")
    assert code == 0, err[-2000:]
    assert "dev tasks are held out of the training tasks" in out  # ReverseEnv has no dev split
    assert "after warm start" in out and "in 2 steps," in out
    assert not (run / "checkpoints" / "step_000009").exists()
    assert [r["step"] for r in read_metrics(run) if "reward/mean" in r] == [1, 2]
    assert "estimator: group_norm" in (run / "config.yaml").read_text()  # saved configs stay canonical

    code, out, err = run_cli(capsys, "train", cfg, "--resume", str(run), "learner.total_steps=3", *FAST, *SMALL_WARM)
    assert code == 0, err[-2000:]
    assert "in 1 step (steps 3-3 of a resumed run)" in out
    final = [r for r in read_metrics(run) if "eval/accuracy" in r][-1]

    code, out, err = run_cli(capsys, "eval", "--model", str(run), "--out", str(tmp_path / "ev"), "eval.k=[1,4]")
    assert code == 0, err[-2000:]
    assert f"using the run's config {run / 'config.yaml'}" in err
    report = json.loads((tmp_path / "ev" / "eval.json").read_text())
    assert report["envs"] == ["custom/Reverse-v0"] and report["overall"]["tasks"] == 8
    assert report["overall"]["accuracy"] == pytest.approx(final["eval/accuracy"])  # as the run itself measured
    assert "pass@4: not computed, needs eval.n_samples >= 4 (it is 1)" in out  # says why, does not vanish


# ------------------------------------------------------------------ 6: the reward server
def test_reward_server_says_where_it_is_and_refuses_unknown_rewards() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE / "rewards")])}
    env.pop("AGENTRL_REWARD_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-m", "agentrl.cli", "serve-reward", "--port", "0", "--workers", "1",
                             "--plugin", "rewards_test_plugins:length_reward", "--default-reward", "length_reward"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        url = re.search(r"on (http://127\.0\.0\.1:\d+) ", line).group(1)
        assert "math" in line and "default: length_reward" in line
        got = httpx.post(url + "/get_reward", json={"query": ["abcd"]}, timeout=30).json()
        assert got["rewards"] == [pytest.approx(0.04)]  # the server's default reward, not math
        bad = httpx.post(url + "/score", json={"reward": "nope", "items": [{"response": "1", "label": "1"}]},
                         timeout=30)
        assert bad.status_code == 400 and "unknown reward 'nope'" in bad.text and "math" in bad.text
        bad = httpx.post(url + "/get_reward?reward=nope", json={"query": ["1"]}, timeout=30)
        assert bad.status_code == 400
    finally:
        proc.terminate()
        proc.wait(30)


# ------------------------------------------------------------------ 7: envs list says what each env is
def test_envs_list_gives_each_env_a_description_and_its_kwargs(capsys) -> None:
    code, out, _ = run_cli(capsys, "envs", "list")
    lines = out.splitlines()
    i = next(i for i, x in enumerate(lines) if x.startswith("agentrl/Arithmetic-v0"))
    assert code == 0 and "Arithmetic expressions" in lines[i]
    assert lines[i + 1].strip().startswith("kwargs: digits=2") and "split='train'" in lines[i + 1]


def test_warm_start_decision_says_why(monkeypatch) -> None:
    from agentrl.config import load_config
    from agentrl.rollout.build import make_env
    from agentrl.training.warm_start import warm_start_decision

    monkeypatch.syspath_prepend(str(HERE))
    guess = load_config(None, ["env.id=newcomer_envs:GuessEnv"])
    assert warm_start_decision(guess, make_env(guess)) == (
        False, "multi-turn env without a reference policy; define reference_action(self) -> str "
               "(examples/custom_env/README.md)")
    monkeypatch.setattr("newcomer_envs.GuessEnv.max_turns", 1)  # one guess: reference answers score
    assert warm_start_decision(guess, make_env(guess))[0] is True
    monkeypatch.setattr("newcomer_envs.GuessEnv.reference_answer", lambda self, task: "no digit")
    run, why = warm_start_decision(guess, make_env(guess))
    assert not run and "no usable reference answers (its reference answer scores 0.0" in why
    hub = load_config(None, ["env.id=newcomer_envs:GuessEnv", "model.path=org/model"])
    assert warm_start_decision(hub, make_env(hub))[1].startswith("model.path is not tiny")
    forced = load_config(None, ["env.id=newcomer_envs:GuessEnv", "model.warm_start.enabled=false"])
    assert warm_start_decision(forced, make_env(forced)) == (False, "model.warm_start.enabled=false")
