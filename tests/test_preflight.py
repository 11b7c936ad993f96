"""What a run needs from the machine (``agentrl.preflight``): a GPU recipe on a CPU machine stops at
once, and a vLLM, DeepSpeed or Ray release outside the tested range (or missing a method agentrl
calls) is one line naming the installed and the supported releases — faked here, the real packages
otherwise."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import torch

from agentrl import preflight
from agentrl.config import load_config
from agentrl.preflight import SUPPORTED, RequirementError, check_machine, is_supported, require

ROOT = Path(__file__).resolve().parents[1]
HAS_VLLM = importlib.util.find_spec("vllm") is not None
HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None


def fake_version(monkeypatch: pytest.MonkeyPatch, package: str, version: str) -> None:
    real = preflight.installed_version
    monkeypatch.setattr(preflight, "installed_version", lambda p: version if p == package else real(p))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU machine's answer")
def test_gsm8k_grpo_on_a_cpu_machine_stops_at_once_naming_cuda(tmp_path):
    """The real command in a fresh interpreter: exit 2, one line naming CUDA, nothing heavy imported
    (no vLLM, no Ray, no model download), no run directory written."""
    code = ("import sys; from agentrl.cli import main; rc = main(sys.argv[1:]); "
            "print(sorted(m for m in ('vllm', 'ray', 'deepspeed') if m in sys.modules)); sys.exit(rc)")
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, "train", str(ROOT / "examples/configs/gsm8k_grpo.yaml"),
                          "--run-dir", str(tmp_path / "run")], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    seconds = time.perf_counter() - start
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert lines[0].startswith("agentrl: error: model.device=cuda needs a CUDA GPU") and "CPU build" in lines[0]
    assert out.stdout.strip() == "[]", "vllm, ray or deepspeed was imported before the check"
    assert not (tmp_path / "run").exists()
    assert seconds < 60, seconds  # interpreter + torch import; nothing is built


def test_supported_ranges_are_the_extras_of_pyproject():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = meta["optional-dependencies"]
    assert extras["vllm"] == [f"vllm{SUPPORTED['vllm'][0]}"]
    assert extras["deepspeed"] == [f"deepspeed{SUPPORTED['deepspeed'][0]}"]
    assert f"ray{SUPPORTED['ray'][0]}" in meta["dependencies"]
    assert all(is_supported(p, v) for p, v in (("vllm", "0.32.0"), ("vllm", "0.33.0+cu128"), ("deepspeed", "0.19.8"),
                                                ("ray", "2.60.0")))
    assert not any(is_supported(p, v) for p, v in (("vllm", "0.8.5"), ("vllm", "0.34.0"), ("deepspeed", "0.15.4"),
                                                    ("ray", "3.0.0")))


def test_the_installed_releases_are_supported():
    for package in SUPPORTED:
        if preflight.installed_version(package) is not None:
            assert require(package)
    if HAS_DEEPSPEED:  # the real classes have everything agentrl calls
        assert preflight.require_deepspeed_api() == preflight.installed_version("deepspeed")


@pytest.mark.skipif(not HAS_VLLM, reason="needs vllm")
def test_an_old_vllm_stops_the_engine_before_it_starts(monkeypatch, tmp_path):
    from agentrl.rollout.engines.vllm import VLLMEngine

    fake_version(monkeypatch, "vllm", "0.8.5")
    with pytest.raises(RequirementError) as e:
        VLLMEngine(str(tmp_path / "never-read"))
    msg = str(e.value)
    assert "\n" not in msg and "vllm 0.8.5 is installed" in msg and "vllm>=0.32,<0.34" in msg


@pytest.mark.skipif(not HAS_VLLM, reason="needs vllm")
def test_a_vllm_missing_a_method_names_it(monkeypatch, tmp_path):
    import vllm

    from agentrl.rollout.engines.vllm import VLLMEngine

    assert preflight.require_vllm_api() == preflight.installed_version("vllm")  # the real API is complete
    monkeypatch.delattr(vllm.LLM, "collective_rpc")
    with pytest.raises(RequirementError, match=r"vllm \S+ lacks LLM\.collective_rpc, which agentrl calls"):
        VLLMEngine(str(tmp_path / "never-read"))

    class OldArgs:
        model: str = ""

    with pytest.raises(RequirementError, match="EngineArgs.logprobs_mode, EngineArgs.worker_extension_cls"):
        preflight.require_vllm_api(vllm.LLM, OldArgs)


def test_the_cli_names_an_unsupported_vllm_in_one_line(monkeypatch, capsys, tmp_path):
    from agentrl.cli import main

    fake_version(monkeypatch, "vllm", "0.10.1")
    code = main(["train", str(ROOT / "examples/configs/cpu_demo.yaml"), "rollout.engine=vllm", "--run-dir",
                 str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "vllm 0.10.1 is installed" in err and "vllm>=0.32,<0.34" in err
    monkeypatch.setattr(preflight, "installed_version", lambda p: None)
    assert main(["train", str(ROOT / "examples/configs/cpu_demo.yaml"), "rollout.engine=vllm"]) == 2
    assert "vllm is not installed (rollout.engine=vllm)" in capsys.readouterr().err


@pytest.mark.skipif(not HAS_DEEPSPEED, reason="needs deepspeed")
def test_deepspeed_outside_the_range_or_missing_offload(monkeypatch):
    import deepspeed

    from agentrl.distributed.strategies.deepspeed import DeepSpeedStrategy

    fake_version(monkeypatch, "deepspeed", "0.15.4")
    with pytest.raises(RequirementError, match=r"deepspeed 0\.15\.4 is installed .* deepspeed>=0\.19,<0\.20"):
        DeepSpeedStrategy(zero_stage=3)  # before it joins a process group
    monkeypatch.undo()
    monkeypatch.delattr(deepspeed.DeepSpeedEngine, "offload_states")
    with pytest.raises(RequirementError, match=r"deepspeed \S+ lacks DeepSpeedEngine\.offload_states, which"):
        DeepSpeedStrategy(zero_stage=3)


def test_ray_outside_the_range_stops_before_ray_starts(monkeypatch):
    from agentrl.distributed.launch import init_ray

    fake_version(monkeypatch, "ray", "3.1.0")
    cfg = load_config(None, ["cluster.mode=ray"])
    with pytest.raises(RequirementError, match=r"ray 3\.1\.0 is installed .* ray>=2\.40,<3"):
        init_ray(cfg.cluster)
    with pytest.raises(RequirementError, match="ray 3.1.0"):
        check_machine(cfg)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU machine's answer")
@pytest.mark.parametrize("stage", ["sft", "rm", "dpo"])
def test_the_gpu_stage_recipes_on_a_cpu_machine_are_one_line(stage, capsys, tmp_path):
    from agentrl.cli import main

    code = main([stage, str(ROOT / f"examples/configs/{stage}_qwen.yaml"), "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0 and "model.device=cuda needs a CUDA GPU" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU machine's answer")
@pytest.mark.parametrize("overrides, what", [
    (["cluster.mode=ray", "cluster.engines.gpus=1"], "cluster.engines.gpus > 0 needs a CUDA GPU"),
    (["cluster.mode=ray", "cluster.weight_sync=nccl"], "cluster.weight_sync=nccl needs CUDA GPUs"),
    (["model.device=cuda", "rollout.engine=hf"], "model.device=cuda needs a CUDA GPU"),
])
def test_gpu_settings_on_a_cpu_machine(overrides, what):
    with pytest.raises(RequirementError, match=what):
        check_machine(load_config(None, overrides))
    # joining a remote cluster: its GPUs are elsewhere, so only the packages are checked here
    check_machine(load_config(None, ["cluster.mode=ray", "cluster.engines.gpus=1", "cluster.address=10.0.0.1:6379"]))
