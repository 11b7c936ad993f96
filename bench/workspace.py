"""Benchmark: workspaces on each backend — start latency (cold and from the warm pool), the ``exec``
round trip, grading (seal + a fresh workspace + the verifier), and many workspaces at once.

    python bench/workspace.py [--backends local docker] [--starts 20] [--execs 200] [--grades 10]
                              [--concurrent 64]
    python bench/workspace.py --grade-before DIR [--rounds 5] [--grades 10]

Prints one table, p50 / p99 in milliseconds; on Docker, beside its rows, a plain ``docker run --rm``
and ``docker exec`` of ``true`` on the workspaces' base image (the floor a Docker workspace is held to). Anchors (issue 28): a local Docker cold start is
2-5 s, hosted sandboxes claim 60-90 ms; the local backend should start in <= 50 ms p50 (from the
pool) and exec in <= 10 ms. ``--grade-before DIR`` grades A/B against another checkout (a ``git
worktree`` of an earlier commit): ``--rounds`` rounds, each ``--grades`` grades in a fresh process of
that checkout, then of this one; the table has both rows and their p50 ratio. Run it on a quiet
machine, one compute process at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox.workspace import WorkspaceSpec, open_workspace  # noqa: E402
from sandbox.workspace.grading import verify  # noqa: E402
from sandbox.workspace.pool import GraderPool, WorkspacePool  # noqa: E402

TEST_SH = ("#!/bin/bash\nmkdir -p /logs/verifier\n[ \"$(cat /app/answer.txt)\" = 42 ] && echo 1 > "
           "/logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] * 1000


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def cold_starts(backend: str, n: int) -> list[float]:
    spec = WorkspaceSpec(name="bench")
    open_workspace(spec, backend).close()  # images built, caches warm
    return timed(lambda: open_workspace(spec, backend).close(), n)  # start (ready for exec) + close


def pool_starts(backend: str, n: int) -> list[float]:
    spec = WorkspaceSpec(name="bench-pool")
    out = []
    with WorkspacePool(backend, size=2) as pool:
        pool.acquire(spec).close()
        for _ in range(n):
            time.sleep(0.5 if backend == "local" else 3.0)  # an episode's length: the refill lands
            t = time.perf_counter()
            ws = pool.acquire(spec)
            out.append(time.perf_counter() - t)
            ws.close()
    return out


def execs(backend: str, n: int) -> list[float]:
    with open_workspace(WorkspaceSpec(name="bench"), backend) as ws:
        ws.exec("true")
        return timed(lambda: ws.exec("true"), n)


def grades(backend: str, n: int, tests: str, ahead: bool = False) -> list[float]:
    """Seal + verify, ``n`` times; ``ahead``: the grading workspace from a ``GraderPool`` (started while
    the agent's episode ran), else started with the tree."""
    spec = WorkspaceSpec(name="bench-grade")
    out = []
    graders = GraderPool(backend) if ahead else None
    try:  # as the workspace envs do: a sealed workspace's teardown goes on in the background
        from sandbox.workspace.pool import Closer

        closer: Any = Closer()
    except ImportError:  # an earlier checkout (--grade-before): closed here, as it did
        closer = SimpleNamespace(submit=lambda ws: ws.close(), close=lambda: None)
    try:
        for _ in range(n):
            ws = open_workspace(spec, backend)
            ws.exec("echo 42 > answer.txt")
            t = time.perf_counter()
            tree = ws.seal()
            closer.submit(ws)
            verdict = verify(spec, tree, tests, backend=backend, timeout_s=60, graders=graders)
            out.append(time.perf_counter() - t)
            assert verdict.reward == 1.0, verdict
    finally:
        closer.close()
        if graders is not None:
            graders.close()
    return out


def plain_docker(n: int) -> dict[str, list[float]]:
    """The floor a Docker workspace is held to, measured in the same run: ``docker run --rm`` of the
    workspaces' own base image (``true``, no network), and ``docker exec`` of ``true`` in a running
    container of it (seconds each, through the ``docker`` CLI as a user would time them)."""
    from sandbox.workspace.docker_base import build_base_image

    image = build_base_image()
    run = ["docker", "run", "--rm", "--network=none", image, "true"]
    out = {"plain `docker run --rm` (same image)": timed(lambda: subprocess.run(run, check=True), n)}
    name = f"agentrl-bench-plain-{os.getpid()}"
    subprocess.run(["docker", "run", "-d", "--rm", "--network=none", "--name", name, image, "sleep", "600"],
                   check=True, capture_output=True)
    try:
        out["plain `docker exec` of true"] = timed(
            lambda: subprocess.run(["docker", "exec", name, "true"], check=True), n)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    return out


def concurrent(backend: str, n: int) -> tuple[float, int]:
    """Start ``n`` workspaces at once, run a command in each, close them: (seconds, successes)."""
    def one(k: int) -> bool:
        with open_workspace(WorkspaceSpec(name=f"c{k}"), backend) as ws:
            return ws.exec(f"echo {k} > f && cat f").output == f"{k}\n"

    t = time.perf_counter()
    with ThreadPoolExecutor(n) as pool:
        ok = sum(pool.map(one, range(n)))
    return time.perf_counter() - t, ok


def grade_worker(root: str, backend: str, n: int, tests: str) -> list[float]:
    """``n`` grades in a fresh process of the checkout at ``root`` (its sandbox and runtime)."""
    code = (f"import json, sys; sys.path.insert(0, {root!r}); sys.path.insert(1, {str(Path(__file__).parent)!r}); "
            f"import workspace as w; print(json.dumps(w.grades({backend!r}, {n}, {tests!r})))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"the grade worker of {root} failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def compare_grades(before: str, backend: str, rounds: int, n: int, tests: str) -> dict[str, list[float]]:
    """Grades in this checkout and in ``before``, A/B interleaved (see the module docstring): the times
    of each, keyed ``after`` and ``before``."""
    after = str(Path(__file__).resolve().parents[1])
    got: dict[str, list[float]] = {"before": [], "after": []}
    for _ in range(rounds):
        got["before"] += grade_worker(before, backend, n, tests)
        got["after"] += grade_worker(after, backend, n, tests)
    return got


def measure(b: str, args: argparse.Namespace, tests: str) -> list[tuple[str, str, int, float, float]]:
    """The table's rows for backend ``b``."""
    measured = {"cold start": cold_starts(b, args.starts), "start from pool": pool_starts(b, args.starts),
                "exec round trip": execs(b, args.execs)}
    if args.grade_before:
        got = compare_grades(args.grade_before, b, args.rounds, args.grades, tests)
        measured["grade (seal + verify)"] = got["after"]
        measured[f"grade, checkout {Path(args.grade_before).name} (A/B)"] = got["before"]
    else:
        measured["grade (seal + verify)"] = grades(b, args.grades, tests)
    measured["grade, grader started ahead (GraderPool)"] = grades(b, args.grades, tests, ahead=True)
    if b == "docker":
        measured.update(plain_docker(args.starts))
    rows = [(b, name, len(xs), pct(xs, 0.5), pct(xs, 0.99)) for name, xs in measured.items()]
    if args.grade_before:
        ratio = pct(measured["grade (seal + verify)"], 0.5) / pct(got["before"], 0.5)
        rows.append((b, f"grade, this / that checkout (p50): {ratio:.2f}x", 1, float("nan"), float("nan")))
    if args.concurrent:
        secs, ok = concurrent(b, args.concurrent)
        rows.append((b, f"{args.concurrent} at once ({'all' if ok == args.concurrent else ok} ok), total", 1,
                     secs * 1000, float("nan")))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", nargs="+", default=["local", "docker"])
    ap.add_argument("--starts", type=int, default=20)
    ap.add_argument("--execs", type=int, default=200)
    ap.add_argument("--grades", type=int, default=10)
    ap.add_argument("--concurrent", type=int, default=64)
    ap.add_argument("--grade-before", default=None, metavar="DIR", help="grade A/B against this checkout too")
    ap.add_argument("--rounds", type=int, default=5, help="with --grade-before: rounds of --grades each")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tests:
        Path(tests, "test.sh").write_text(TEST_SH)
        rows = [row for b in args.backends for row in measure(b, args, tests)]
    print("| backend | measure | n | p50 ms | p99 ms |\n|---|---|---:|---:|---:|")
    for b, name, n, p50, p99 in rows:
        cells = ["" if x != x else f"{x:,.1f}" for x in (p50, p99)]  # nan: no such figure
        print(f"| {b} | {name} | {n} | {cells[0]} | {cells[1]} |")

if __name__ == "__main__":
    main()
