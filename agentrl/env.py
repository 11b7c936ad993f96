"""The environment base class and the registry (gymnasium's own, under the ``agentrl/`` namespace).

A ``TextEnv`` poses a :class:`~agentrl.types.Task` as a text observation and takes the model's
text as its action. ``reset(options={"task": task})`` pins the task; otherwise the env draws one
with ``self.np_random``. ``step`` returns a float reward (``info["verified"] = False`` when the env
cannot verify, so the learner asks a reward model) and named parts in ``info["reward_components"]``.
"""

from __future__ import annotations

import sys
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from agentrl.types import RewardResult, Task

# Printable text: ASCII, Latin, Greek, maths symbols and more, plus the usual whitespace. Text
# spaces need an explicit charset for anything beyond alphanumerics (gymnasium's trap).
TEXT_CHARSET = "".join(
    ch for ch in map(chr, range(0x20, 0x3000)) if ch.isprintable()) + "\n\t"
MAX_TEXT = 1_000_000


def text_space(max_length: int = MAX_TEXT) -> spaces.Text:
    """A ``spaces.Text`` for free-form text (observations and actions)."""
    return spaces.Text(max_length=max_length, min_length=0, charset=TEXT_CHARSET)


class TextEnv(gymnasium.Env):
    """Base class of every agentrl environment: text observations, text actions.

    Subclasses implement :meth:`sample_task` and :meth:`score` (single turn). Multi-turn envs
    override :meth:`step` and return ``terminated=False`` with feedback as the next observation.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, render_mode: str | None = None) -> None:
        self.observation_space = text_space()
        self.action_space = text_space()
        self.render_mode = render_mode
        self.task: Task | None = None
        self._last_obs = ""

    # -- what subclasses provide ------------------------------------------------------------
    def sample_task(self, rng: np.random.Generator) -> Task:
        """Draw one task using ``rng`` (``self.np_random``); the same seed gives the same task."""
        raise NotImplementedError

    def score(self, action: str, task: Task) -> RewardResult:
        """Verify ``action`` against ``task`` (single-turn envs)."""
        raise NotImplementedError

    def reference_answer(self, task: Task) -> str:
        """A response that scores 1.0 (warm-start SFT targets and conformance tests)."""
        return str(task.answer)

    def render_prompt(self, task: Task) -> str:
        """The observation shown for ``task`` (text; chat prompts are joined for display)."""
        if isinstance(task.prompt, str):
            return task.prompt
        return "\n".join(m["content"] for m in task.prompt)

    # -- gymnasium API ----------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        task = (options or {}).get("task")
        self.task = task if task is not None else self.sample_task(self.np_random)
        self._last_obs = self.render_prompt(self.task)
        return self._last_obs, {"task": self.task, "prompt": self.task.prompt, "task_id": self.task.id}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        result = self.score(action if isinstance(action, str) else str(action), self.task)
        info = {"reward_components": dict(result.components), "verified": True, **result.info}
        self._last_obs = ""
        return "", float(result.score), True, False, info

    def render(self) -> str | None:
        return self._last_obs if self.render_mode == "ansi" else None


NAMESPACE = "agentrl"


def register(env_id: str, entry_point: str | type, **kwargs: Any) -> None:
    """Register an environment in gymnasium's registry (``agentrl/Name-v0`` ids)."""
    if env_id in gymnasium.registry:
        del gymnasium.registry[env_id]
    gymnasium.register(id=env_id, entry_point=entry_point, kwargs=kwargs, disable_env_checker=True,
                       order_enforce=False)


def make(env_id: str, **kwargs: Any) -> TextEnv:
    """Create an environment by registered id (``agentrl/GSM8K-v0``) or ``module:Class`` path.

    Returns the env itself, without gymnasium's wrappers, so its methods (``sample_task``,
    ``reference_answer``) stay reachable.
    """
    load_plugins()
    if env_id not in gymnasium.registry and ":" in env_id and "/" not in env_id.split(":")[0]:
        cls = load_object(env_id)
        return cls(**kwargs)
    if env_id not in gymnasium.registry:
        known = ", ".join(sorted(k for k in gymnasium.registry if k.startswith(NAMESPACE + "/")))
        raise KeyError(f"unknown environment {env_id!r}; registered: {known}")
    return gymnasium.make(env_id, **kwargs).unwrapped


def list_envs() -> list[str]:
    """Every registered ``agentrl/`` environment id."""
    load_plugins()
    return sorted(k for k in gymnasium.registry if k.startswith(NAMESPACE + "/"))


def load_object(path: str) -> Any:
    """Import ``module.sub:Attr`` and return the attribute, with a clear error if it is missing."""
    import importlib

    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"expected 'module:attribute', got {path!r}")
    try:
        obj = importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"cannot import {module!r} (from {path!r}): {e}") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AttributeError(f"{module!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


_plugins_loaded = False


def load_plugins() -> None:
    """Register environments from every ``agentrl.envs`` entry point (ours and third parties')."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    from importlib.metadata import entry_points

    for ep in entry_points(group="agentrl.envs"):
        try:
            ep.load()()
        except Exception as e:  # a broken third-party plugin must not break agentrl
            print(f"agentrl: environment plugin {ep.name!r} failed to load: {e}", file=sys.stderr)


def fixed_tasks(env: TextEnv, n: int, seed: int) -> list[Task]:
    """``n`` distinct tasks, the same for the same seed: the env's dataset if it has one, else drawn."""
    dataset = getattr(env, "tasks", None)
    if dataset is not None:
        rng = np.random.default_rng(seed)
        idx = rng.permutation(len(dataset))[:n] if n < len(dataset) else np.arange(len(dataset))
        return [dataset[int(i)] for i in sorted(idx)]
    rng = np.random.default_rng(seed)
    seen: dict[str, Task] = {}
    for _ in range(n * 50):
        t = env.sample_task(rng)
        seen.setdefault(t.id, t)
        if len(seen) >= n:
            break
    return list(seen.values())
