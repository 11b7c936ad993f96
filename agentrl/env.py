"""The environment base class and the registry (gymnasium's own, under the ``agentrl/`` namespace).

A ``TextEnv`` poses a :class:`~agentrl.types.Task` as a text observation and takes the model's
text as its action. ``reset(options={"task": task})`` pins the task; otherwise the env draws one
with ``self.np_random``. ``step`` returns a float reward (``info["verified"] = False`` when the env
cannot verify, so the learner asks a reward model) and named parts in ``info["reward_components"]``.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from agentrl.types import RewardResult, Task

# Printable text: ASCII, Latin, Greek, maths symbols and more, every whitespace character (the
# benchmarks hold no-break spaces and line separators, which Python does not call printable) and the
# invisible formatting marks scraped text carries (zero-width spaces and joiners, soft hyphen, BOM).
# Text spaces need an explicit charset for anything beyond alphanumerics (gymnasium's trap).
TEXT_CHARSET = "".join(
    ch for ch in map(chr, range(0x3001)) if ch.isprintable() or ch.isspace()) + "\u00ad\u200b\u200c\u200d\u2060\ufeff"
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

    def reference_action(self) -> str:
        """The next action of a reference policy in the env's current state (called after ``reset`` and
        after each ``step``). A multi-turn env overrides it (a scripted policy that plays from the
        feedback as the model must, e.g. a binary search); the warm start rolls episodes out with it.
        Default: ``reference_answer`` of the current task (a single-turn env's reference policy)."""
        if self.task is None:
            raise RuntimeError("call reset() before reference_action()")
        return self.reference_answer(self.task)

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


def has_reference_policy(env: Any) -> bool:
    """Whether ``env``'s class gives its own ``reference_action`` (a multi-turn reference policy)."""
    method = getattr(type(env), "reference_action", None)
    return callable(method) and method is not TextEnv.reference_action


def reference_episode(env: TextEnv, task: Task, seed: int | None = None) -> tuple[list[str], float]:
    """Play ``task`` with the env's reference policy, ``reference_action()`` then ``step`` until the env
    ends the episode or ``max_turns`` is reached: (the actions and observations in order, the return).
    ``seed`` seeds the env's ``np_random`` (a random reference policy plays the same episode again); None
    keeps the env's stream (seeded from the OS on first use)."""
    env.reset(seed=seed, options={"task": task})
    texts: list[str] = []
    total = 0.0
    for _ in range(max(1, int(getattr(env, "max_turns", 1)))):
        action = env.reference_action()
        out = env.step(action)
        if inspect.isawaitable(out):  # an ``async def step``
            out = asyncio.run(out)
        obs, reward, terminated, truncated, _ = out
        texts += [action, str(obs)]
        total += float(reward)
        if terminated or truncated:
            break
    return texts, total


NAMESPACE = "agentrl"


class EnvError(ValueError):
    """An env that cannot be made as configured (import path, class name, kwargs), in one line with the fix."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class EnvFailureRateError(RuntimeError):
    """Too many of a run's episodes failed in the env (``env.max_failure_rate``): the run stops, in one line."""


class UnknownEnvError(EnvError, KeyError):
    """An env id that is not registered (a ``KeyError`` too, as lookups in a registry raise)."""


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
    prefix, sep, rest = env_id.partition(":")
    if sep and prefix in _families and env_id not in gymnasium.registry:
        return load_object(_families[prefix][0])(rest, **kwargs)
    if env_id not in gymnasium.registry and ":" in env_id and "/" not in env_id.split(":")[0]:
        return _construct(env_class(env_id, env_id), kwargs, env_id)
    if env_id not in gymnasium.registry:
        known = ", ".join(sorted(k for k in gymnasium.registry if k.startswith(NAMESPACE + "/")))
        raise UnknownEnvError(f"unknown environment {env_id!r}; registered: {known} (or give module:Class, or "
                              f"register it with env.register: {{{env_id}: module:Class}})")
    spec = gymnasium.registry[env_id]
    if isinstance(spec.entry_point, str):  # import it here, for errors that name the fix
        _construct(env_class(spec.entry_point, env_id), {**(spec.kwargs or {}), **kwargs}, env_id, check_only=True)
    return gymnasium.make(env_id, **kwargs).unwrapped


def env_class(path: str, env_id: str) -> Any:
    """The class at ``module:Class`` for env ``env_id``, or an :class:`EnvError` saying what to fix."""
    import importlib

    module, _, attr = path.partition(":")
    if not module or not attr:
        raise EnvError(f"env {env_id!r}: expected 'module:Class', got {path!r}")
    try:
        obj = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and module.split(".")[0] == e.name.split(".")[0]:
            raise EnvError(f"env {env_id!r}: no module named {e.name!r}; put the directory holding {module}.py on "
                           f"PYTHONPATH (PYTHONPATH=DIR agentrl train ...) or pip install its package") from e
        raise EnvError(f"env {env_id!r}: module {module!r} imports {e.name!r}, which is not installed "
                       f"(pip install {e.name})") from e
    for part in attr.split("."):
        if not hasattr(obj, part):
            envs = sorted(n for n, v in vars(obj).items() if isinstance(v, type) and issubclass(v, gymnasium.Env)
                          and v.__module__ == getattr(obj, "__name__", None))
            raise EnvError(f"env {env_id!r}: module {module!r} has no class {attr!r}"
                           + (f"; env classes there: {', '.join(envs)}" if envs else ""))
        obj = getattr(obj, part)
    return obj


def _construct(cls: Any, kwargs: dict[str, Any], env_id: str, check_only: bool = False, args: tuple = ()) -> Any:
    """``cls(*args, **kwargs)``, with an unknown keyword named against the ones the class takes."""
    import inspect

    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):
        sig = None
    if sig is not None and not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        bad = sorted(set(kwargs) - set(sig.parameters))
        if bad:
            names = [n for n in list(sig.parameters)[len(args):] if n not in ("self", "render_mode")]
            raise EnvError(f"env {env_id!r}: unknown keyword {bad[0]!r} in env.kwargs; "
                           f"{getattr(cls, '__name__', cls)} takes: {', '.join(names) or 'none'}")
    return None if check_only else cls(*args, **kwargs)


def construct(cls: Any, env_id: str, *args: Any, **kwargs: Any) -> Any:
    """``cls(*args, **kwargs)`` for env ``env_id`` (an adapter's factory): an ``env.kwargs`` key the class
    does not take is an :class:`EnvError` naming the ones it does, as for ``module:Class`` envs."""
    return _construct(cls, kwargs, env_id, args=args)


def describe_env(env_id: str) -> tuple[str, str]:
    """(one-line description, keyword arguments with defaults) of a registered env, for ``envs list``."""
    import inspect

    spec = gymnasium.registry[env_id]
    try:
        cls = env_class(spec.entry_point, env_id) if isinstance(spec.entry_point, str) else spec.entry_point
    except Exception as e:  # noqa: BLE001 - a broken env must not break the listing
        return f"(cannot import: {e})", ""
    doc = (inspect.getdoc(cls) or "").strip().splitlines()
    try:
        params = [p for p in inspect.signature(cls).parameters.values()
                  if p.name not in ("self", "render_mode") and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    except (TypeError, ValueError):
        params = []
    fixed = spec.kwargs or {}
    def short(v: Any) -> str:
        r = repr(v)
        return r if len(r) <= 24 else r[:20] + "..." + r[-1]

    kwargs = ", ".join(f"{p.name}={short(fixed.get(p.name, p.default))}" if p.default is not p.empty or p.name in fixed
                       else p.name for p in params)
    return (doc[0] if doc else ""), kwargs


def list_envs(families: bool = False) -> list[str]:
    """Every registered ``agentrl/`` environment id; with ``families``, also the ids that family
    listers name (``reasoning_gym:leg_counting``, ... for the families whose package is installed)."""
    load_plugins()
    ids = sorted(k for k in gymnasium.registry if k.startswith(NAMESPACE + "/"))
    if families:
        for _, lister in _families.values():
            ids += load_object(lister)() if lister else []
    return ids


_families: dict[str, tuple[str, str | None]] = {}


def register_family(prefix: str, factory: str, lister: str | None = None) -> None:
    """Route ids ``prefix:REST`` to ``factory(REST, **kwargs)`` (``module:function`` strings, imported on
    first use). ``lister() -> list[str]`` names the family's ids for ``agentrl envs list`` ([] when its
    package is not installed). Adapters of other frameworks register this way (``openrlhf:FILE.py``)."""
    _families[prefix] = (factory, lister)


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


def end_parked_workspaces() -> None:
    """End the workspace runtimes this process's envs parked for reuse (``sandbox.workspace.recycle``): a run
    or a command ends with them, not ``park_s`` later (the envs stay usable: later workspaces start afresh).
    Nothing to do where no workspace env recycled any (the module is then not loaded)."""
    recycle = sys.modules.get("sandbox.workspace.recycle")
    if recycle is not None:
        recycle.end_all_parked()
