"""``GradeCache``: one grade per distinct final tree of a task, shared by an env's per-episode copies.

The samples of a GRPO group start from the same tree and, once a policy has learned a task, often end
on the same one: ``n`` byte-identical trees graded ``n`` times by a deterministic verifier give one
verdict ``n`` times. The cache keys a verdict on (task id, the tree's content digest: every path, its
kind, permission bits, size, contents or link target and hard links, as the runtime hashed it while sealing), so
two trees that differ anywhere a verifier could look are graded apart; modification times are not in
the digest (a verifier that reads them must not use the cache). A grade in flight is waited for, not
repeated. Only a verdict with a reward is kept: a grader that failed (``Verdict.error``) is retried by
the next episode. A verifier whose verdict depends on more than the tree (time, randomness, the
network) must run with the cache off (``grade_cache=False``, the default of Harbor task folders).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from sandbox.workspace.grading import Verdict


class GradeCache:
    """Verdicts by (task id, tree digest), at most ``capacity`` (least recently used go first); a deep
    copy is the same cache (the env's copies share it)."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self.verdicts: OrderedDict[tuple[str, str], Verdict] = OrderedDict()
        self.in_flight: dict[tuple[str, str], threading.Event] = {}
        self.lock = threading.Lock()
        self.hits = self.misses = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> GradeCache:
        return self

    def grade(self, task_id: str, digest: str | None, run: Callable[[], Verdict]) -> Verdict:
        """The verdict of the tree with ``digest`` on ``task_id``: cached, awaited, or ``run()`` now (a tree
        without a digest is always graded)."""
        if not digest:
            return run()
        key = (task_id, digest)
        while True:
            with self.lock:
                if key in self.verdicts:
                    self.verdicts.move_to_end(key)
                    self.hits += 1
                    return self.verdicts[key]
                waiting = self.in_flight.get(key)
                if waiting is None:
                    self.in_flight[key] = done = threading.Event()
                    self.misses += 1
                    break
            waiting.wait()  # the same tree is being graded: its verdict, or (it failed) our turn
        try:
            verdict = run()
            if verdict.error is None and verdict.reward is not None:
                with self.lock:
                    self.verdicts[key] = verdict
                    while len(self.verdicts) > self.capacity:
                        self.verdicts.popitem(last=False)
            return verdict
        finally:
            with self.lock:
                self.in_flight.pop(key, None)
            done.set()

    def stats(self) -> dict[str, int]:
        """Grades answered from the cache (``hits``) and run (``misses``) so far."""
        with self.lock:
            return {"hits": self.hits, "misses": self.misses}
