"""One conformance test over the whole registry (Gymnasium's ``tests/envs/test_envs.py`` and
reasoning-gym's ``test_dataset_common.py``): every registered ``agentrl/`` env passes
``check_env``; its reference answer scores 1.0; empty, garbage and random answers score 0.0 and
never raise; the same seed gives the same task."""

from __future__ import annotations

import subprocess
import sys
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import agentrl
from agentrl.env import list_envs

# RepoRepair grades each episode with a real project's whole test suite (seconds each): its registry-wide runs
# are in the slow tier (tests/environments/test_repo_repair.py runs a sample in the main tier)
SLOW = {"agentrl/RepoRepair-v0"}
ENV_IDS = [pytest.param(e, marks=pytest.mark.slow) if e in SLOW else e for e in list_envs()]
EXPECTED = ["agentrl/Arithmetic-v0", "agentrl/Countdown-v0", "agentrl/GSM8K-v0", "agentrl/MATH500-v0",
            "agentrl/AIME24-v0", "agentrl/AMC23-v0", "agentrl/HumanEval-v0", "agentrl/MBPP-v0",
            "agentrl/MBPPRetry-v0", "agentrl/CalculatorMath-v0", "agentrl/PythonToolMath-v0",
            "agentrl/GuessNumber-v0"]
GARBAGE = ["", " ", "\n\n", "asdf qwerty", "\\boxed{}", "```python\n```", "<tool_call>not json</tool_call>",
           "The answer is banana.", "\\boxed{\\boxed{", "1/0", "import os; os._exit(0)"]


def test_every_expected_env_is_registered() -> None:
    missing = [e for e in EXPECTED if e not in list_envs()]
    assert not missing, f"not registered: {missing}"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env(env_id: str) -> None:
    env = gymnasium.make(env_id).unwrapped
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    env.close()
    problems = [str(w.message) for w in caught if "gymnasium" in str(w.filename) or "env_checker" in str(w.message)]
    assert not problems, problems


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_reference_answer_scores_one(env_id: str) -> None:
    env = agentrl.make(env_id)
    for seed in (0, 1, 2):
        obs, info = env.reset(seed=seed)
        assert isinstance(obs, str) and obs
        task = info["task"]
        _, reward, terminated, truncated, step_info = env.step(env.reference_answer(task))
        assert reward == 1.0, (task.id, env.reference_answer(task), step_info)
        assert terminated and not truncated
        assert step_info.get("verified", True) is True
        assert isinstance(step_info.get("reward_components"), dict)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_garbage_and_random_answers_score_zero(env_id: str) -> None:
    env = agentrl.make(env_id)
    env.action_space.seed(0)
    # random text holds ~3% Unicode decimal digits (the last-number parsers read U+1C56 as 6), so a raw
    # random answer matches a one-digit gold answer about one time in ten: those only must not raise
    raw = [env.action_space.sample()[:2000] for _ in range(3)]
    numberless = ["".join(c for c in text if not c.isnumeric()) for text in raw]
    for k, action in enumerate(GARBAGE + numberless + raw):
        env.reset(seed=k)
        _, reward, terminated, truncated, _ = env.step(action)
        assert isinstance(reward, float)
        assert reward == 0.0 or action in raw, (env_id, action)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_same_task(env_id: str) -> None:
    a, b = agentrl.make(env_id), agentrl.make(env_id)
    ids_a = [a.reset(seed=s)[1]["task_id"] for s in range(5)]
    ids_b = [b.reset(seed=s)[1]["task_id"] for s in range(5)]
    assert ids_a == ids_b
    assert a.reset(seed=7)[0] == b.reset(seed=7)[0]
    assert len(set(ids_a)) > 1, "different seeds should give different tasks"
    assert a.sample_task(np.random.default_rng(3)) == b.sample_task(np.random.default_rng(3))
    a.close()
    b.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_dataset_envs_expose_tasks(env_id: str) -> None:
    env = agentrl.make(env_id)
    tasks = getattr(env, "tasks", None)
    if tasks is None:
        pytest.skip("procedural env")
    assert len(tasks) > 0 and len({t.id for t in tasks}) == len(tasks), "task ids must be unique"
    env.close()


def test_envs_list_cli() -> None:
    out = subprocess.run([sys.executable, "-m", "agentrl.cli", "envs", "list"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    listed = out.stdout.split()
    for env_id in EXPECTED:
        assert env_id in listed


def test_importing_an_env_module_first_still_registers_the_builtins() -> None:
    code = "import environments.tool_math, agentrl; assert 'agentrl/GSM8K-v0' in agentrl.list_envs()"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "failed to load" not in out.stderr, out.stderr


def _strings(value: object) -> list[str]:
    """Every string inside a decoded JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(k) + _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def test_every_character_of_the_shipped_benchmarks_is_in_the_text_space() -> None:
    """Prompts are built from these files; one character outside ``TEXT_CHARSET`` (GSM8K holds no-break
    spaces, zero-width spaces and line separators) puts that task's observation outside
    ``observation_space``, so ``check_env`` failed only when ``reset`` happened to draw it."""
    import gzip
    import json

    from agentrl.env import TEXT_CHARSET, text_space
    from environments.sources import DATA_DIR

    charset, space, checked = set(TEXT_CHARSET), text_space(), 0
    for path in sorted(DATA_DIR.iterdir()):
        if not path.name.endswith((".json", ".jsonl", ".jsonl.gz")):
            continue
        text = gzip.open(path, "rt", encoding="utf-8").read() if path.suffix == ".gz" else path.read_text("utf-8")
        rows = [json.loads(text)] if path.suffix == ".json" else [json.loads(line) for line in text.splitlines() if line]
        strings = [s for row in rows for s in _strings(row)]
        outside = sorted({c for s in strings for c in s} - charset)
        assert not outside, f"{path.name}: {[f'U+{ord(c):04X}' for c in outside]} are not in TEXT_CHARSET"
        assert all(s in space for s in strings if len(s) <= space.max_length)
        checked += 1
    assert checked >= 7  # GSM8K (train, test), MATH-500, AIME24, AMC23, HumanEval, MBPP
