"""Test configuration shared by every test: environment variables the stack needs on CPU."""

import os
from collections import Counter
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


@pytest.fixture(autouse=True)
def _parked_workspaces_end():
    """After each test (before its file's own teardown checks): runtimes parked by workspace envs left open end
    (they would otherwise live up to ``park_s`` and count as workspaces left by a clean-host check)."""
    yield
    from agentrl.env import end_parked_workspaces

    end_parked_workspaces()


def pytest_collection_modifyitems(config, items):
    """pytest-xdist schedules by node id: two tests with one id would run once. Refused here."""
    twice = sorted(n for n, c in Counter(item.nodeid for item in items).items() if c > 1)
    if twice:
        raise pytest.UsageError(f"tests sharing a node id (pytest-xdist would run one of each): {twice}")


@pytest.hookimpl(optionalhook=True)  # a known hook only where pytest-xdist is installed
def pytest_xdist_make_scheduler(config, log):
    """`make test` runs each tier on 2 pytest-xdist workers. A test file is one unit of work (its
    module-scoped fixtures, a vLLM engine or a trained model, are built once), and every file on the
    local Ray cluster (it uses the ``ray_cluster`` fixture) joins one unit, so that one 2-CPU cluster
    serves them all, one test at a time. Units start largest first."""
    from xdist.scheduler import LoadScopeScheduling

    root = config.rootpath
    uses_ray: dict[str, bool] = {}

    class FileOrRay(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            if path not in uses_ray:
                uses_ray[path] = "ray_cluster" in (root / path).read_text(encoding="utf-8")
            return "ray" if uses_ray[path] else path

    return FileOrRay(config, log)


@pytest.fixture(scope="session")
def ray_lock():
    """Held while this process runs a local Ray cluster: a second pytest worker's cluster waits for
    it instead of sharing the two cores (the scheduler above keeps them in one worker anyway)."""
    import fcntl

    path = Path(os.environ["AGENTRL_CACHE"]) / "ray-tests.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield
        fcntl.flock(f, fcntl.LOCK_UN)
