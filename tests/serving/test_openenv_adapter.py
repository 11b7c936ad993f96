"""``env.id: openenv:...`` trains on an OpenEnv server written as openenv-core's docs show, through
openenv-core's own client; a server that dies fails only the episodes on it.

All ``slow``: importing openenv-core costs ~9 CPU seconds (it loads gradio and fastmcp), in the test
process and in every OpenEnv server it starts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("openenv")
pytestmark = pytest.mark.slow

from openenv_word import WORDS  # noqa: E402
from servers import HERE, uvicorn_app  # noqa: E402

from agentrl.config import load_config  # noqa: E402
from agentrl.env import EnvError, make  # noqa: E402
from agentrl.training.trainer import Trainer  # noqa: E402
from environments.adapters import openenv as adapter  # noqa: E402

TINY = ["model.path=tiny", "model.device=cpu", "model.warm_start.enabled=false", "data.prompts_per_step=2",
        "data.eval_tasks=2", "rollout.n_samples=2", "rollout.max_new_tokens=8", "learner.total_steps=2",
        "log.tensorboard=false", "log.progress=false", "checkpoint.save_final=false",
        "model.tiny.hidden_size=64", "model.tiny.num_heads=2", "model.tiny.num_layers=2",
        "model.tiny.intermediate_size=128", "env.eval_kwargs={}", "env.dev_kwargs={}"]


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in next(run_dir.rglob("metrics.jsonl")).read_text().splitlines()]


@pytest.fixture(scope="module")
def word_server():
    with uvicorn_app("openenv_word:app") as (url, _):
        yield url


def test_trains_two_steps_on_a_running_openenv_server(tmp_path, word_server):
    url = word_server
    cfg = load_config(None, TINY + [f"env.id=openenv:{url}", "env.kwargs={observation_field: instruction}"])
    trainer = Trainer(cfg, run_dir=tmp_path)
    assert trainer.fit()["steps"] == 2
    rows = metrics(tmp_path)
    assert [r["step"] for r in rows if "samples_used" in r][-1] == 2
    assert all(r.get("failed/dropped", 0) == 0 for r in rows)
    trajs = trainer.rollout(trainer.tasks.next(2))
    for t in trajs:
        target = WORDS[int(t.task_id.split("-")[1]) % len(WORDS)]
        assert trainer.tokenizer.decode(t.prompt_ids) == f"Repeat the word: {target}"  # the observation field
        said = t.info["response"].strip()
        assert t.reward == (1.0 if said == target else 0.5 if target in said else 0.0)


def test_the_default_held_out_split_trains_and_splits_never_share_a_seed(tmp_path, capsys):
    """cpu_demo.yaml with env.id=openenv:URL died on env.eval_kwargs={split: test} (issue 46, finding 6)."""
    with uvicorn_app("openenv_word:app") as (url, _):  # a server of its own: nothing of another test's sessions
        _check_splits(url, tmp_path, capsys)


def _check_splits(word_server: str, tmp_path: Path, capsys) -> None:
    from agentrl.cli import main
    from agentrl.env import fixed_tasks

    demo = str(Path(__file__).resolve().parents[2] / "examples" / "configs" / "cpu_demo.yaml")
    quick = [t for t in TINY if not t.startswith(("env.eval_kwargs", "env.dev_kwargs"))]
    assert main(["train", demo, f"env.id=openenv:{word_server}", "env.kwargs={observation_field: instruction}",
                 *quick, "--run-dir", str(tmp_path / "run")]) == 0, capsys.readouterr().err
    seeds = {}
    for split in ("train", "test", "dev"):
        env = make(f"openenv:{word_server}", split=split)
        seeds[split] = {t.metadata["seed"] for t in fixed_tasks(env, 50, 0)}
        env.close()
        assert {s % 3 for s in seeds[split]} == {adapter.SPLITS[split]}
    assert not (seeds["train"] & seeds["test"]) and not (seeds["train"] & seeds["dev"])
    with pytest.raises(EnvError, match="no split 'validation'; valid: train, test, dev"):
        make(f"openenv:{word_server}", split="validation")


def test_the_action_field_comes_from_the_schema_and_errors_name_the_fields():
    with uvicorn_app("openenv_word:app") as (url, _):  # a server of its own: nothing of another test's sessions
        _check_fields(url)


def _check_fields(url: str) -> None:
    env = make(f"openenv:{url}")
    assert env.action_field == "message"
    rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
    text, info = env.reset(options={"task": env.sample_task(rng)})
    assert json.loads(text)["instruction"].startswith("Repeat the word: ")  # default: the observation's JSON
    word = json.loads(text)["instruction"].split(": ")[1]
    _, reward, terminated, truncated, _ = env.step(word)
    assert (reward, terminated, truncated) == (1.0, True, False)
    with pytest.raises(EnvError, match="no field 'answer'; its fields: message"):
        make(f"openenv:{url}", action_field="answer")
    with pytest.raises(EnvError, match="observation has no field 'nope'"):
        make(f"openenv:{url}", observation_field="nope")


def test_a_module_app_is_started_here_and_stopped(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    env = make("openenv:openenv_word:app", observation_field="instruction")
    rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
    text, _ = env.reset(options={"task": env.sample_task(rng)})
    assert text.startswith("Repeat the word: ")
    url, _ = adapter._LAUNCHED["openenv_word:app"]
    env.close()
    adapter.stop_launched()
    import httpx

    with pytest.raises(httpx.TransportError):
        httpx.get(url + "/health", timeout=2)


def test_a_dead_server_fails_only_its_episodes():
    with uvicorn_app("openenv_word:app") as (url, proc):
        env = make(f"openenv:{url}", observation_field="instruction")
        from agentrl.rollout.env_pool import clone_env

        live, doomed = clone_env(env), clone_env(env)
        rng = np.random.default_rng(0)  # fixed tasks: the same draw every run
        live.reset(options={"task": env.sample_task(rng)})
        doomed.reset(options={"task": env.sample_task(rng)})
        proc.kill()
        proc.wait(10)
        with pytest.raises(Exception):  # noqa: B017 - the connection's own error, whatever its class
            doomed.step("apple")
        with pytest.raises(Exception):  # noqa: B017
            live.step("apple")
