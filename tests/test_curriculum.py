"""The curriculum (data.curriculum): P(varied) under a Beta posterior by hand, against numeric integration and
simulated groups; the pick's distribution; buckets, hierarchy, decay and checkpoints; and a real run that
spends its rollouts where a group's rewards differ."""

import math
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from agentrl.config import ConfigError, load_config
from agentrl.env import TextEnv, register
from agentrl.training.curriculum import (
    Curriculum,
    beta_moment,
    informative_probability,
    pick,
    varied_probability,
)
from agentrl.training.tasks import TaskSource
from agentrl.types import RewardResult, Task, Trajectory


def _traj(task_id: str, reward: float, group: int = 0, **info) -> Trajectory:
    return Trajectory(prompt_ids=[1], segments=[], reward=reward, task_id=task_id, group_id=group, info=info)


# ------------------------------------------------------------------ the math
def test_beta_moments_by_hand():
    assert beta_moment(1, 1, 4) == pytest.approx(1 / 5)  # uniform: E[p^n] = 1 / (n + 1)
    assert beta_moment(2, 3, 2) == pytest.approx(2 / 5 * 3 / 6)
    assert beta_moment(2, 3, 0) == 1.0
    # uniform prior, n = 2: 1 - 1/3 - 1/3
    assert varied_probability(0, 0, 2, 1, 1) == pytest.approx(1 / 3)
    # after 1 success, 1 failure: Beta(2, 2), n = 2: 1 - 2 * (2/4 * 3/5)
    assert varied_probability(1, 1, 2, 1, 1) == pytest.approx(1 - 2 * 0.3)
    assert varied_probability(5, 5, 1, 1, 1) == 0.0  # one sample never varies
    assert varied_probability(1e6, 0, 4, 1, 1) < 1e-5  # a solved bucket
    assert varied_probability(0, 1e6, 4, 1, 1) < 1e-5  # a hopeless one


def _beta_pdf(p: np.ndarray, a: float, b: float) -> np.ndarray:
    log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    return np.exp(log_norm + (a - 1) * np.log(p) + (b - 1) * np.log1p(-p))


@pytest.mark.parametrize("seed", range(6))
def test_varied_probability_against_integration_and_simulated_groups(seed):
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(0.3, 4, size=2)
    s, f = rng.uniform(0, 10, size=2)
    n = int(rng.integers(2, 9))
    got = varied_probability(s, f, n, a, b)
    # the integral of (1 - p^n - (1-p)^n) Beta(p; a+s, b+f) dp, by the midpoint rule
    p = (np.arange(200_000) + 0.5) / 200_000
    w = _beta_pdf(p, a + s, b + f)
    assert got == pytest.approx(float(np.sum((1 - p**n - (1 - p) ** n) * w) / np.sum(w)), abs=2e-4)
    # and groups drawn from the posterior: the share whose n rewards are not all equal
    rates = rng.beta(a + s, b + f, size=200_000)
    draws = rng.random((200_000, n)) < rates[:, None]
    sim = float(np.mean(draws.any(1) & ~draws.all(1)))
    assert got == pytest.approx(sim, abs=0.01)
    # guided (a group without a success is given one): the share of groups not all successes, both ways
    guided = informative_probability(s, f, n, a, b, guided=True)
    assert guided == pytest.approx(float(np.sum((1 - p**n) * w) / np.sum(w)), abs=2e-4)
    assert guided == pytest.approx(float(np.mean(~draws.all(1))), abs=0.01)


def test_pick_distinct_sorted_and_zero_weights_last():
    rng = np.random.default_rng(0)
    for _ in range(50):
        got = pick([0.0, 0.5, 0.0, 0.2, 0.9], 3, 0.5, rng)
        assert got == sorted(set(got)) and len(got) == 3 and {1, 3, 4} == set(got)
    assert pick([0.1, 0.2], 5, 1.0, rng) == [0, 1]
    assert len(set(pick([0.0, 0.0, 0.0], 2, 1.0, rng))) == 2  # all zero: still k distinct


@pytest.mark.parametrize("temperature", [1.0, 0.5, 0.25])
def test_pick_one_is_drawn_with_probability_weight_to_the_inverse_temperature(temperature):
    weights = [0.1, 0.3, 0.6, 0.45]
    rng = np.random.default_rng(1)
    counts = Counter(pick(weights, 1, temperature, rng)[0] for _ in range(40_000))
    want = np.asarray(weights) ** (1 / temperature)
    want = want / want.sum()
    for i, w in enumerate(want):
        assert counts[i] / 40_000 == pytest.approx(w, abs=0.01)


# ------------------------------------------------------------------ buckets and evidence
def _task(i: int, **meta) -> Task:
    return Task(id=f"t{i}", prompt="p", metadata=meta)


def test_buckets_from_metadata_and_a_clear_error_for_a_missing_field():
    c = Curriculum(["family", "difficulty"], 4)
    assert c.bucket(_task(0, family="sort", difficulty=2)) == "sort/2"
    assert c.bucket(_task(0, family="a/b", difficulty=1)) == "a|b/1"  # a slash in a value is not a level
    assert Curriculum(["id"], 4).bucket(_task(7)) == "t7"
    with pytest.raises(ValueError, match=r"data.curriculum.key: task 't0' has no metadata field 'family' "
                                         r"\(its fields: difficulty; or use 'id'\)"):
        c.bucket(_task(0, difficulty=1))


def test_the_prior_of_a_bucket_is_its_familys_posterior_mean():
    c = Curriculum(["family", "difficulty"], 4, decay=1.0, prior_strength=2.0)
    c.pending = {"a": "sort/1", "b": "sort/1", "c": "grep/1"}
    c.observe([_traj("a", 1.0), _traj("a", 1.0), _traj("b", 1.0), _traj("b", 0.0), _traj("c", 0.0)])
    assert c.counts["sort/1"] == [3.0, 1.0] and c.counts["sort"] == [3.0, 1.0] and c.counts[""] == [3.0, 2.0]
    assert c.pending == {}
    # the pool: Beta(1 + 3, 1 + 2), mean 4/7; family sort: prior 2 * (4/7, 3/7) + (3, 1)
    pa, pb = 2 * 4 / 7, 2 * 3 / 7
    a, b = c.posterior("sort")
    assert (a, b) == pytest.approx((pa + 3, pb + 1))
    # sort/2 was never seen: its prior is sort's mean, its posterior that prior
    m = a / (a + b)
    assert c.posterior("sort/2") == pytest.approx((2 * m, 2 * (1 - m)))
    assert c.weight("sort/2") == pytest.approx(varied_probability(0, 0, 4, 2 * m, 2 * (1 - m)))
    assert c.metrics()["curriculum/buckets"] == 2.0


def test_observe_decays_clips_and_ignores_failed_and_unknown_samples():
    c = Curriculum(["family"], 2, decay=0.5)
    c.pending = {"a": "x"}
    c.observe([_traj("a", 1.0), _traj("a", 0.0)])
    c.pending = {"b": "x"}
    c.observe([_traj("b", 3.0), _traj("b", -2.0), _traj("b", 0.25), _traj("b", float("nan")),
               _traj("b", 1.0, failed=True), _traj("zzz", 1.0)])
    # [1, 1] decayed to [0.5, 0.5]; then 1 (clipped) + 0 (clipped) + 0.25 + 0 (NaN) as successes
    assert c.counts["x"] == pytest.approx([0.5 + 1.25, 0.5 + 2.75])


def test_choose_prefers_buckets_whose_groups_vary():
    c = Curriculum(["kind"], 4, temperature=0.25, decay=1.0)
    c.counts = {"": [420.0, 420.0], "solved": [400.0, 0.0], "hopeless": [0.0, 400.0], "coin": [20.0, 20.0]}
    pool = [_task(i, kind=k) for i, k in enumerate(["solved", "coin", "hopeless", "solved"] * 4)]
    rng = np.random.default_rng(0)
    kinds = Counter(t.metadata["kind"] for _ in range(100) for t in c.choose(pool, 2, rng))
    assert kinds["coin"] == 200  # 4 coin tasks in the pool: both picks, every time
    assert set(c.pending.values()) == {"coin"}
    assert c.metrics()["curriculum/varied_expected"] == pytest.approx(c.weight("coin"))


def test_guided_groups_teach_unless_every_sample_succeeds():
    """With algo.guide a group without a success is given the reference episode: P(informative) = 1 - E[p^n],
    so the hopeless bucket is picked first, then the coin, never the solved one."""
    # hand: Beta(1, 3), n = 2: E[p^2] = 1/4 * 2/5 = 0.1 -> 0.9; unguided 1 - 0.1 - E[(1-p)^2] (3/4 * 4/5 = 0.6) = 0.3
    assert informative_probability(0, 0, 2, 1.0, 3.0, guided=True) == pytest.approx(0.9)
    assert informative_probability(0, 0, 2, 1.0, 3.0, guided=False) == pytest.approx(0.3)
    assert informative_probability(0, 0, 0, 1.0, 3.0, guided=True) == 0.0
    c = Curriculum(["kind"], 4, temperature=0.25, decay=1.0, guided=True)
    c.counts = {"": [420.0, 420.0], "solved": [400.0, 0.0], "hopeless": [0.0, 400.0], "coin": [20.0, 20.0]}
    assert c.weight("hopeless") > c.weight("coin") > 0.9 > 0.01 > c.weight("solved")
    pool = [_task(i, kind=k) for i, k in enumerate(["solved", "coin", "hopeless", "solved"] * 4)]
    rng = np.random.default_rng(0)
    kinds = Counter(t.metadata["kind"] for _ in range(200) for t in c.choose(pool, 2, rng))
    assert kinds["solved"] == 0 and kinds["hopeless"] > kinds["coin"] > 0


# ------------------------------------------------------------------ the task source
class Buckets(TextEnv):
    """Three kinds of task: ``solved`` (every answer right), ``hopeless`` (every answer wrong) and ``coin``
    (right when the answer's CRC is even: an untrained model's samples vary)."""

    def sample_task(self, rng: np.random.Generator) -> Task:
        kind = ["solved", "hopeless", "coin"][int(rng.integers(3))]
        n = int(rng.integers(100))
        return Task(id=f"{kind}-{n}-{int(rng.integers(1 << 30))}", prompt=f"{kind} {n} =", answer=str(n),
                    metadata={"kind": kind, "n": n})

    def score(self, action: str, task: Task) -> RewardResult:
        kind = task.metadata["kind"]
        return RewardResult(1.0 if kind == "solved" else 0.0 if kind == "hopeless" else
                            float(zlib.crc32(action.encode()) % 2 == 0))


def test_a_source_without_a_curriculum_keeps_its_order_and_one_with_it_resumes_exactly():
    env = Buckets()
    plain, again = TaskSource(env, 5), TaskSource(env, 5)
    assert [t.id for t in plain.next(6)] == [t.id for t in again.next(3) + again.next(3)]

    def source() -> TaskSource:
        return TaskSource(env, 5, Curriculum(["kind"], 4), candidates=4)

    def feed(src: TaskSource, tasks: list[Task]) -> None:
        src.observe([_traj(t.id, float(t.metadata["kind"] == "solved" or (t.metadata["kind"] == "coin" and i % 2)))
                     for t in tasks for i in range(4)])

    a = source()
    for _ in range(3):
        feed(a, a.next(4))
    state = a.state_dict()
    assert a.drawn == 12 and state["curriculum"]["counts"]
    b = source()
    b.load_state_dict(state)
    for _ in range(3):
        ta, tb = a.next(4), b.next(4)
        assert [t.id for t in ta] == [t.id for t in tb]
        feed(a, ta)
        feed(b, tb)
    assert a.state_dict()["curriculum"] == b.state_dict()["curriculum"]


def test_config_errors_name_the_field():
    def load(*o: str):
        return load_config(None, ["data.curriculum.key=[kind]", *o])

    assert load().data.curriculum.key == ["kind"]
    for o, msg in [("data.curriculum.candidates=0", "data.curriculum.candidates: expected a count >= 1, got 0"),
                   ("data.curriculum.decay=1.5", "data.curriculum.decay: expected a fraction in (0, 1], got 1.5"),
                   ("data.curriculum.temperature=0", "data.curriculum.temperature: expected a number > 0"),
                   ("data.curriculum.prior_strength=-1", "data.curriculum.prior_strength: expected a number > 0"),
                   ("rollout.n_samples=1", "it needs rollout.n_samples >= 2, got 1")]:
        with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            load(o)
    assert load_config(None, ["data.curriculum.decay=7"]).data.curriculum.decay == 7  # off: not checked


# ------------------------------------------------------------------ a real run
def _coin_share(tmp_path, *extra: str) -> tuple[float, dict]:
    from agentrl.training.trainer import Trainer

    register("test/Buckets-v0", Buckets)
    cfg = load_config(None, ["env.id=test/Buckets-v0", "env.kwargs={}", "env.eval_kwargs={}", "env.dev_kwargs={}",
                             "data.prompts_per_step=4", "rollout.n_samples=4", "rollout.max_new_tokens=6",
                             "data.eval_tasks=2", "log.progress=false", "log.tensorboard=false", "log.eval_every=0",
                             "learner.total_steps=10", "model.warm_start.enabled=false", "learner.max_seconds=0",
                             "algo.drop_zero_std_groups=true", *extra])
    trainer = Trainer(cfg, run_dir=tmp_path)
    kinds: Counter = Counter()
    original, step = trainer.sample, [0]

    def spy(tasks: list[Task]) -> list[Trajectory]:
        if step[0] >= 2:  # once the first batches told the curriculum what each kind does
            kinds.update(t.metadata["kind"] for t in tasks)
        return original(tasks)

    trainer.sample = spy
    metrics = {}
    for step[0] in range(10):
        metrics = trainer.step()
    trainer.rollouts.close()
    counts = trainer.tasks_state.get("curriculum", {}).get("counts", {})  # the checkpoint's, from the producer
    return kinds["coin"] / max(1, sum(kinds.values())), {**metrics, "counts": counts}


def test_a_run_spends_its_rollouts_where_groups_vary(tmp_path):
    plain, m_plain = _coin_share(tmp_path / "plain")
    curriculum, m = _coin_share(tmp_path / "curriculum", "data.curriculum.key=[kind]")
    assert curriculum >= 0.7 and plain <= 0.55, (plain, curriculum)  # expected ~0.85 and 1/3 (32 tasks each)
    assert m["curriculum/buckets"] == 3.0 and 0 < m["curriculum/varied_expected"] <= 1
    assert "curriculum/buckets" not in m_plain and not m_plain["counts"]


def test_the_curriculum_learns_in_the_forked_rollout_worker_too(tmp_path):
    # rollout.async: tasks are drawn and their rewards observed in the rollout process; its counts come back to
    # the trainer with each batch's task state (the checkpoint's)
    _, m = _coin_share(tmp_path, "data.curriculum.key=[kind]", "rollout.async=true")
    assert m["curriculum/buckets"] == 3.0
    samples = {k: sum(c) for k, c in m["counts"].items()}  # decayed sample counts of each kind
    assert samples["coin"] > 2 * (samples["solved"] + samples["hopeless"]), samples


def test_a_key_the_tasks_lack_stops_train_in_one_line_before_any_episode(tmp_path, capsys):
    from agentrl.cli import main

    demo = str(Path(__file__).resolve().parents[1] / "examples" / "configs" / "cpu_demo.yaml")
    code = main(["train", demo, "--run-dir", str(tmp_path / "run"), "model.warm_start.enabled=false", "data.eval_tasks=2",
                 "learner.total_steps=1", "log.progress=false", "log.tensorboard=false",
                 "data.curriculum.key=[difficulty,family]"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("agentrl: config error: data.curriculum.key: task ") and "no metadata field 'family'" in err[0]
    assert "its fields: difficulty, expr, split; or use 'id'" in err[0]
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
