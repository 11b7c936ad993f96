"""The warm start's curve in the run directory (issue 46, finding 8: ``agentrl view`` showed no warm-start
curves though the warm start was most of a short run's wall time): the bounded per-step loss of
``train_sft``, ``warm_start.jsonl`` written by a real short warm start, the same curve copied from the cache
when the warm start is loaded from it, nothing written without a run directory or a warm start, and the
viewer's reading of it (rows by step; an old run without one, a damaged line)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import torch

import agentrl.training.warm_start as warm_start_module
from agentrl.config import load_config
from agentrl.training.supervised import LossCurve
from agentrl.training.trainer import Trainer
from agentrl.training.warm_start import CURVE_FILE
from agentrl.viewer.warm_start import WARM_START_FILE, read_warm_start

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "configs" / "cpu_demo.yaml"
WARM = ["model.warm_start.enabled=true", "model.warm_start.max_steps=20", "model.warm_start.eval_every=10",
        "model.warm_start.examples=64", "model.warm_start.batch_size=16", "model.warm_start.eval_tasks=8",
        "model.warm_start.patience=5", "model.warm_start.target_accuracy=1.01", "data.prompts_per_step=4",
        "rollout.n_samples=4", "data.eval_tasks=8", "log.progress=false", "log.tensorboard=false",
        "learner.max_seconds=0"]


def test_the_loss_curve_is_bounded_and_keeps_the_last_step() -> None:
    curve = LossCurve(max_points=8)
    for step in range(1, 101):
        curve.add(step, 1.0 / step, step * 0.5)
    points = curve.points()
    assert 4 <= len(points) <= 9 and curve.stride == 16  # 8 kept at most, then the last step
    assert [p[0] for p in points] == [16, 32, 48, 64, 80, 96, 100]
    assert points[-1] == (100, 0.01, 50.0)
    short = LossCurve()
    for step in range(1, 4):
        short.add(step, 2.0, 0.1 * step)
    assert [p[0] for p in short.points()] == [1, 2, 3] and LossCurve().points() == []


@pytest.fixture
def warm_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A warm-start cache of this test's own (the tiny model stays in the shared one): every run misses it first."""
    cache = tmp_path / "cache"
    monkeypatch.setattr(warm_start_module, "cache_dir", lambda: cache)
    return cache


def test_a_warm_start_writes_its_curve_and_a_cached_one_copies_it(tmp_path: Path, warm_cache: Path, capsys) -> None:
    cfg = load_config(DEMO, WARM)
    started = time.monotonic()
    Trainer(cfg, run_dir=tmp_path / "first")
    wall = time.monotonic() - started
    rows = [json.loads(x) for x in (tmp_path / "first" / CURVE_FILE).read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 21))  # the loss of every step of a short warm start
    assert all(math.isfinite(r["loss"]) for r in rows) and rows[-1]["loss"] < rows[0]["loss"]
    assert [r["step"] for r in rows if "dev_accuracy" in r] == [10, 20]  # where it was evaluated
    assert all(0.0 <= r["dev_accuracy"] <= 1.0 for r in rows if "dev_accuracy" in r)
    seconds = [r["seconds"] for r in rows]
    assert seconds == sorted(seconds) and 0 < seconds[-1] < wall
    [entry] = list((warm_cache / "warmstart").iterdir())  # the curve beside the cached weights
    assert sorted(p.name for p in entry.iterdir()) == sorted(["model.safetensors", "result.json", CURVE_FILE])
    capsys.readouterr()

    Trainer(cfg, run_dir=tmp_path / "again")  # loaded from the cache: the same curve
    assert "warm start: loaded from cache" in capsys.readouterr().out
    assert (tmp_path / "again" / CURVE_FILE).read_text() == (tmp_path / "first" / CURVE_FILE).read_text()
    assert not list((tmp_path / "again").glob(f".{CURVE_FILE}.tmp*"))  # written in one rename

    (entry / CURVE_FILE).unlink()  # a cache entry made before curves were kept: said, nothing written
    Trainer(cfg, run_dir=tmp_path / "old")
    assert f"no {CURVE_FILE}" in capsys.readouterr().out and not (tmp_path / "old" / CURVE_FILE).exists()

    Trainer(load_config(DEMO, WARM + ["model.warm_start.enabled=false"]), run_dir=tmp_path / "off")
    assert not (tmp_path / "off" / CURVE_FILE).exists()


def test_without_a_run_dir_nothing_is_written(tmp_path: Path, warm_cache: Path, monkeypatch) -> None:
    """``agentrl doctor`` calls the warm start with no run directory: the curve is cached, written nowhere else."""
    from agentrl.models import load_policy
    from agentrl.rollout.build import make_env, resolve_model_path
    from agentrl.training.warm_start import maybe_warm_start

    monkeypatch.chdir(tmp_path)
    cfg = load_config(DEMO, WARM + ["model.warm_start.max_steps=4", "model.warm_start.eval_every=2"])
    env = make_env(cfg)
    path = resolve_model_path(cfg, env)
    model, tok = load_policy(cfg, path)
    summary = maybe_warm_start(cfg, model, tok, path, env, lambda: make_env(cfg, cfg.env.dev_kwargs), log=lambda s: None)
    assert summary is not None and summary["steps"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]
    [entry] = list((warm_cache / "warmstart").iterdir())
    assert [json.loads(x)["step"] for x in (entry / CURVE_FILE).read_text().splitlines()] == [1, 2, 3, 4]


def test_the_viewer_reads_the_curve_rows_by_step(tmp_path: Path) -> None:
    assert WARM_START_FILE == CURVE_FILE  # the viewer imports nothing of training: the name is repeated there
    assert read_warm_start(tmp_path) == {"rows": [], "error": None}  # an old run, or no warm start
    (tmp_path / CURVE_FILE).write_text(
        '{"step": 2, "loss": 1.5, "seconds": 0.2, "dev_accuracy": 0.25}\n{"step": 1, "loss": NaN, "seconds": 0.1}\n'
        'not json\n["a list"]\n{"step": "3", "loss": 1}\n{"step": 3, "loss": "x", "other": 5}\n\n')
    got = read_warm_start(tmp_path)
    assert got["rows"] == [{"step": 1, "loss": None, "seconds": 0.1},
                           {"step": 2, "loss": 1.5, "dev_accuracy": 0.25, "seconds": 0.2},
                           {"step": 3, "loss": None}]
    assert got["error"] == f"{CURVE_FILE}: 3 line(s) that are not rows skipped"


def _adapters(trainer: Trainer) -> dict:
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters() if ".lora_" in n}


def test_seeds_of_rl_share_one_warm_start_and_the_held_out_tasks(tmp_path: Path, warm_cache: Path, capsys) -> None:
    """``learner.seed`` seeds RL alone: runs that differ only there read one cached warm start, evaluate on
    the same held-out tasks, and start RL alike whether the warm start was just made or read from the cache;
    another seed draws other LoRA adapters and another task order."""
    lora = WARM + ["learner.lora.r=4", "learner.lora.alpha=8"]
    made = Trainer(load_config(DEMO, lora), run_dir=tmp_path / "made")
    assert "warm start: loaded from cache" not in capsys.readouterr().out
    read = Trainer(load_config(DEMO, lora + ["learner.seed=0"]), run_dir=tmp_path / "read")  # = data.seed
    other = Trainer(load_config(DEMO, lora + ["learner.seed=7"]), run_dir=tmp_path / "other")
    assert capsys.readouterr().out.count("warm start: loaded from cache") == 2
    assert len(list((warm_cache / "warmstart").iterdir())) == 1  # one warm start for every seed of RL
    a, b, c = _adapters(made), _adapters(read), _adapters(other)
    assert a and all(torch.equal(a[n], b[n]) for n in a)  # made or read: RL starts alike
    assert any(not torch.equal(a[n], c[n]) for n in a if ".lora_A." in n)  # another seed: other adapters
    assert [t.id for t in made.eval_tasks] == [t.id for t in other.eval_tasks]  # the same held-out tasks
    assert [t.id for t in made.tasks.next(8)] == [t.id for t in read.tasks.next(8)]
    assert [t.id for t in made.tasks.next(8)] != [t.id for t in other.tasks.next(8)]


def test_a_cached_warm_start_is_not_loaded_after_the_envs_references_change(warm_cache: Path, monkeypatch) -> None:
    """The cache key holds a hash of the examples' prompts and reference answers: an env whose references
    changed under the same config (a new version of its code: Terminal-v0's fix_json_config got a reference a
    policy can write without reading the file) trains a warm start of its own, never loads the old one."""
    from agentrl.env import fixed_tasks
    from agentrl.models import load_policy
    from agentrl.rollout.build import make_env, resolve_model_path
    from agentrl.training.warm_start import examples_digest, maybe_warm_start

    cfg = load_config(DEMO, WARM + ["model.warm_start.max_steps=2", "model.warm_start.eval_every=2"])
    env = make_env(cfg)
    path = resolve_model_path(cfg, env)
    model, tok = load_policy(cfg, path)

    def run(cached_only: bool) -> dict | None:
        return maybe_warm_start(cfg, model, tok, path, env, lambda: make_env(cfg, cfg.env.dev_kwargs),
                                log=lambda s: None, cached_only=cached_only)

    assert run(False) is not None and run(True) is not None  # made, then read from the cache
    tasks = fixed_tasks(env, 8, seed=1)
    before = examples_digest(env, tasks)
    answer = type(env).reference_answer
    monkeypatch.setattr(type(env), "reference_answer", lambda self, task: answer(self, task) + " ")
    assert examples_digest(env, tasks) != before
    assert run(True) is None  # the old entry is not this env's warm start
    assert run(False) is not None and len(list((warm_cache / "warmstart").iterdir())) == 2
