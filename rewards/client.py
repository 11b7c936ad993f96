"""``RemoteReward``: score through a reward server, with batching, timeouts, retries and auth.

    reward = RemoteReward("http://127.0.0.1:8000", reward="math", token="...")
    results = reward.score_batch(responses, tasks)      # list[RewardResult], in order
    result = reward(response, task)                      # same as an in-process reward function

Connection errors, timeouts, 429, 5xx and malformed answers (not JSON, not one result per item, a
score that is not a finite number) are retried with exponential backoff (``retries``, ``backoff_s``,
``max_backoff_s``); other 4xx (401, 413, 422) raise at once. An item the server could not score
comes back as score 0 with ``info["error"]`` (or raises, ``on_item_error="raise"``): one bad item
never aborts the batch.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import httpx

from agentrl.types import RewardResult, Task

_RETRY_STATUS = {429, 500, 502, 503, 504}


class RemoteRewardError(RuntimeError):
    """The server could not be reached or refused the request."""


class RemoteReward:
    """Client of the reward server's native ``POST /score`` endpoint."""

    def __init__(self, url: str, *, reward: str = "math", token: str | None = None, batch_size: int = 256,
                 timeout_s: float = 60.0, retries: int = 3, backoff_s: float = 0.5, max_backoff_s: float = 8.0,
                 on_item_error: str = "zero") -> None:
        if on_item_error not in ("zero", "raise"):
            raise ValueError("on_item_error must be 'zero' or 'raise'")
        self.url = url.rstrip("/")
        self.reward, self.batch_size = reward, batch_size
        self.retries, self.backoff_s, self.max_backoff_s = retries, backoff_s, max_backoff_s
        self.on_item_error = on_item_error
        token = token if token is not None else os.environ.get("AGENTRL_REWARD_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(timeout=timeout_s, headers=headers)

    def __call__(self, response: str, task: Task) -> RewardResult:
        return self.score_batch([response], [task])[0]

    def score_batch(self, responses: list[str], tasks: list[Task], reward: str | None = None) -> list[RewardResult]:
        """Score ``responses[i]`` against ``tasks[i]`` with ``reward`` (default: the client's)."""
        if len(responses) != len(tasks):
            raise ValueError(f"{len(responses)} responses but {len(tasks)} tasks")
        out: list[RewardResult] = []
        for start in range(0, len(responses), self.batch_size):
            items = [{"response": r, "task": t.to_dict()}
                     for r, t in zip(responses[start:start + self.batch_size], tasks[start:start + self.batch_size])]
            body = self._request("POST", "/score", {"reward": reward or self.reward, "items": items},
                                 check=lambda b, n=len(items): _check_results(b, n))
            out.extend(self._result(r) for r in body["results"])
        return out

    def rewards(self) -> list[str]:
        """Reward names the server offers."""
        return list(self._request("GET", "/rewards", None)["rewards"])

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RemoteReward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _result(self, r: dict[str, Any]) -> RewardResult:
        if r.get("error"):
            if self.on_item_error == "raise":
                raise RemoteRewardError(f"item failed on the server: {r['error']}")
            return RewardResult(0.0, {}, {**r.get("info", {}), "error": r["error"]})
        return RewardResult(float(r["score"]), dict(r["components"]), dict(r["info"]))

    def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", path, payload)

    def _request(self, method: str, path: str, payload: dict[str, Any] | None,
                 check: Callable[[Any], None] | None = None) -> dict[str, Any]:
        last: str = ""
        for attempt in range(self.retries + 1):
            try:
                resp = self._http.request(method, self.url + path, json=payload)
                if resp.status_code < 400:
                    body = resp.json()
                    if check is not None:
                        check(body)
                    return body
                if resp.status_code not in _RETRY_STATUS:
                    raise RemoteRewardError(f"{method} {path}: HTTP {resp.status_code}: {resp.text[:500]}")
                last = f"HTTP {resp.status_code}"
            except httpx.TransportError as e:
                last = f"{type(e).__name__}: {e}"
            except ValueError as e:  # not JSON, or not the expected shape: a broken server or proxy
                last = f"malformed answer: {e}"
            if attempt < self.retries:
                time.sleep(min(self.max_backoff_s, self.backoff_s * 2 ** attempt))
        raise RemoteRewardError(f"{method} {self.url}{path} failed after {self.retries + 1} attempts: {last}")


def _check_results(body: Any, n: int) -> None:
    """Raise ``ValueError`` unless ``body`` is ``{"results": [...]}`` with one well-formed result per item."""
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list) or len(results) != n:
        got = len(results) if isinstance(results, list) else type(results).__name__
        raise ValueError(f"expected {n} results, got {got}")
    for r in results:
        if not isinstance(r, dict) or (not r.get("error") and not (
                isinstance(r.get("score"), int | float) and math.isfinite(r["score"]) and isinstance(r.get("components"), dict)
                and isinstance(r.get("info"), dict))):
            raise ValueError(f"malformed result {str(r)[:200]}")
