"""Reward functions by name: built-ins, ``register``-ed ones, entry points, ``module:function``.

A reward function is ``fn(response: str, task: Task) -> RewardResult`` (a plain ``float`` result is
accepted and wrapped). Lookup order for :func:`get_reward`: names registered in this process, the
built-ins below, installed plugins (Python entry point group ``agentrl.rewards``, the entry point's
name is the reward's name), then a ``"module:function"`` string. An unknown name raises
``KeyError`` listing every available name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import wraps
from importlib.metadata import entry_points
from typing import Any

from agentrl.types import RewardResult, Task

RewardFn = Callable[[str, Task], RewardResult]
ENTRY_POINT_GROUP = "agentrl.rewards"

BUILTINS: dict[str, str] = {
    "math": "rewards.math:score",
    "numeric": "rewards.numeric:score",
    "code": "rewards.code:score",
    "format": "rewards.shaping:think_answer_format",
    "math_with_format": "rewards.shaping:math_with_format",
}
"""Built-in rewards, imported on first use."""

_registered: dict[str, RewardFn] = {}
_loaded: dict[str, RewardFn] = {}


def register(name: str, fn: Callable[..., Any] | None = None) -> Any:
    """Register ``fn`` under ``name`` (usable as ``@register("name")``)."""
    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        _registered[name] = as_reward(f)
        _loaded.pop(name, None)
        return f
    return deco(fn) if fn is not None else deco


def as_reward(fn: Callable[..., Any]) -> RewardFn:
    """Wrap ``fn`` so that it always returns a :class:`RewardResult` (floats are wrapped).

    Reward functions of other frameworks are recognised by their parameter names and adapted
    (:mod:`rewards.foreign`): OpenRLHF ``reward_func(queries, prompts, labels, **kwargs)``, verl
    ``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` and TRL
    ``f(prompts, completions, **columns)``.
    """
    from rewards.foreign import adapt, flavour

    if getattr(fn, "_agentrl_reward", False):
        return fn
    kind = flavour(fn)
    call = fn if kind == "agentrl" else adapt(fn, kind)

    @wraps(fn)
    def reward(response: str, task: Task) -> RewardResult:
        out = call(response, task)
        if isinstance(out, RewardResult):
            return out
        return RewardResult(float(out), {"score": float(out)}, {})
    reward._agentrl_reward = True  # type: ignore[attr-defined]
    return reward


def _plugins() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available() -> list[str]:
    """Every name :func:`get_reward` accepts (besides ``module:function`` strings)."""
    return sorted(set(_registered) | set(BUILTINS) | set(_plugins()))


def load_object(spec: str) -> Any:
    """Import ``"package.module:attr"``, or load ``"path/to/file.py:attr"`` from the file."""
    module, _, attr = spec.rpartition(":") if ".py:" in spec else spec.partition(":")
    if not module or not attr:
        raise ValueError(f"expected 'module:function' or 'FILE.py:function', got {spec!r}")
    if module.endswith(".py"):
        from rewards.foreign import load_file

        obj: Any = load_file(module)
        if not hasattr(obj, attr):
            raise AttributeError(f"{module} defines no {attr!r}")
        return getattr(obj, attr)
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def get_reward(name: str, *, allow_import: bool = True) -> RewardFn:
    """The reward function called ``name`` (see the module docstring for the lookup order).

    ``allow_import=False`` refuses ``module:function`` strings that were not registered: the reward
    server uses it so that a request can never make it import and call arbitrary code.
    """
    if name in _registered:
        return _registered[name]
    if ":" in name and not allow_import and name not in BUILTINS and name not in _plugins():
        raise KeyError(f"unknown reward {name!r}; available: {', '.join(available())}")
    if name in _loaded:
        return _loaded[name]
    if name in BUILTINS:
        fn = load_object(BUILTINS[name])
    elif (ep := _plugins().get(name)) is not None:
        fn = ep.load()
    elif ":" in name:
        try:
            fn = load_object(name)
        except (ImportError, AttributeError) as e:
            raise KeyError(f"cannot load reward {name!r}: {e}") from e
    else:
        raise KeyError(f"unknown reward {name!r}; available: {', '.join(available())} "
                       f"(or a 'module:function' string)")
    if not callable(fn):
        raise TypeError(f"reward {name!r} is not callable: {fn!r}")
    _loaded[name] = as_reward(fn)
    return _loaded[name]
