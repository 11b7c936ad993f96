"""Benchmark: HumanEval's 164 canonical solutions and 164 broken variants through each sandbox backend
and through a plain `subprocess.run([python, file])` harness; prints executions/s and the ratio.

    python bench/sandbox.py [--workers N] [--no-docker] [--limit K]

Every backend runs the same 328 programs with the same concurrency (N threads, default: cores).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sandbox  # noqa: E402
from sandbox.local import DEFAULT_PRELOAD, LocalSandbox  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "environments" / "data" / "HumanEval.jsonl.gz"
BROKEN = [
    "    return None\n",
    "    class _AlwaysEqual:\n        def __eq__(self, other):\n            return True\n    return _AlwaysEqual()\n",
    "    print('PASSED')\n    import sys\n    sys.exit(0)\n",
    "    import os\n    os._exit(0)\n",
]


def programs(limit: int | None) -> list[tuple[dict, str, bool]]:
    """(problem, candidate program, is_canonical) for the canonical and broken variants."""
    with gzip.open(DATA, "rt") as f:
        probs = [json.loads(line) for line in f][:limit]
    good = [(p, p["prompt"] + p["canonical_solution"], True) for p in probs]
    bad = [(p, p["prompt"] + BROKEN[i % len(BROKEN)], False) for i, p in enumerate(probs)]
    return good + bad


def plain_harness(tmp: str) -> Callable[[dict, str], bool]:
    """Write program + check into a file, run `python file`; passed means exit status 0."""
    def run(problem: dict, code: str) -> bool:
        fd, path = tempfile.mkstemp(suffix=".py", dir=tmp)
        with os.fdopen(fd, "w") as f:
            f.write(f"{code}\n{problem['test']}\ncheck({problem['entry_point']})\n")
        try:
            res = subprocess.run([sys.executable, path], capture_output=True, timeout=10)
            return res.returncode == 0
        except subprocess.TimeoutExpired:
            return False
        finally:
            os.unlink(path)
    return run


def sandbox_harness(sb: sandbox.Sandbox) -> Callable[[dict, str], bool]:
    """run_tests with HumanEval's check(); passed means the out-of-band report says so."""
    def run(problem: dict, code: str) -> bool:
        suite = sandbox.TestSuite(check=problem["test"], entry_point=problem["entry_point"])
        return sandbox.run_tests(code, suite, sandbox=sb).all_passed
    return run


def measure(name: str, run: Callable[[dict, str], bool], progs: list, workers: int) -> dict:
    """Run every program once with `workers` threads; time it and count passes."""
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        passed = list(pool.map(lambda item: run(item[0], item[1]), progs))
    wall = time.perf_counter() - start
    good = sum(ok for ok, (_, _, canon) in zip(passed, progs) if canon)
    bad = sum(ok for ok, (_, _, canon) in zip(passed, progs) if not canon)
    return {"name": name, "wall": wall, "rate": len(progs) / wall, "good": good, "bad": bad}


def warm(sb: sandbox.Sandbox, workers: int) -> None:
    """Start every server/container before timing."""
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda _: sb.run("pass"), range(workers * 2)))


def docker_available() -> bool:
    try:
        import docker

        docker.from_env(timeout=60).ping()
        return True
    except Exception as exc:
        print(f"docker: no daemon reachable ({type(exc).__name__}: {exc}), skipped")
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-docker", action="store_true")
    ap.add_argument("--limit", type=int, default=None, help="only the first K problems")
    args = ap.parse_args()
    progs, n = programs(args.limit), args.workers
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(measure("plain subprocess.run([python, file])", plain_harness(tmp), progs, n))
    configs = [("local (sympy preloaded, default)", DEFAULT_PRELOAD),
               ("local (stdlib preloaded)", tuple(m for m in DEFAULT_PRELOAD if m != "sympy"))]
    for name, preload in configs:
        with LocalSandbox(workers=n, preload=preload) as sb:
            warm(sb, n)
            rows.append(measure(name, sandbox_harness(sb), progs, n))
    if not args.no_docker and docker_available():
        with sandbox.get_sandbox("docker", image=os.environ.get("AGENTRL_SANDBOX_IMAGE", "local"),
                                 workers=n) as sb:
            warm(sb, n)
            rows.append(measure("docker (warm containers, fork-server)", sandbox_harness(sb), progs, n))
    base = rows[0]["rate"]
    total = len(progs) // 2
    print(f"\n{len(progs)} executions ({total} canonical + {total} broken), {n} concurrent\n")
    print(f"| {'harness':40s} | exec/s | ratio vs plain | canonical passed | broken passed |")
    print(f"|{'-' * 42}|--------|----------------|------------------|---------------|")
    for r in rows:
        print(f"| {r['name']:40s} | {r['rate']:6.1f} | {r['rate'] / base:13.2f}x | "
              f"{r['good']:>10d}/{total:<5d} | {r['bad']:>7d}/{total:<5d} |")


if __name__ == "__main__":
    main()
