"""``env.id: verifiers:FILE.py``: a verifiers taskset written as its docs show trains 2 steps, each episode
verifiers' own rollout on the policy's endpoint, recorded token-exact, rewarded by the task's @vf.reward.
``slow``: every rollout starts verifiers' chat program (a Python process importing openai and mcp)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("verifiers")
pytestmark = pytest.mark.slow

from agentrl.config import load_config  # noqa: E402
from agentrl.env import EnvError, make  # noqa: E402
from agentrl.rollout.executors.agent import BlackBoxExecutor  # noqa: E402
from agentrl.training.trainer import Trainer  # noqa: E402

TASKSET = Path(__file__).with_name("vf_addition.py")


def runtime_dirs() -> set[str]:
    from verifiers.v1.utils.paths import CACHE_DIR

    root = CACHE_DIR / "runtimes" / "subprocess"
    return {p.name for p in root.iterdir()} if root.is_dir() else set()


def test_a_verifiers_taskset_trains_two_steps(tmp_path):
    before = runtime_dirs()
    cfg = load_config(None, [
        f"env.id=verifiers:{TASKSET}", "env.kwargs={config: {num_tasks: 6}, concurrency: 4}",
        "env.eval_kwargs={}", "env.dev_kwargs={}", "model.path=tiny", "model.device=cpu",
        "model.warm_start.enabled=false", "data.prompts_per_step=2", "data.eval_tasks=2", "rollout.n_samples=2",
        "rollout.max_new_tokens=6", "learner.total_steps=2", "log.tensorboard=false", "log.progress=false",
        "checkpoint.save_final=false", "model.tiny.hidden_size=64", "model.tiny.num_heads=2",
        "model.tiny.num_layers=2", "model.tiny.intermediate_size=128"])
    trainer = Trainer(cfg, run_dir=tmp_path)
    assert isinstance(trainer.executor, BlackBoxExecutor)
    assert trainer.fit()["steps"] == 2
    trajs = trainer.rollout(trainer.tasks.next(2))
    assert len(trajs) == 4 and not any(t.info.get("failed") for t in trajs), [t.info.get("error") for t in trajs]
    for t in trajs:
        i = int(t.task_id.split("-")[1])
        reply = t.info["response"]
        assert t.reward == float(reply == str(2 * i))  # the task's @vf.reward (exact_match)
        actions = [tok for s in t.segments if s.is_action for tok in s.token_ids]
        # recorded token-exact (verifiers' trace keeps the reply without its surrounding whitespace)
        assert trainer.tokenizer.decode(actions, skip_special_tokens=True).strip() == reply
        assert f"What is {i} + {i}?" in trainer.tokenizer.decode(t.prompt_ids)
    assert runtime_dirs() == before  # every rollout's runtime was torn down


def test_unsupported_harnesses_and_bad_names_are_refused():
    with pytest.raises(EnvError, match="harness 'bash' runs the model's commands"):
        make(f"verifiers:{TASKSET}", harness="bash")
    with pytest.raises(EnvError, match="no such file"):
        make("verifiers:nowhere/none.py")
    with pytest.raises(EnvError, match="cannot build AdditionTaskset"):
        make(f"verifiers:{TASKSET}", config={"num_tasks": "many"})
