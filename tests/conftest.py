"""Test configuration shared by every test: environment variables the stack needs on CPU."""

import os
from pathlib import Path

_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled", "DS_ACCELERATOR": "cpu",
    "MASTER_ADDR": "127.0.0.1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "all",
    "VLLM_HOST_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ALLOW_INSECURE_SERIALIZATION": "1",
    "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "RAY_USAGE_STATS_ENABLED": "0",
}
for _k, _v in _ENV.items():
    os.environ.setdefault(_k, _v)
# built tiny models and warm starts are cached inside the checkout, not in the user's home
os.environ.setdefault("AGENTRL_CACHE", str(Path(__file__).resolve().parents[1] / ".cache" / "tests"))


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_arith():
    """A tiny model + tokenizer for the arithmetic env (built once, cached): (model_dir, env)."""
    from agentrl.config import load_config
    from agentrl.rollout.build import make_env, resolve_model_path

    cfg = load_config(None, ["env.kwargs={digits: 2, template: '{expr}=', bare_answer: true}"])
    env = make_env(cfg)
    return resolve_model_path(cfg, env), env
