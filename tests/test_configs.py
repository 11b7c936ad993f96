"""Every config in ``examples/configs`` loads (every key known), resolves, and its tiny twin trains."""

from pathlib import Path

import pytest

from agentrl.config import RunConfig, load_config, read_yaml, to_dict
from agentrl.env import list_envs
from agentrl.rollout.build import make_env
from agentrl.stages.config import DPOConfig, RMConfig, SFTConfig
from environments.sources import is_local

ROOT = Path(__file__).resolve().parents[1]
ALL = sorted((ROOT / "examples" / "configs").glob("*.yaml"))
# the stages before RL have their own config classes (their tiny runs: tests/test_sft_rm_dpo.py)
STAGES = {"sft_": SFTConfig, "rm_": RMConfig, "dpo_": DPOConfig}
CONFIGS = [p for p in ALL if not p.stem.startswith(tuple(STAGES))]
CPU_RECIPES = {"cpu_demo", "cpu_demo_lora", "smollm2_addition", "terminal_smollm2_lora", "guess_number_credit",
               "guess_number_long"}  # real runs meant for a CPU machine (no GPU recipe)
GPU = [p for p in CONFIGS if not p.stem.endswith("_tiny") and p.stem not in CPU_RECIPES]
TINY = [p for p in CONFIGS if p.stem.endswith("_tiny")]


def _config_class(path: Path) -> type:
    return next((cls for prefix, cls in STAGES.items() if path.stem.startswith(prefix)), RunConfig)


def _keys(d: dict, prefix: str = "") -> set[str]:
    out = set()
    for k, v in d.items():
        out.add(prefix + k)
        if isinstance(v, dict) and not k.endswith("kwargs") and k != "register":
            out |= _keys(v, f"{prefix}{k}.")
    return out


def is_hub_dataset(source) -> bool:
    """A hub dataset name (needs the network), not a shipped or local file."""
    return source is not None and not is_local(str(source))


def _env_ids(cfg: RunConfig) -> list[str]:
    return [cfg.env.id, *cfg.eval.envs]


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.stem)
def test_config_loads_with_every_key_known(path):
    cfg = load_config(path, cls=_config_class(path))  # unknown keys, wrong types, unknown choices raise here
    written, resolved = _keys(read_yaml(path)), _keys(to_dict(cfg))
    assert written <= resolved, written - resolved


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_resolves(path):
    """Env ids are registered and every env whose data is local can be built (train and eval)."""
    cfg = load_config(path)
    missing = [e for e in _env_ids(cfg) if e not in list_envs()]
    if missing:
        pytest.skip(f"not registered yet: {missing}")
    if not is_hub_dataset(cfg.env.kwargs.get("dataset")):
        make_env(cfg).close()
    make_env(cfg, cfg.env.eval_kwargs).close()
    for env_id in cfg.eval.envs:
        if env_id != cfg.env.id:
            kwargs = cfg.eval.env_kwargs.get(env_id, cfg.env.eval_kwargs)
            make_env(load_config(None, [f"env.id={env_id}"]), kwargs).close()
    assert max(cfg.eval.k) <= max(cfg.eval.n_samples, 1) or cfg.eval.n_samples == 1


@pytest.mark.parametrize("path", GPU, ids=lambda p: p.stem)
def test_gpu_config_is_a_real_recipe_with_a_tiny_twin(path):
    cfg = load_config(path)
    assert "/" in cfg.model.path and cfg.model.dtype == "bfloat16" and cfg.rollout.engine == "vllm"
    assert path.read_text().lstrip().startswith("#")  # documented
    twin = path.with_name(path.stem + "_tiny.yaml")
    assert twin.exists(), f"{path.name} has no tiny CI version"
    tiny = load_config(twin)
    assert tiny.model.path == "tiny" and tiny.rollout.engine == "hf"
    assert tiny.algo.estimator == cfg.algo.estimator and tiny.algo.kl_mode == cfg.algo.kl_mode


@pytest.mark.slow  # one short training run per recipe
@pytest.mark.parametrize("path", TINY, ids=lambda p: p.stem)
def test_tiny_config_trains_two_steps(path, tmp_path):
    from agentrl.runs.checkpoint import latest_checkpoint
    from agentrl.training.trainer import Trainer

    quick = ["learner.total_steps=2", "log.progress=false", "log.tensorboard=false", "model.warm_start.enabled=false"]
    # the held-out evaluation, before and after, on at most 16 tasks (terminal_tiny's 100 run in workspaces)
    cfg = load_config(path, [*quick, f"data.eval_tasks={min(load_config(path).data.eval_tasks, 16)}"])
    missing = [e for e in _env_ids(cfg) if e not in list_envs()]
    if missing:
        pytest.skip(f"not registered yet: {missing}")
    summary = Trainer(cfg, run_dir=tmp_path).fit()
    assert summary["steps"] == 2
    assert latest_checkpoint(tmp_path).name == "step_000002"
