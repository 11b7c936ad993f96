"""The scoring pool on uvloop (the servers' event loop): results larger than the pipe's buffer arrive
in pieces, and a worker must not be taken for crashed when the reader wakes before the last piece."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

uvloop = pytest.importorskip("uvloop")


def test_large_results_under_uvloop_are_read_whole(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent))  # the forked workers find the plugin
    from rewards._pool import WorkerPool

    async def main() -> tuple[list[dict], int]:
        pool = WorkerPool(2, ["rewards_test_plugins:bulky"], item_timeout_s=30)
        await pool.start()
        try:
            batches = [[("rewards_test_plugins:bulky", f"r{k}-{i}", {"id": str(i), "prompt": "", "answer": None,
                                                                    "metadata": {}}) for i in range(8)]
                       for k in range(16)]
            results = await asyncio.gather(*(pool.score(b) for b in batches))
            return [r for batch in results for r in batch], pool.restarts
        finally:
            await pool.close()

    results, restarts = uvloop.run(main())
    assert len(results) == 128 and all(r["error"] is None and r["score"] == 1.0 for r in results), \
        {r["error"] for r in results}
    assert all(len(r["info"]["echo"]) >= 99_000 for r in results)
    assert restarts == 0
