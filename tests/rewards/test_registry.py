"""Registry and plugins: names, entry points, module:function strings, clear errors."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import rewards
from agentrl.types import RewardResult, Task
from rewards import registry

PLUGIN_SRC = Path(__file__).resolve().parents[2] / "examples" / "reward_plugin"


def test_builtins_resolve():
    for name in ("math", "numeric", "code", "format", "math_with_format"):
        assert callable(rewards.get_reward(name))
    assert rewards.get_reward("math")("\\boxed{2}", Task("t", "", "2")).score == 1.0


def test_unknown_name_lists_available():
    with pytest.raises(KeyError) as e:
        rewards.get_reward("nope")
    assert "nope" in str(e.value) and "math" in str(e.value) and "code" in str(e.value)
    with pytest.raises(KeyError, match="cannot load"):
        rewards.get_reward("no_such_module_xyz:fn")
    with pytest.raises(KeyError, match="unknown reward"):
        rewards.get_reward("rewards.math:score", allow_import=False)


def test_register_and_float_results():
    @rewards.register("always_half")
    def half(response: str, task: Task) -> float:
        return 0.5

    try:
        out = rewards.get_reward("always_half")("x", Task("t", ""))
        assert out == RewardResult(0.5, {"score": 0.5}, {}) and "always_half" in rewards.available()
    finally:
        registry._registered.pop("always_half")


def test_module_function_string(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN_SRC / "src"))
    fn = rewards.get_reward("agentrl_reward_plugin:exact_match")
    assert fn(" Paris ", Task("t", "", "paris")).score == 1.0


def test_entry_point_discovery_of_installed_example_plugin(tmp_path, monkeypatch):
    """pip-install examples/reward_plugin into a tmp target dir and find it by entry point."""
    src = tmp_path / "src_copy"
    shutil.copytree(PLUGIN_SRC, src, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(src)], check=True, timeout=120)
    monkeypatch.syspath_prepend(str(target))
    registry._loaded.pop("exact_match", None)
    assert "exact_match" in rewards.available()
    out = rewards.get_reward("exact_match")("42", Task("t", "", 42))
    assert out.score == 1.0 and out.components == {"exact_match": 1.0}
    registry._loaded.pop("exact_match", None)


def test_import_rewards_stays_light():
    code = "import sys, rewards, rewards.math, rewards.code, rewards.shaping, rewards.trl; " \
           "print(sorted(m for m in ('fastapi', 'uvicorn', 'httpx', 'sympy', 'math_verify', 'trl') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
