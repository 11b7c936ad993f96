"""``make bench``: run every benchmark in ``bench/`` (short settings) and print one table.

    python bench/run_all.py [--only train_step rollout ...] [--full] [--verbose]

Each bench runs in its own process (one at a time: the machine has few cores) with the quick
arguments below, or its defaults with ``--full``; a bench this file does not know runs with no
arguments. Every markdown table a bench prints becomes rows of the combined table: the bench, the
row's first cell, and the rest as ``header: value`` pairs. A bench that fails shows its exit status
and last line. ``--verbose`` also prints each bench's own output.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["train_step", "rollout", "env", "verifier", "reward_server", "server_latency", "sandbox", "samples"]
QUICK = {
    "train_step": ["--steps", "5", "--warmup", "1", "--threads", "1"],
    "rollout": ["--reps", "5", "--threads", "1"],
    "env": ["--seconds", "1.5"],
    "verifier": ["--limit", "200"],
    "reward_server": ["--seconds", "3", "--concurrency", "1", "8"],
    "server_latency": ["--seconds", "3"],
    "sandbox": ["--limit", "40"],
    "samples": ["--steps", "3"],
    "long_episodes": ["cost", "--episodes", "8"],
    "agent_step": ["--steps", "1", "--warmup", "0", "model.warm_start.enabled=false", "data.prompts_per_step=4"],
    "recycle": ["--episodes", "10", "--rounds", "1"],
    "shared_prefix": ["--system", "85", "--rounds", "2"],
    "warm_start": ["--steps", "3", "--warmup", "1", "--rounds", "1"],
    "fit_tasks": ["--tasks", "2", "--steps", "2", "--blocks", "2", "model.warm_start.enabled=false"],
    "reference_logprob": ["--tasks", "8", "model.warm_start.enabled=false"],
    "agentic_trl": ["--prompts", "2", "--group", "4", "--steps", "2", "--warmup", "1", "--cold"],
}
ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
       "VLLM_HOST_IP": "127.0.0.1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "all",
       "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_AUTH_MODE": "disabled", "DS_ACCELERATOR": "cpu"}


def benches(only: list[str] | None) -> list[str]:
    """Bench names (files in bench/ other than this one), known ones first."""
    found = sorted(p.stem for p in HERE.glob("*.py") if p.stem != "run_all" and not p.stem.startswith("_"))
    names = [n for n in ORDER if n in found] + [n for n in found if n not in ORDER]
    return [n for n in names if not only or n in only]


def tables(text: str) -> list[list[list[str]]]:
    """The markdown tables in ``text``: lists of rows of cells (the separator row dropped)."""
    out: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in text.splitlines() + [""]:
        s = line.strip()
        if s.startswith("|") and s.endswith("|") and s.count("|") >= 3:
            cells = [c.strip() for c in s.strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                current.append(cells)
        elif current:
            out.append(current)
            current = []
    return out


def rows_of(name: str, text: str) -> list[tuple[str, str, str]]:
    """(bench, case, result) rows from every table of one bench's output."""
    rows = []
    for table in tables(text):
        header, body = table[0], table[1:]
        for r in body:
            pairs = [f"{h}: {v}" for h, v in zip(header[1:], r[1:]) if v]
            rows.append((name, r[0], "; ".join(pairs)))
    return rows


def run(name: str, full: bool, timeout: float) -> tuple[int, str, float]:
    args = [] if full else QUICK.get(name, [])
    start = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, str(HERE / f"{name}.py"), *args], capture_output=True, text=True,
                           timeout=timeout, env={**ENV, **os.environ}, cwd=HERE.parent)
        return p.returncode, p.stdout + ("" if p.returncode == 0 else "\n" + p.stderr), time.perf_counter() - start
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return 124, out + f"\ntimed out after {timeout:.0f} s", time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", help="bench names (file stems) to run")
    ap.add_argument("--full", action="store_true", help="each bench's default (longer) settings")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per bench")
    ap.add_argument("--verbose", action="store_true", help="also print each bench's own output")
    args = ap.parse_args(argv)
    combined: list[tuple[str, str, str]] = []
    failed = 0
    for name in benches(args.only):
        print(f"running bench/{name}.py ...", file=sys.stderr, flush=True)
        code, out, secs = run(name, args.full, args.timeout)
        if args.verbose:
            print(f"\n### bench/{name}.py ({secs:.0f} s, exit {code})\n{out}", flush=True)
        found = rows_of(name, out)
        if code != 0:
            failed += 1
            last = next((ln for ln in reversed(out.strip().splitlines()) if ln.strip()), "")
            found.append((name, f"FAILED (exit {code})", last[:160]))
        combined += found or [(name, "(no table)", f"{secs:.0f} s")]
    print("| bench | case | result |")
    print("|---|---|---|")
    for bench, case, result in combined:
        print(f"| {bench} | {case} | {result} |")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
