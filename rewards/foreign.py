"""Reward functions written for other frameworks, used unchanged as ``fn(response, task)``.

Recognised by their parameter names (:func:`flavour`):

- **OpenRLHF** ``reward_func(queries, prompts, labels, **kwargs) -> {"rewards", "scores",
  "extra_logs"}``: called with one sample, ``queries = [prompt + response]``; ``rewards`` may be a
  tensor or a list; the numeric ``extra_logs`` become reward components.
- **verl** ``compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)
  -> float | {"score": float, ...}``: ``data_source`` and ``extra_info`` come from the task's
  metadata, ``ground_truth`` is the task's answer; the dict's other numeric keys are components.
- **TRL** ``f(prompts, completions, **columns) -> list[float | None]``: ``completions`` are texts,
  or assistant messages when the prompt is a chat; the columns are the task's metadata plus
  ``answer`` (only those the function names, unless it takes ``**kwargs``). ``None`` (the function
  does not apply to this sample) scores 0.0 with ``info["not_applicable"] = True``.

:func:`load_file` imports a user's ``FILE.py`` once per resolved path (``reward.fn: FILE.py:FN``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from agentrl.types import RewardResult, Task

FLAVOURS = ("agentrl", "openrlhf", "verl", "trl")


def load_file(path: str) -> ModuleType:
    """The module defined by the Python file ``path`` (imported once per absolute path)."""
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(full):
        raise ImportError(f"reward file {path!r} does not exist (resolved to {full})")
    stem = "".join(c if c.isalnum() else "_" for c in os.path.basename(full)[:-3])
    name = f"agentrl_user_{stem}_{hashlib.sha1(full.encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, full)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path!r} as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def flavour(fn: Callable[..., Any]) -> str:
    """Which framework's signature ``fn`` has: ``agentrl`` | ``openrlhf`` | ``verl`` | ``trl``."""
    try:
        names = set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return "agentrl"
    if "queries" in names:
        return "openrlhf"
    if "solution_str" in names:
        return "verl"
    if "completions" in names:
        return "trl"
    return "agentrl"


def prompt_text(task: Task) -> str:
    """The task's prompt as text (chat messages joined by newlines, as ``TextEnv`` renders them)."""
    if isinstance(task.prompt, str):
        return task.prompt
    return "\n".join(str(m.get("content", "")) for m in task.prompt)


def _number(value: Any) -> float | None:
    """``value`` as a float: tensors and 1-element lists are unwrapped; None if not numeric."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    while isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool):
        return float(value)
    return float(value) if isinstance(value, (int, float)) else None


def _first(value: Any) -> Any:
    """Item 0 of a batch-shaped value (list, tuple, tensor); scalars pass through."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    return value[0] if isinstance(value, (list, tuple)) and value else value


def _components(logs: dict[str, Any], pick: Callable[[Any], Any]) -> dict[str, float]:
    out = {}
    for key, value in (logs or {}).items():
        num = _number(pick(value))
        if num is not None:
            out[str(key)] = num
    return out


def _openrlhf(fn: Callable[..., Any]) -> Callable[[str, Task], RewardResult]:
    def reward(response: str, task: Task) -> RewardResult:
        prompt = prompt_text(task)
        out = fn([prompt + response], [prompt], [task.answer])
        if not isinstance(out, dict) or "rewards" not in out:
            raise TypeError(f"OpenRLHF reward_func {fn.__name__} must return a dict with 'rewards', got {type(out).__name__}")
        score = _number(_first(out["rewards"]))
        if score is None:
            raise TypeError(f"{fn.__name__}: 'rewards' must hold numbers, got {out['rewards']!r}")
        parts = _components(out.get("extra_logs") or {}, _first)
        if out.get("scores") is not None and (s := _number(_first(out["scores"]))) is not None:
            parts["scores"] = s
        return RewardResult(score, parts, {})
    return reward


def _verl(fn: Callable[..., Any]) -> Callable[[str, Task], RewardResult]:
    def reward(response: str, task: Task) -> RewardResult:
        meta = task.metadata
        out = fn(data_source=meta.get("data_source", ""), solution_str=response, ground_truth=task.answer,
                 extra_info=meta.get("extra_info"))
        if isinstance(out, dict):
            if "score" not in out:
                raise TypeError(f"verl compute_score {fn.__name__} returned a dict without 'score'")
            parts = _components({k: v for k, v in out.items() if k != "score"}, lambda v: v)
            info = {k: v for k, v in out.items() if k != "score" and k not in parts}
            return RewardResult(float(out["score"]), parts, info)
        score = _number(out)
        if score is None:
            raise TypeError(f"verl compute_score {fn.__name__} must return a number or a dict, got {out!r}")
        return RewardResult(score, {"score": score}, {})
    return reward


def _trl(fn: Callable[..., Any]) -> Callable[[str, Task], RewardResult]:
    params = inspect.signature(fn).parameters
    any_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())

    def reward(response: str, task: Task) -> RewardResult:
        chat = not isinstance(task.prompt, str)
        completion: Any = [{"role": "assistant", "content": response}] if chat else response
        columns = {"answer": task.answer, **{k: v for k, v in task.metadata.items()
                                              if k not in ("prompts", "completions")}}
        if not any_kw:
            columns = {k: v for k, v in columns.items() if k in params}
        args: dict[str, Any] = {"completions": [completion], **{k: [v] for k, v in columns.items()}}
        if "prompts" in params or any_kw:
            args["prompts"] = [task.prompt]
        out = fn(**args)
        value = out[0] if isinstance(out, (list, tuple)) and out else out
        if value is None:
            return RewardResult(0.0, {}, {"not_applicable": True})
        score = _number(value)
        if score is None:
            raise TypeError(f"TRL reward {fn.__name__} must return a list of floats or None, got {out!r}")
        return RewardResult(score, {fn.__name__: score}, {})
    return reward


def adapt(fn: Callable[..., Any], kind: str) -> Callable[[str, Task], RewardResult]:
    """``fn`` of framework ``kind`` (see :func:`flavour`) as ``reward(response, task)``."""
    makers = {"openrlhf": _openrlhf, "verl": _verl, "trl": _trl}
    if kind not in makers:
        raise ValueError(f"unknown reward flavour {kind!r}; valid: {', '.join(FLAVOURS)}")
    return makers[kind](fn)
