"""Evaluation: pass@k and maj@k by hand, on fixed samples through real envs, and ``agentrl eval``."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from agentrl.env import fixed_tasks, list_envs, make
from agentrl.evaluation.metrics import (
    TaskResult,
    evaluate,
    maj_at_k,
    majority_answer,
    paired_lift,
    pass_at_k,
    summarize,
    tables,
)
from agentrl.models import load_tokenizer
from agentrl.rollout.engines.base import Completion, SamplingParams
from agentrl.rollout.executors import SingleTurnExecutor, encode_prompt
from agentrl.runs.episodes import read_eval

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------- pure math
@pytest.mark.parametrize("n,c,k,want", [
    (4, 1, 1, 0.25), (4, 2, 2, 5 / 6), (4, 1, 2, 0.5), (5, 0, 3, 0.0), (3, 2, 2, 1.0), (4, 4, 1, 1.0),
    (10, 3, 5, 1 - 21 / 252),  # C(7,5)=21, C(10,5)=252
])
def test_pass_at_k_by_hand(n, c, k, want):
    assert pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12)


def test_paired_lift_by_hand_against_a_loop_and_on_degenerate_input():
    """The lift of the evaluation after RL over the one before, paired task by task, and its standard error."""
    got = paired_lift([1, 0, 1, 0], [1, 1, 0, 1])  # differences 0, 1, -1, 1: mean 0.25, variance 2.75 / 3
    assert (got.lift, got.up, got.down) == (0.25, 2, 1) and got.se == pytest.approx(math.sqrt(2.75 / 3 / 4))
    ten = paired_lift([0.0] * 100, [1.0] * 10 + [0.0] * 90)  # ten more solved of 100, none lost
    assert ten.lift == pytest.approx(0.1) and ten.se == pytest.approx(0.0301511, abs=1e-6)
    rng = __import__("random").Random(7)
    for n in (2, 3, 17, 100):
        b = [rng.choice([0.0, 0.25, 0.5, 1.0]) for _ in range(n)]
        a = [rng.choice([0.0, 0.25, 0.5, 1.0]) for _ in range(n)]
        d = [x - y for x, y in zip(a, b)]
        mean = sum(d) / n
        se = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n)
        got = paired_lift(b, a)
        assert got.lift == pytest.approx(mean) and got.se == pytest.approx(se)
        assert (got.up, got.down) == (sum(x > 0 for x in d), sum(x < 0 for x in d))
    assert paired_lift([1.0], [0.0]) == paired_lift([1.0], [0.0]) and paired_lift([1.0], [0.0]).se == 0.0
    assert paired_lift([0.5] * 5, [0.5] * 5).se == 0.0  # nothing moved: no spread
    with pytest.raises(ValueError, match="same tasks twice, got 2 and 3"):
        paired_lift([1, 0], [1, 0, 1])
    with pytest.raises(ValueError, match="got 0 and 0"):
        paired_lift([], [])


def test_pass_at_k_equals_the_binomial_formula_and_stays_stable():
    for n in range(1, 30):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1.0 if n - c < k else 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)
    # binomials of this size overflow floats; the product form does not
    big = pass_at_k(2000, 7, 1000)
    assert 0.99 < big <= 1.0 and math.isfinite(big)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_majority_vote_by_hand():
    assert majority_answer(["3", "4", "4", None]) == "4"
    assert majority_answer(["3", "4"]) == "3"  # a tie goes to the answer seen first
    assert majority_answer([None, None]) is None
    answers, correct = ["3", "4", "4", None], [True, False, False, False]
    assert maj_at_k(answers, correct, 1) == 1.0
    assert maj_at_k(answers, correct, 2) == 1.0
    assert maj_at_k(answers, correct, 3) == 0.0
    assert maj_at_k([None, None], [False, False], 2) == 0.0


def test_summary_and_tables_by_hand():
    r = [TaskResult("a", "d1", "1", [True, False], [1, 0], [3, 5], ["7", "8"]),
         TaskResult("b", "d1", "2", [False, False], [0, 0], [2, 2], ["1", None]),
         TaskResult("c", "d2", "1", [True, True], [1, 1], [4, 4], None)]
    s = summarize(r, [1, 2, 4])
    assert s["accuracy"] == pytest.approx(3 / 6) and s["pass@1"] == pytest.approx(0.5)
    assert s["pass@2"] == pytest.approx(2 / 3) and "pass@4" not in s
    assert "maj@1" not in s  # one dataset has no parsed answers
    t = tables(r, [1, 2])
    assert t["datasets"]["d1"]["maj@2"] == pytest.approx(0.5) and t["datasets"]["d1"]["pass@2"] == 0.5
    assert set(t["difficulties"]) == {"d1 | 1", "d1 | 2", "d2 | 1"}


def test_maj_at_1_is_never_reported_missing():
    """The default eval.k=[1] printed "maj@1: not computed" for every env without parsed answers (issue 46, 5)."""
    from agentrl.evaluation.metrics import skipped_metrics

    r = [TaskResult("a", "d", "1", [True, False, True, True], [1, 0, 1, 1], [3] * 4, None)]
    assert skipped_metrics(r, [1]) == {}
    assert skipped_metrics(r, [1, 4]) == {"maj@4": "the env gives no parsed final answers to vote on "
                                                   "(info['parsed'] from step)"}
    assert skipped_metrics(r, [8]) == {"pass@8": "needs eval.n_samples >= 8 (it is 4)",
                                       "maj@8": "needs eval.n_samples >= 8 (it is 4)"}


def test_task_results_group_samples_and_a_failed_episode_does_not_vote():
    from agentrl.evaluation.metrics import task_results
    from agentrl.types import Segment, Task, Trajectory

    def traj(reward, info):
        return Trajectory([1], [Segment([2, 3], True, [0.0, 0.0])], reward, "t", 0, info=info)

    task = Task(id="t", prompt="1+1=", answer="2", metadata={"level": 3})
    trajs = [traj(1.0, {"parsed": "2", "reward_components": {"correct": 1.0}}),
             traj(0.0, {"failed": True, "error": "boom"}),
             traj(0.5, {"parsed": "3", "reward_components": {"correct": 0.0, "format": 0.5}})]
    (r,) = task_results([task], trajs, 3, "d")
    assert r.difficulty == "3" and r.correct == [True, False, False] and r.answers == ["2", None, "3"]
    assert summarize([r], [1, 3])["maj@3"] == 1.0
    with pytest.raises(ValueError):
        task_results([task], trajs[:2], 3, "d")


# ---------------------------------------------------------------------------------- fixed samples
class ScriptedEngine:
    """Returns, for each prompt, the next of the responses scripted for it (in sampling order)."""

    def __init__(self, tokenizer, script: dict[tuple[int, ...], list[str]]):
        self.tokenizer, self.script = tokenizer, {k: list(v) for k, v in script.items()}

    def generate(self, prompts, params):
        out = []
        for p in prompts:
            ids = self.tokenizer(self.script[tuple(p)].pop(0), add_special_tokens=False)["input_ids"]
            out.append(Completion(ids + [self.tokenizer.eos_token_id], [0.0] * (len(ids) + 1), "stop"))
        return out


# per task, sample by sample: C correct, W1/W2 two different wrong answers (n = 4)
PATTERNS = [["C", "W1", "W1", "W2"], ["W1", "C", "C", "W2"], ["W1", "W1", "W1", "W1"], ["C", "C", "C", "C"]]
# pass@k = mean over tasks of 1 - C(n-c,k)/C(n,k) with c = 1, 2, 0, 4
HAND = {"pass@1": (0.25 + 0.5 + 0 + 1) / 4, "pass@2": (0.5 + 5 / 6 + 0 + 1) / 4, "pass@4": 3 / 4,
        "accuracy": 7 / 16}
# maj@k: majority of the first k parsed answers (ties: first seen) -> t0: C, C, W1; t1: W1, W1, C
HAND_MAJ = {"maj@1": 2 / 4, "maj@2": 2 / 4, "maj@4": 2 / 4}
WRONG = {
    "agentrl/Arithmetic-v0": ("-1", "-2"),
    "agentrl/GSM8K-v0": ("The final answer is $\\boxed{-123457}$.", "The final answer is $\\boxed{-99}$."),
    "agentrl/HumanEval-v0": ("def nothing():\n    return None\n", "raise SystemExit(0)\n"),
}
KWARGS = {"agentrl/Arithmetic-v0": {"split": "test", "template": "{expr}=", "bare_answer": True},
          "agentrl/GSM8K-v0": {"split": "test"}, "agentrl/HumanEval-v0": {}}


@pytest.mark.parametrize("env_id", list(WRONG))
def test_pass_at_k_on_fixed_samples_matches_hand_computed(env_id, tiny_arith):
    if env_id not in list_envs():
        pytest.skip(f"{env_id} is not registered yet")
    env = make(env_id, **KWARGS[env_id])
    tokenizer = load_tokenizer(tiny_arith[0])
    tasks = fixed_tasks(env, 4, seed=0)
    script = {}
    for task, pattern in zip(tasks, PATTERNS):
        env.reset(options={"task": task})
        prompt = tuple(encode_prompt(tokenizer, task.prompt, False))
        responses = {"C": env.reference_answer(task), "W1": WRONG[env_id][0], "W2": WRONG[env_id][1]}
        script[prompt] = [responses[p] for p in pattern]
    executor = SingleTurnExecutor(env, ScriptedEngine(tokenizer, script), tokenizer, SamplingParams())
    got = evaluate(executor, tasks, SamplingParams(), n_samples=4, ks=[1, 2, 4])
    for key, want in HAND.items():
        assert got[key] == pytest.approx(want, abs=1e-12), key
    if env_id == "agentrl/HumanEval-v0":
        assert not any(k.startswith("maj@") for k in got)  # code has no parsed answer to vote on
    else:
        for key, want in HAND_MAJ.items():
            assert got[key] == pytest.approx(want, abs=1e-12), key


# ---------------------------------------------------------------------------------- the CLI
def test_cli_eval_on_benchmark_slices_with_the_tiny_model(tmp_path):
    envs = [e for e in ("agentrl/GSM8K-v0", "agentrl/HumanEval-v0") if e in list_envs()]
    args = [a for e in envs for a in ("--env", e)]
    out = subprocess.run(
        [sys.executable, "-m", "agentrl.cli", "eval", "--model", "tiny", "--out", str(tmp_path), *args,
         "eval.max_tasks=2", "eval.n_samples=3", "eval.k=[1,2,3]", "rollout.max_new_tokens=6",
         "model.tiny.max_position_embeddings=4096"],
        capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "pass@2" in out.stdout and "per difficulty" in out.stdout
    report = json.loads((tmp_path / "eval.json").read_text())
    assert set(report["datasets"]) == set(envs)
    assert report["sampling"]["temperature"] == 1.0  # several samples: sampled, not greedy
    for env_id, summary in report["datasets"].items():
        samples = [s for s in report["samples"] if s["dataset"] == env_id]
        assert len(samples) == 2 and all(len(s["correct"]) == 3 for s in samples)
        for k in (1, 2, 3):  # the reported pass@k is the estimator over the recorded samples
            want = sum(pass_at_k(3, sum(s["correct"]), k) for s in samples) / 2
            assert summary[f"pass@{k}"] == pytest.approx(want)
    assert "maj@3" in report["datasets"]["agentrl/GSM8K-v0"]
    _, episodes = read_eval(tmp_path)  # the record of every sample behind the numbers (docs/trajectories.md)
    assert len(episodes) == 2 * 3 * len(envs) and {e.dataset for e in episodes} == set(envs)
    assert all(e.version == 2 and [s.role for s in e.segments] == ["prompt", "action"] for e in episodes)


def test_model_tiny_overrides_a_config_that_names_another_model(tmp_path):
    """`agentrl eval --config C --model tiny` evaluates the tiny model even when C names a real one (it
    once evaluated C's model: the untrained-baseline figures of issue 30 were SmolLM2's twice)."""
    from agentrl.config.loading import load_config
    from agentrl.evaluation.command import run_eval

    cfg = load_config(None, ["model.path=smollm2-135m-instruct", "env.id=agentrl/Arithmetic-v0",
                             "eval.max_tasks=2", "rollout.max_new_tokens=4"])
    report = run_eval(cfg, tmp_path, model_path="tiny")
    assert "/models/tiny-" in report["model"] and "SmolLM2" not in report["model"]
    assert report["overall"]["tasks"] == 2
