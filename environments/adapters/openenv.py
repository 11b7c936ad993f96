"""OpenEnv environments as agentrl envs: ``env.id: openenv:TARGET`` (needs the ``openenv`` extra).

TARGET is

- ``http://HOST:PORT`` — a running OpenEnv server (any ``create_app`` server, or ``agentrl serve-env``);
- ``module:app`` — an OpenEnv app (``create_app(...)``) importable here: we start it with uvicorn on a
  free 127.0.0.1 port and stop it when the run's process exits;
- ``docker:IMAGE`` — an OpenEnv server image: we run it (``-p 127.0.0.1:PORT:8000``) and stop and remove
  the container at exit.

Every episode is a WebSocket session of its own, through openenv-core's own ``GenericEnvClient`` (all
sessions share one event loop thread): reset with the task's seed, then a step per turn. The policy's
text goes into the action model's one string field (``action_field`` names it when there are several;
read from ``GET /schema``); the observation becomes text through ``observation_field`` (one field of
it) or, by default, its JSON. The reward is the observation's ``reward`` (None: 0.0), the episode ends
with ``done`` or after ``max_turns`` turns. A server that dies fails only the episodes on it (they
leave the loss).

Tasks are seeds (``Task(id="seed-N", metadata={"seed": N})``): OpenEnv envs choose their own problem in
``reset``, so the prompt the policy sees is the observation that reset returns, per episode. ``split``
(train | test | dev) draws its seeds from its own residue modulo 3, so held-out evaluation (``env.eval_kwargs``
defaults to ``{split: test}``) and dev tasks never share a seed with training.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np

from agentrl.env import EnvError, TextEnv
from agentrl.types import RewardResult, Task

_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()
_LAUNCHED: dict[str, tuple[str, Any]] = {}  # target -> (url, how to stop it)


def _loop() -> asyncio.AbstractEventLoop:
    """The event loop every OpenEnv client of this process runs on (a daemon thread)."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = asyncio.new_event_loop()
            threading.Thread(target=_LOOP.run_forever, name="agentrl-openenv-loop", daemon=True).start()
        return _LOOP


def _call(coro: Any, timeout_s: float) -> Any:
    return asyncio.run_coroutine_threadsafe(coro, _loop()).result(timeout_s)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, timeout_s: float, alive: Any = None) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if alive is not None and not alive():
            raise EnvError(f"openenv: the server for {url} exited before it answered /health")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise EnvError(f"openenv: {url} did not answer /health within {timeout_s:g} s")


def launch(target: str, timeout_s: float = 120.0) -> str:
    """The base URL of ``target``: as given for a URL; for ``module:app`` or ``docker:IMAGE`` a server we
    start once per process (stopped at exit)."""
    if target.startswith(("http://", "https://")):
        return target.rstrip("/")
    if target in _LAUNCHED:
        return _LAUNCHED[target][0]
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    if target.startswith("docker:"):
        image = target[len("docker:"):]
        try:
            cid = subprocess.run(["docker", "run", "-d", "--rm", "-p", f"127.0.0.1:{port}:8000", image],
                                 capture_output=True, text=True, check=True, timeout=300).stdout.strip()
        except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
            detail = getattr(e, "stderr", "") or str(e)
            raise EnvError(f"openenv: cannot start docker image {image!r}: {detail.strip()[:300]}") from None
        _LAUNCHED[target] = (url, lambda: subprocess.run(["docker", "rm", "-f", cid], capture_output=True, timeout=60))
        _wait_healthy(url, timeout_s)
        return url
    module = target.partition(":")[0]
    if not module or importlib.util.find_spec(module) is None:
        raise EnvError(f"openenv: {target!r} is neither a URL (http://...), an importable module:app nor "
                       f"docker:IMAGE (put the app's directory on PYTHONPATH)")
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", target, "--host", "127.0.0.1", "--port", str(port),
                             "--log-level", "warning"], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})

    def stop() -> None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    _LAUNCHED[target] = (url, stop)
    _wait_healthy(url, timeout_s, alive=lambda: proc.poll() is None)
    return url


@atexit.register
def stop_launched() -> None:
    """Stop every server this process started (runs at exit; tests call it too)."""
    while _LAUNCHED:
        _, (_, stop) = _LAUNCHED.popitem()
        try:
            stop()
        except Exception:  # noqa: BLE001 - stopping at exit must not raise
            pass


def action_field_of(schema: dict[str, Any], wanted: str | None) -> str:
    """The action model's string field the policy's text goes into."""
    props = schema.get("properties") or {}
    strings = [k for k, v in props.items() if k != "metadata" and v.get("type") == "string"]
    if wanted is not None:
        if wanted not in props:
            fields = ", ".join(k for k in props if k != "metadata")
            raise EnvError(f"openenv: the action model has no field {wanted!r}; its fields: {fields}")
        return wanted
    if len(strings) != 1:
        raise EnvError(f"openenv: the action model has {len(strings)} string fields ({', '.join(strings) or 'none'}); "
                       f"name the one for the policy's text in env.kwargs.action_field")
    return strings[0]


SPLITS = {"train": 0, "test": 1, "dev": 2}
"""A split's seeds: those equal to its value modulo 3."""


class OpenEnvEnv(TextEnv):
    """An OpenEnv server's env, an episode per WebSocket session (see the module docstring)."""

    remote_episodes = True

    def __init__(self, target: str, action_field: str | None = None, observation_field: str | None = None,
                 max_turns: int = 1, timeout_s: float = 300.0, start_timeout_s: float = 120.0,
                 split: str = "train", render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        import httpx

        if split not in SPLITS:
            raise EnvError(f"openenv: no split {split!r}; valid: {', '.join(SPLITS)} (each draws its own seeds)")
        self.split = split

        self.target, self.url = target, launch(target, start_timeout_s)
        try:
            schema = httpx.get(self.url + "/schema", timeout=start_timeout_s).raise_for_status().json()
        except httpx.HTTPError as e:
            raise EnvError(f"openenv: cannot read {self.url}/schema ({type(e).__name__}: {e})") from None
        self.action_field = action_field_of(schema.get("action") or {}, action_field)
        obs_props = (schema.get("observation") or {}).get("properties") or {}
        if observation_field is not None and observation_field not in obs_props:
            raise EnvError(f"openenv: the observation has no field {observation_field!r}; its fields: "
                           f"{', '.join(k for k in obs_props if k not in ('reward', 'done', 'metadata'))}")
        self.observation_field, self.max_turns, self.timeout_s = observation_field, max(1, int(max_turns)), timeout_s
        self.client: Any = None
        self.turns = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> OpenEnvEnv:
        twin = object.__new__(OpenEnvEnv)
        twin.__dict__.update({k: v for k, v in self.__dict__.items() if k not in ("client", "_np_random")})
        twin.client, twin._np_random = None, None
        return twin

    def sample_task(self, rng: np.random.Generator) -> Task:
        seed = 3 * int(rng.integers(0, (2**31 - 1) // 3)) + SPLITS[self.split]  # the split's own seeds
        return Task(id=f"seed-{seed}", prompt="", answer=None, metadata={"seed": seed})

    def score(self, action: str, task: Task) -> RewardResult:
        raise EnvError("an OpenEnv env scores in its server's step; it has no score of its own")

    def render(self, observation: dict[str, Any]) -> str:
        """The observation as the policy's text."""
        if self.observation_field is not None:
            value = observation.get(self.observation_field)
            return value if isinstance(value, str) else json.dumps(value)
        return json.dumps(observation, sort_keys=True)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        from openenv.core import GenericEnvClient

        super(TextEnv, self).reset(seed=seed)
        task = (options or {}).get("task") or self.sample_task(self.np_random)
        self.close()
        self.client = GenericEnvClient(base_url=self.url, message_timeout_s=self.timeout_s)
        result = _call(self.client.reset(seed=int(task.metadata.get("seed", 0))), self.timeout_s)
        text = self.render(result.observation)
        self.task, self.turns = task, 0
        return text, {"task": task, "task_id": task.id, "prompt": text, "observation": result.observation}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.client is None:
            raise RuntimeError("call reset() before step()")
        result = _call(self.client.step({self.action_field: str(action)}), self.timeout_s)
        self.turns += 1
        done = bool(result.done)
        truncated = not done and self.turns >= self.max_turns
        info = {"observation": result.observation, "verified": True, "reward_components": {}}
        if done or truncated:
            self.close()
        return self.render(result.observation), float(result.reward or 0.0), done, truncated, info

    def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            try:
                _call(client.disconnect(), 10)
            except Exception:  # noqa: BLE001 - the server may be gone already
                pass


def make_env(rest: str, **kwargs: Any) -> OpenEnvEnv:
    """``openenv:URL`` | ``openenv:module:app`` | ``openenv:docker:IMAGE``."""
    if not rest:
        raise EnvError("openenv env needs a target: openenv:http://HOST:PORT, openenv:module:app or "
                       "openenv:docker:IMAGE")
    return OpenEnvEnv(rest, **kwargs)
