"""``harbor:examples/tasks`` through the registry's conformance checks (tests/environments/test_conformance.py,
which covers the ``agentrl/`` ids): Gymnasium's ``check_env``, reference answers (the oracle's work as one
action of tool calls) score 1.0, garbage and random answers 0.0 without raising, the same seed gives
the same task. Every episode runs in real workspaces; none is left after."""

from __future__ import annotations

import warnings

import pytest
import test_conformance as conformance
from gymnasium.utils.env_checker import check_env
from harborkit import EXAMPLES
from wscheck import leftovers

import agentrl

HARBOR = f"harbor:{EXAMPLES}"


@pytest.fixture(scope="module", autouse=True)
def no_workspace_left():
    yield
    assert not leftovers()


def test_check_env() -> None:
    env = agentrl.make(HARBOR)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    env.close()
    problems = [str(w.message) for w in caught if "gymnasium" in str(w.filename) or "env_checker" in str(w.message)]
    assert not problems, problems


def test_reference_answer_scores_one() -> None:
    conformance.test_reference_answer_scores_one(HARBOR)


@pytest.mark.slow  # some twenty episodes, each graded in a fresh workspace: ~15 s on a busy machine
def test_garbage_and_random_answers_score_zero() -> None:
    conformance.test_garbage_and_random_answers_score_zero(HARBOR)


def test_same_seed_same_task() -> None:
    conformance.test_same_seed_same_task(HARBOR)
    conformance.test_dataset_envs_expose_tasks(HARBOR)
