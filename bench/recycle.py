"""Benchmark: a workspace episode's start and end, fresh runtimes against recycled ones (local backend).

    python bench/recycle.py [--episodes 100] [--rounds 3] [--threads 1]

An episode as Terminal-v0 runs one: a workspace built from its spec (a working directory and a copied file),
two commands, ``seal``, the verifier on the sealed tree in a grading workspace, the end. "fresh": every
workspace is a new runtime (``open_workspace``, closed after); "recycled": through a
:class:`sandbox.workspace.recycle.Recycler` (each runtime reset and started again). Rounds alternate the two,
``--threads`` episodes at once. Reported per episode: wall milliseconds and CPU milliseconds of this process
and every process it started (the zygote, the runtimes, their shells and verifiers: a cpuacct cgroup the
bench moves itself into; the kernel's own threads, a network namespace's teardown, are not in it), and the
ratio recycled / fresh. Needs root (the local backend). Run it on a quiet machine, one compute process at a time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox.workspace import BuildStep, WorkspaceSpec, open_workspace  # noqa: E402
from sandbox.workspace.grading import verify  # noqa: E402
from sandbox.workspace.recycle import Recycler  # noqa: E402

TEST_SH = ("#!/bin/bash\nmkdir -p /logs/verifier\n[ \"$(cat /app/answer.txt)\" = 42 ] && echo 1 > "
           "/logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")
CGROUP = f"/sys/fs/cgroup/cpuacct/agentrl-bench-recycle-{os.getpid()}"


def own_cgroup() -> str | None:
    """Move this process into a cpuacct cgroup of its own (its children follow); its usage file, or None.
    Those of earlier runs, whose processes are gone, are removed."""
    for base in ("/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup"):
        for entry in os.listdir(base) if os.path.isdir(base) else ():
            if entry.startswith("agentrl-bench-recycle-"):
                try:
                    os.rmdir(os.path.join(base, entry))
                except OSError:
                    pass
    for path, usage in ((CGROUP, "cpuacct.usage"), (CGROUP.replace("/cpuacct", ""), "cpu.stat")):
        try:
            os.makedirs(path, exist_ok=True)
            with open(os.path.join(path, "cgroup.procs"), "w") as f:
                f.write("0")
            return os.path.join(path, usage)
        except OSError:
            continue
    return None


def cpu_seconds(usage: str | None) -> float:
    if usage is None:
        return time.process_time()
    with open(usage) as f:
        text = f.read()
    if usage.endswith("cpuacct.usage"):
        return int(text) / 1e9
    return int(next(ln.split()[1] for ln in text.splitlines() if ln.startswith("usage_usec"))) / 1e6


def episode(spec: WorkspaceSpec, tests: str, recycler: Recycler | None) -> float:
    """One episode (see the module docstring); its reward."""
    ws = recycler.open(spec) if recycler else open_workspace(spec)
    try:
        ws.exec("echo 42 > answer.txt")
        ws.exec("cat answer.txt data.txt > /dev/null")
        tree = ws.seal()
    finally:
        if recycler:
            recycler.release(ws)
        else:
            ws.close()
    return verify(spec, tree, tests, graders=recycler).reward or 0.0


def run(mode: str, spec: WorkspaceSpec, tests: str, n: int, threads: int, usage: str | None) -> tuple[float, float]:
    """(wall ms, CPU ms) per episode of ``n`` in ``mode``."""
    recycler = Recycler() if mode == "recycled" else None
    try:
        if recycler:  # warm: as many parked runtimes as episodes run at once
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(lambda _: episode(spec, tests, recycler), range(2 * threads)))
            recycler.close()  # the resets under way land; its parked runtimes go: a fresh recycler, warmed
            recycler = Recycler()
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(lambda _: episode(spec, tests, recycler), range(2 * threads)))
        time.sleep(0.3)
        c0, t0 = cpu_seconds(usage), time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            rewards = list(pool.map(lambda _: episode(spec, tests, recycler), range(n)))
        wall, cpu = time.perf_counter() - t0, cpu_seconds(usage) - c0
        if sum(rewards) != n:
            raise SystemExit(f"{mode}: {n - sum(rewards):g} of {n} episodes were not graded 1")
        return wall / n * 1000, cpu / n * 1000
    finally:
        if recycler:
            recycler.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    usage = own_cgroup()
    got: dict[str, list[tuple[float, float]]] = {"fresh": [], "recycled": []}
    with tempfile.TemporaryDirectory() as tests, tempfile.TemporaryDirectory() as context:
        Path(tests, "test.sh").write_text(TEST_SH)
        Path(context, "data.txt").write_text("some data\n" * 20)
        spec = WorkspaceSpec(steps=(BuildStep("workdir", ("/app",)), BuildStep("copy", ("data.txt", "/app/"))),
                             context=context, workdir="/app", name="bench-recycle")
        open_workspace(spec).close()  # the zygote started (inside the cgroup), caches warm
        for _ in range(args.rounds):
            for mode in got:
                got[mode].append(run(mode, spec, tests, args.episodes, args.threads, usage))
    if usage is None:
        print("(no cgroup could be made: CPU is this process's only)")
    print("| episodes at once | mode | rounds x episodes | wall ms / episode | CPU ms / episode |\n"
          "|---:|---|---:|---:|---:|")
    med = {m: (statistics.median(w for w, _ in xs), statistics.median(c for _, c in xs)) for m, xs in got.items()}
    for mode, (wall, cpu) in med.items():
        print(f"| {args.threads} | {mode} | {args.rounds} x {args.episodes} | {wall:.1f} | {cpu:.1f} |")
    print(f"| {args.threads} | recycled / fresh | | {med['recycled'][0] / med['fresh'][0]:.2f}x | "
          f"{med['recycled'][1] / med['fresh'][1]:.2f}x |")


if __name__ == "__main__":
    main()
