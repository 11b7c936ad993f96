"""A newcomer's first hour with agents (issue 29), driven as a user would: a multi-turn env written
from the README learns by default (its reference policy warm-starts the tiny model, token for token as
RL stitches episodes), a warm start that cannot help stops and says so, an env that raises is one
traceback and a count and stops the run past ``env.max_failure_rate``, a forgotten ``max_turns``
warns and reports what happened, and the traps of users from other frameworks (dict overrides, adapter
kwargs, tool parsers, model names, evaluation on training rows) are one line each.
(The docs' snippets run in tests/test_docs.py; reports and metric keys in tests/test_report.py.)"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from agentrl.cli import main
from agentrl.config import load_config
from agentrl.runs.tracking import read_metrics
from agentrl.types import Task, Trajectory

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CUSTOM_README = ROOT / "examples" / "custom_env" / "README.md"
FAST = ["data.prompts_per_step=4", "rollout.n_samples=4", "data.eval_tasks=8", "log.tensorboard=false",
        "log.progress=false", "checkpoint.save_final=false"]
TINY = ["model.tiny.hidden_size=64", "model.tiny.num_heads=2", "model.tiny.num_layers=2",
        "model.tiny.intermediate_size=128"]
AGENT_FILE = HERE / "adapters" / "user_files" / "agent_func.py"


def guess_files(directory: Path) -> tuple[Path, Path, str]:
    """The custom-env README's guess-the-number env, its config and its command, written to ``directory``."""
    text = CUSTOM_README.read_text(encoding="utf-8").split("## 3. Several turns and tools")[1]
    env = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "class GuessEnv" in b)
    yml = re.findall(r"```yaml\n(.*?)```", text, re.S)[0]
    command = re.findall(r"```bash\n(.*?)```", text, re.S)[0].strip()
    (directory / "guess_env.py").write_text(env)
    (directory / "guess.yaml").write_text(yml)
    return directory / "guess_env.py", directory / "guess.yaml", command


@pytest.fixture()
def readme_guess(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    guess_files(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # PYTHONPATH=. of the documented command
    sys.modules.pop("guess_env", None)
    return tmp_path


@pytest.fixture()
def newcomer_envs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# ------------------------------------------------------------------ 5: the README's guessing game is right
def test_readme_guess_env_compares_numbers_resets_and_its_reference_always_wins(readme_guess: Path) -> None:
    from gymnasium.utils.env_checker import check_env

    import agentrl
    from agentrl.env import reference_episode

    env = agentrl.make("guess_env:GuessEnv")
    env.reset(options={"task": Task("g", "Guess", 10)})
    assert env.step("9")[0] == "higher" and env.step("11")[0] == "lower"  # 9 < 10 as numbers, not strings
    assert env.step("10")[1:3] == (1.0, True)
    for garbage, hint in (("\x1c0", "higher"), ("²", "a number, please"), ("-3", "a number, please"),
                          ("ten", "a number, please"), ("", "a number, please")):  # never an error
        env.reset(options={"task": Task("g", "Guess", 10)})
        assert env.step(garbage)[:3] == (hint, 0.0, False)
    env.reset(options={"task": Task("g", "Guess", 10)})
    assert (env.low, env.high) == (1, 100)  # the episode's state starts afresh
    for n in range(1, 101):  # binary search finds every number within max_turns
        texts, reward = reference_episode(env, Task(f"g{n}", "Guess", n))
        assert reward == 1.0 and len(texts) // 2 <= env.max_turns
    check_env(env, skip_render_check=True)


# ------------------------------------------------------------------ 2: the multi-turn warm start
def test_warm_start_decision_for_multi_turn_envs(readme_guess: Path, newcomer_envs: None,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from agentrl.rollout.build import make_env
    from agentrl.training.warm_start import warm_start_decision

    plain = load_config(None, ["env.id=newcomer_envs:GuessEnv"])
    run, why = warm_start_decision(plain, make_env(plain))
    assert not run and why.startswith("multi-turn env without a reference policy; define reference_action")
    cfg = load_config("guess.yaml")
    assert warm_start_decision(cfg, make_env(cfg)) == (
        True, "auto: tiny model and an env with a reference policy (reference_action)")

    def broken(self):
        raise ValueError("no idea")

    monkeypatch.setattr("guess_env.GuessEnv.reference_action", broken)
    run, why = warm_start_decision(cfg, make_env(cfg))
    assert not run and "reference_action()/step() raised ValueError: no idea at test_newcomer_agents.py:" in why


def _tiny_guess(cfg_overrides: list[str]) -> tuple[object, object, object]:
    from agentrl.models import load_policy
    from agentrl.rollout.build import make_env, resolve_model_path

    cfg = load_config("guess.yaml", [*TINY, *cfg_overrides])
    env = make_env(cfg)
    model, tokenizer = load_policy(cfg, resolve_model_path(cfg, env))
    return cfg, env, (model, tokenizer)


@pytest.mark.parametrize("chat", [False, True])
def test_reference_episodes_are_stitched_as_the_executor_stitches_turns(readme_guess: Path, chat: bool) -> None:
    from agentrl.rollout.build import make_executor
    from agentrl.rollout.engines.hf import HFEngine
    from agentrl.training.experience import Experience

    cfg, env, (model, tok) = _tiny_guess([f"rollout.chat_template={str(chat).lower()}"])
    executor = make_executor(cfg, env, HFEngine(model, tok), tok)
    tasks = [Task(f"guess-{n}", "Guess my number from 1 to 100.", n) for n in (1, 37, 50, 100)]
    trajs = executor.run_scripted(tasks, lambda e: e.reference_action())
    for t, task in zip(trajs, tasks):
        assert t.reward == 1.0 and t.terminated and t.info["end_reason"] == "terminated"
        assert [s.is_action for s in t.segments] == [i % 2 == 0 for i in range(len(t.segments))]
        low, high = 1, 100
        for i, seg in enumerate(t.segments[::2]):  # each action: the binary search's guess and the EOS
            guess = (low + high) // 2
            assert seg.token_ids == tok(str(guess), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            assert t.info["responses"][i] == str(guess)
            if guess != task.answer:  # the feedback: exactly the executor's tokens for it
                hint = "higher" if guess < task.answer else "lower"
                assert t.segments[2 * i + 1].token_ids == executor.feedback_ids(hint, seg.token_ids)
                low, high = (guess + 1, high) if guess < task.answer else (low, guess - 1)
    exp = Experience.from_trajectories(trajs, tok.pad_token_id)  # the loss sees the actions only
    assert int(exp.action_mask.sum()) == sum(t.num_action_tokens for t in trajs)


def test_a_reference_policy_of_several_turns_has_every_episode_played(readme_guess: Path) -> None:
    from agentrl.rollout.engines.hf import HFEngine
    from agentrl.training.warm_start import reference_examples

    cfg, env, (model, tok) = _tiny_guess(["model.warm_start.check_episodes=2"])
    tasks = [Task(f"guess-{n}", "Guess my number from 1 to 100.", n) for n in (1, 37, 50, 100, 7)]
    lines: list[str] = []
    examples = reference_examples(cfg, env, HFEngine(model, tok), tok, tasks, log=lines.append)
    assert [t.task_id for t in examples] == [t.id for t in tasks] and all(isinstance(t, Trajectory) for t in examples)
    assert [t.group_id for t in examples] == list(range(5))
    assert len(lines) == 1 and lines[0].startswith("warm start: 5 reference episodes (")


def test_warm_start_gives_up_when_dev_accuracy_stays_useless(tiny_arith) -> None:
    from agentrl.models import load_causal_lm, load_tokenizer
    from agentrl.training.supervised import train_sft

    path, _ = tiny_arith
    tok = load_tokenizer(path)
    pairs = [(tok("1+2=")["input_ids"], tok("3")["input_ids"] + [tok.eos_token_id])] * 8
    calls = []

    def never() -> float:
        calls.append(1)
        return 0.0

    for floor, evaluations in ((0.01, 2), (0.0, 3)):  # with no floor a 0.0 "improves" on nothing first
        calls.clear()
        result = train_sft(load_causal_lm(path, device="cpu"), pairs, tok.pad_token_id, lr=1e-3, batch_size=4,
                           max_steps=100, eval_every=2, patience=2, min_accuracy=floor, dev_accuracy=never)
        assert len(calls) == evaluations and result.steps == 2 * evaluations and result.best_dev_accuracy == 0.0


def test_warm_start_is_off_when_reference_answers_cannot_fit_the_token_budget() -> None:
    from agentrl.models import load_tokenizer
    from agentrl.rollout.build import make_env, resolve_model_path
    from agentrl.training.warm_start import warm_start_decision

    cfg = load_config(ROOT / "examples" / "configs" / "ppo_ray_tiny.yaml")  # GSM8K, max_new_tokens 8
    env = make_env(cfg)
    run, why = warm_start_decision(cfg, env, load_tokenizer(resolve_model_path(cfg, env)))
    assert not run and "with its EOS, more than rollout.max_new_tokens=8" in why
    assert "raise rollout.max_new_tokens or shorten the reference" in why


@pytest.mark.slow  # the README's command with a shorter RL budget: the warm start, two RL steps, evaluations
def test_guess_env_from_the_readme_learns_with_its_reference_policy(readme_guess: Path, capsys) -> None:
    _, _, command = guess_files(readme_guess)
    assert command == "PYTHONPATH=. agentrl train guess.yaml"
    code, out, err = run_cli(capsys, "train", "guess.yaml", "--run-dir", "runs/guess", "learner.total_steps=2",
                             "data.eval_tasks=100", "log.progress=false", "model.warm_start.cache=false")
    assert code == 0, err[-3000:]
    assert "warm start: on (auto: tiny model and an env with a reference policy (reference_action))" in out
    assert "warm start: 100 reference episodes (5.8 turns on average, mean return 1.00)" in out
    after_warm = float(re.search(r"held-out accuracy: after warm start (\d\.\d+)", out).group(1))
    assert after_warm >= 0.5, out
    rows = [r for r in read_metrics(readme_guess / "runs" / "guess") if "reward/mean" in r]
    assert rows and rows[0]["episode/turns"] > 1.5 and rows[0]["episode/end_reason/failed"] == 0.0


# ------------------------------------------------------------------ 3: an env that raises
def test_env_failures_are_shown_once_counted_and_stop_past_the_rate(tmp_path: Path, newcomer_envs: None,
                                                                  capsys) -> None:
    args = ["train", str(ROOT / "examples" / "custom_env" / "config.yaml"), "env.id=newcomer_envs:BadGuessEnv",
            "env.kwargs={}", "env.register={}", "rollout.max_new_tokens=2", "learner.total_steps=6", *FAST, *TINY]
    code, _, err = run_cli(capsys, *args, "--run-dir", str(tmp_path / "bad"))
    assert code == 1, err[-3000:]
    assert err.count("Traceback (most recent call last)") == 1  # one traceback for one distinct error
    assert re.search(r'File ".*newcomer_envs.py", line \d+, in step', err) and "multi_turn.py" not in err
    assert re.search(r"env errors in training: \d+ x RuntimeError at newcomer_envs.py:\d+", err)
    last = err.strip().splitlines()[-1]
    assert last.startswith("agentrl: error: ") and "env.max_failure_rate=0.2" in last
    assert "RuntimeError: bug in my env at turn 2" in last and "env_errors.log" in last
    assert "bug in my env at turn 2" in (tmp_path / "bad" / "env_errors.log").read_text()
    steps = [r for r in read_metrics(tmp_path / "bad") if "reward/mean" in r]
    assert len(steps) < 6  # stopped early
    code, _, err = run_cli(capsys, *args, "env.max_failure_rate=1", "--run-dir", str(tmp_path / "tolerated"))
    assert code == 0 and err.count("Traceback (most recent call last)") == 1, err[-3000:]
    assert [r["step"] for r in read_metrics(tmp_path / "tolerated") if "reward/mean" in r] == [1, 2, 3, 4, 5, 6]


def _failed(task: str, error: str = "RuntimeError: boom", at: str = "env.py:3") -> Trajectory:
    info = {"failed": True, "error": error, "error_at": at, "traceback": f"Traceback ...\n{error}"}
    return Trajectory(prompt_ids=[1], segments=[], reward=0.0, task_id=task, group_id=0, info=info)


def test_env_failures_counts_by_error_and_where(tmp_path: Path) -> None:
    from agentrl.env import EnvFailureRateError
    from agentrl.rollout.failures import EnvFailures

    lines: list[str] = []
    ok = Trajectory(prompt_ids=[1], segments=[], reward=1.0, task_id="ok", group_id=0)
    f = EnvFailures(tmp_path, max_rate=0.25, min_episodes=8, out=lines.append)
    f.observe([_failed("a"), _failed("b"), _failed("c", at="env.py:9"), ok])
    assert len(lines) == 3 and lines[0].endswith("Traceback ...\nRuntimeError: boom")
    assert lines[2].startswith("env errors in training: 1 x RuntimeError at env.py:3 (shown once above")
    f.check()  # 3 of 4 failed, but fewer than min_episodes ran
    f.observe([ok] * 4)
    with pytest.raises(EnvFailureRateError, match=r"3 of 8 episodes \(38%\) failed in the env, more than "
                                                  r"env.max_failure_rate=0.25; most often RuntimeError: boom"):
        f.check()
    f.observe([ok] * 4)
    f.check()  # 3 of 12: under the rate
    assert (tmp_path / "env_errors.log").read_text().count("Traceback ...") == 2  # one per distinct error


# ------------------------------------------------------------------ 4: a forgotten max_turns
def test_forgotten_max_turns_warns_once_and_reports_max_turns(tmp_path: Path, newcomer_envs: None, capsys) -> None:
    from agentrl.rollout.executors import single_turn
    from agentrl.training.trainer import Trainer

    single_turn._warned_turns.discard("ForgotMaxTurnsEnv")  # once per process: this test may not be its first run
    cfg = load_config(None, ["env.id=newcomer_envs:ForgotMaxTurnsEnv", "model.warm_start.enabled=false",
                             "learner.total_steps=2", "rollout.max_new_tokens=2", *FAST, *TINY])
    Trainer(cfg, run_dir=tmp_path).fit()
    warnings = [x for x in capsys.readouterr().err.splitlines() if "ForgotMaxTurnsEnv" in x]
    assert len(warnings) == 1 and warnings[0].startswith("warning: env ForgotMaxTurnsEnv:")
    assert len(warnings) == 1 and "returned terminated=False with feedback" in warnings[0]
    assert "ForgotMaxTurnsEnv.max_turns is 1" in warnings[0] and "set max_turns > 1" in warnings[0]
    steps = [r for r in read_metrics(tmp_path) if "reward/mean" in r]
    assert len(steps) == 2 and all(r["episode/end_reason/terminated"] <= r["reward/mean"] + 1e-9 for r in steps)


def test_a_single_turn_episode_the_env_did_not_end_ends_by_max_turns(newcomer_envs: None, tiny_arith) -> None:
    import agentrl
    from agentrl.models import load_tokenizer
    from agentrl.rollout.engines.base import Completion, SamplingParams
    from agentrl.rollout.executors import SingleTurnExecutor
    from agentrl.training.metrics import rollout_metrics

    tok = load_tokenizer(tiny_arith[0])
    executor = SingleTurnExecutor(agentrl.make("newcomer_envs:ForgotMaxTurnsEnv"), None, tok, SamplingParams())
    task = Task("guess-7", "Guess my digit:", "7")
    trajs = [executor._episode(task, [1], Completion(tok(guess)["input_ids"] + [tok.eos_token_id], [], "stop"), 0)
             for guess in ("3", "7", "9", "7")]  # the policy stopped; the env answered "higher", 1.0, "lower", 1.0
    assert [t.info["end_reason"] for t in trajs] == ["max_turns", "terminated", "max_turns", "terminated"]
    assert [t.truncated for t in trajs] == [True, False, True, False]
    metrics = rollout_metrics(trajs)
    assert metrics["episode/end_reason/max_turns"] == 0.5 and metrics["episode/end_reason/terminated"] == 0.5


# ------------------------------------------------------------------ 6: dict overrides and adapter kwargs
def test_a_dict_override_replaces_and_a_new_env_id_drops_the_old_kwargs(capsys) -> None:
    demo = ROOT / "examples" / "configs" / "cpu_demo.yaml"
    cfg = load_config(demo, [f"env.id=openrlhf:{AGENT_FILE}", "env.kwargs={dataset: prompts.jsonl}"])
    assert cfg.env.kwargs == {"dataset": "prompts.jsonl"}
    assert load_config(demo, ["env.kwargs.digits=3"]).env.kwargs["operators"] == "+"  # dotted keys merge
    capsys.readouterr()
    cfg = load_config(demo, ["env.id=agentrl/GSM8K-v0"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert cfg.env.kwargs == {} and len(lines) == 1
    message = lines[0]
    assert "env.id changed from agentrl/Arithmetic-v0 (the config) to agentrl/GSM8K-v0" in message
    assert "env.kwargs={'digits': 2" in message and "are dropped" in message


def test_every_adapters_bad_kwarg_is_the_one_line_error(tmp_path: Path, capsys) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "1+1=", "label": "2"}) + "\n")
    demo = str(ROOT / "examples" / "configs" / "cpu_demo.yaml")
    cases = ((f"openrlhf:{AGENT_FILE}", f"{{dataset: {data}, digits: 2}}", "OpenRLHFAgentEnv takes: dataset, "),
             (f"verl:{data}", "{digits: 2}", "VerlDatasetEnv takes: split, reward, limit"),
             (f"agent:{HERE / 'adapters' / 'user_files' / 'openai_agent.py'}:solve", f"{{dataset: {data}, digits: 2}}",
              "BlackBoxAgentEnv takes: dataset, reward, "),
             (f"skyrl:{HERE / 'adapters' / 'user_files' / 'skyrl_env.py'}:RetryAdditionEnv",
              f"{{dataset: {data}, digits: 2}}", "SkyRLEnv takes: dataset, env_config, "))
    for env_id, kwargs, takes in cases:  # the example's Arithmetic kwargs stay behind: a dict replaces
        code, _, err = run_cli(capsys, "train", demo, f"env.id={env_id}", f"env.kwargs={kwargs}",
                               "--run-dir", str(tmp_path / "r"))
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
        assert "unknown keyword 'digits' in env.kwargs; " + takes in lines[0], lines[0]


# ------------------------------------------------------------------ 7, 8: names that name nothing
def test_names_in_env_kwargs_and_model_path_are_one_line_errors(tmp_path: Path, capsys) -> None:
    tool = str(ROOT / "examples" / "configs" / "tool_math_grpo_tiny.yaml")
    cases = [
        ([tool, "env.kwargs.tool_parser=hermess"], "unknown tool_parser 'hermess' (did you mean 'hermes'?); valid:"),
        ([tool, "model.path=smollm2-135m-instrukt"], "did you mean 'smollm2-135m-instruct'?"),
        ([tool, f"env.id=agent:{HERE / 'adapters' / 'user_files' / 'openai_agent.py'}:solve",
          f"env.kwargs={{dataset: {AGENT_FILE}, reward: nope}}"], "env.kwargs.reward: unknown reward 'nope'"),
        ([tool, f"env.id=skyrl:{HERE / 'adapters' / 'user_files' / 'skyrl_env.py'}:NoSuchEnv",
          f"env.kwargs={{dataset: {AGENT_FILE}}}"], "NoSuchEnv"),
    ]
    for argv, expected in cases:
        code, _, err = run_cli(capsys, "train", *argv, "--run-dir", str(tmp_path / "r"))
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and expected in lines[0], err


# ------------------------------------------------------------------ 9: evaluation on training rows is said
def test_evaluation_on_training_rows_is_a_loud_warning(tmp_path: Path) -> None:
    from agentrl.env import fixed_tasks
    from agentrl.evaluation.held_out import held_out_warning
    from agentrl.rollout.build import make_env

    rows = [{"prompt": [{"role": "user", "content": f"{a}+{b}="}], "reward_model": {"ground_truth": str(a + b)}}
            for a in range(5) for b in range(5)]
    for split in ("train", "test"):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:20 if split == "train"
                                                                                          else None][-20:]))
    same = load_config(None, [f"env.id=verl:{tmp_path / 'train.jsonl'}"])
    eval_tasks = fixed_tasks(make_env(same, same.env.eval_kwargs), 8, 0)
    warning = held_out_warning(same.env.id, make_env(same), eval_tasks, same.env.eval_kwargs)
    assert warning.startswith(f"WARNING: 8 of 8 held-out tasks of verl:{tmp_path / 'train.jsonl'}")
    assert "{split}" in warning and "env.eval_kwargs: {dataset: test.jsonl}" in warning
    split = load_config(None, [f"env.id=verl:{tmp_path}/{{split}}.jsonl"])  # rows 5-24 held out: 5-19 overlap
    eval_tasks = fixed_tasks(make_env(split, split.env.eval_kwargs), 20, 0)
    assert held_out_warning(split.env.id, make_env(split), eval_tasks, {}).startswith("WARNING: 15 of 20")
    procedural = load_config(None, [])
    assert held_out_warning("a", make_env(procedural), fixed_tasks(make_env(procedural), 8, 0), {}) is None
    harbor = load_config(None, [f"env.id=harbor:{ROOT / 'examples' / 'tasks'}"])  # a folder: a dataset path was advised
    eval_tasks = fixed_tasks(make_env(harbor, harbor.env.eval_kwargs), 4, 0)
    warning = held_out_warning(harbor.env.id, make_env(harbor), eval_tasks, harbor.env.eval_kwargs)
    assert warning.startswith("WARNING: 4 of 4 held-out tasks of harbor:") and "dataset" not in warning
    assert "env.id: harbor:TASKS/{split} (TASKS/train and TASKS/test" in warning


# ------------------------------------------------------------------ 10: eval writes beside the run, never over
def test_eval_of_a_run_writes_into_its_directory_and_never_overwrites(tmp_path: Path, newcomer_envs: None,
                                                                     capsys) -> None:
    from agentrl.training.trainer import Trainer

    run = tmp_path / "run"
    cfg = load_config(None, ["env.id=newcomer_envs:GuessEnv", "model.warm_start.enabled=false", "learner.total_steps=1",
                             "rollout.max_new_tokens=2", "checkpoint.every=1", *FAST, *TINY])
    Trainer(cfg, run_dir=run).fit()
    capsys.readouterr()
    written = []
    for _ in range(2):
        assert main(["eval", "--model", str(run), "data.eval_tasks=4"]) == 0
        err = capsys.readouterr().err
        written.append(Path(re.search(r"agentrl eval: wrote (\S+)", err).group(1)))
    assert written[0] != written[1] and all(p.is_file() for p in written)
    assert all(p.parent.parent == run / "evals" and p.parent.name.startswith("step_000001-") for p in written)
    assert not Path("eval_out").exists()


# ------------------------------------------------------------------ 11: a run's output is what the user asked for
@pytest.mark.slow  # a subprocess that builds its tiny model afresh and saves a checkpoint
def test_a_run_prints_no_library_noise_but_still_its_warnings(tmp_path: Path) -> None:
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}  # as a user's shell has it
    env.update(AGENTRL_CACHE=str(tmp_path / "cache"), PYTHONPATH=os.pathsep.join([str(HERE), str(ROOT)]))
    done = subprocess.run([sys.executable, "-m", "agentrl.cli", "train", str(ROOT / "examples/configs/cpu_demo.yaml"),
                           "env.id=newcomer_envs:ForgotMaxTurnsEnv", "model.warm_start.enabled=false",
                           "learner.total_steps=1", "rollout.max_new_tokens=2", "--run-dir", str(tmp_path / "run"),
                           *FAST, *TINY, "checkpoint.save_final=true"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "Writing model shards" not in out and "Setting accelerator to CPU" not in out, out[-3000:]
    assert "ForgotMaxTurnsEnv.max_turns is 1" in done.stderr  # our warnings still show
    assert (tmp_path / "run" / "checkpoints").is_dir() and "held-out accuracy" in done.stdout


# ------------------------------------------------------------------ 2: the tool envs' reference policy
@pytest.mark.parametrize("parser", ["hermes", "qwen3_coder", "llama3_json", "pythonic"])
def test_calculator_reference_policy_calls_the_tool_in_its_format_then_answers(parser: str) -> None:
    import agentrl
    from agentrl.env import has_reference_policy, reference_episode
    from environments.tool_parsers import get_parser, render_call

    args = {"expression": "(48 + 24) / 3", "n": 2}
    assert get_parser(parser)(render_call(parser, "calculator", args), {}) == [{"name": "calculator", "arguments": args}]
    env = agentrl.make("agentrl/CalculatorMath-v0", tool_parser=parser)
    assert has_reference_policy(env)
    natalia = env.tasks[0]  # GSM8K: "Natalia sold 48/2 = <<48/2=24>>24 clips ... <<48+24=72>>72"
    texts, reward = reference_episode(env, natalia)
    assert reward == 1.0 and len(texts) == 4 and texts[1] == "<tool_response>\n72\n</tool_response>"
    assert get_parser(parser)(texts[0], {}) == [{"name": "calculator", "arguments": {"expression": "48+24"}}]
    assert texts[2] == "The final answer is $\\boxed{72}$."
    called = [reference_episode(env, t) for t in env.tasks[:50]]
    assert all(r == 1.0 for _, r in called) and sum(len(x) == 4 for x, _ in called) >= 40  # most tasks call it


def test_python_tool_reference_policy_prints_the_calculation() -> None:
    import agentrl
    from agentrl.env import reference_episode

    env = agentrl.make("agentrl/PythonToolMath-v0", base="agentrl/Arithmetic-v0")
    try:
        task = env.sample_task(__import__("numpy").random.default_rng(3))
        texts, reward = reference_episode(env, task)
        assert reward == 1.0 and f"print({task.metadata['expr']})" in texts[0] and texts[2] == task.answer
    finally:
        env.close()
