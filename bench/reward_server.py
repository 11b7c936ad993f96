"""Reward server throughput and latency on loopback: scored items/s, p50/p99 per request.

    python bench/reward_server.py [--batch 32] [--seconds 5] [--workers 2] [--concurrency 1 8 64]

Starts ``python -m rewards.server`` on a free 127.0.0.1 port, then for each concurrency level runs
that many client loops (asyncio with a minimal keep-alive HTTP/1.1 client, one process: httpx
would cost more CPU than the server on a 2-core machine) posting batches of numeric math items to
``POST /score`` for ``--seconds``. Items are model-style GSM8K responses ("... The answer is N.")
with a unique prefix per item, so the server cannot answer from a cache; about 1 in 4 is wrong.
Request bodies are encoded before the clock starts. Latency is per request (one batch). The last
column is the CPU time the server's process tree spent per item (from ``/proc``): on a busy shared
machine the wall-clock numbers fall, and 2 cores / that figure is the capacity of an idle one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
# `python -c` rather than `-m rewards.server`: spawned scoring workers then need not re-import the
# server module (FastAPI, uvicorn) as their __main__.
SERVE = "import sys; from rewards.server import cli_main; sys.exit(cli_main(sys.argv[1:]))"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(workers: int) -> tuple[subprocess.Popen, str]:
    """The server as a subprocess on a free loopback port, once /healthz answers."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", SERVE, "--port", str(port), "--workers", str(workers)],
                            cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start")


def tree_cpu_seconds(pid: int) -> float:
    """User+system CPU seconds of ``pid`` and all its descendants (Linux ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, stack = 0.0, [pid]
    while stack:
        p = stack.pop()
        try:
            fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            children = [c for t in os.listdir(f"/proc/{p}/task") for c in open(f"/proc/{p}/task/{t}/children").read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
        stack.extend(int(c) for c in children)
    return total


def calibration_cpu_s() -> float:
    """CPU seconds for a fixed pure-Python loop (5M additions; ~0.25-0.3 s on an idle core).

    On a shared machine CPU time itself inflates (contended caches, SMT siblings); dividing by this
    figure's idle value scales the per-item CPU numbers back to an idle machine.
    """
    start, total = time.process_time(), 0
    for i in range(5_000_000):
        total += i
    return time.process_time() - start


def make_bodies(n_requests: int, batch: int) -> tuple[list[bytes], list[list[float]]]:
    """Encoded ``/score`` bodies and the expected score of each item."""
    rows = [json.loads(line) for line in open(ROOT / "environments" / "data" / "gsm8k_test.jsonl")]
    base = []
    for r in rows:
        body, gold = r["answer"].split("####")
        base.append((re.sub(r"<<[^>]*>>", "", body).strip(), gold.strip()))
    bodies, expected, k = [], [], 0
    for _ in range(n_requests):
        items, exp = [], []
        for _ in range(batch):
            text, gold = base[k % len(base)]
            wrong = k % 4 == 3
            answer = f"{gold}1" if wrong else gold
            items.append({"response": f"Attempt {k}. {text}\nThe answer is {answer}.", "label": gold})
            exp.append(0.0 if wrong else 1.0)
            k += 1
        bodies.append(json.dumps({"reward": "math", "items": items}).encode())
        expected.append(exp)
    return bodies, expected


class _Conn:
    """A minimal keep-alive HTTP/1.1 client (the load generator must cost far less than the server)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body)
        assert self.reader is not None
        header = await self.reader.readuntil(b"\r\n\r\n")
        status = int(header.split(b" ", 2)[1])
        length = int(re.search(rb"(?i)content-length: *(\d+)", header).group(1))
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def load(url: str, bodies: list[bytes], expected: list[list[float]], concurrency: int,
               seconds: float) -> dict[str, float]:
    """Run ``concurrency`` client loops for ``seconds``; return items/s and latency percentiles."""
    host, port = url.split("//")[1].split(":")
    latencies: list[float] = []
    items = errors = next_body = 0
    deadline = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal items, errors, next_body
        conn = _Conn(host, int(port))
        while time.perf_counter() < deadline:
            i = next_body % len(bodies)
            next_body += 1
            t0 = time.perf_counter()
            status, raw = await conn.post("/score", bodies[i])
            latencies.append(time.perf_counter() - t0)
            scores = [r["score"] for r in json.loads(raw)["results"]] if status == 200 else []
            items += len(scores)
            errors += sum(s != e for s, e in zip(scores, expected[i])) + (status != 200)
        conn.close()

    start = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    latencies.sort()

    def pct(p: float) -> float:
        return 1000 * latencies[min(len(latencies) - 1, int(p * len(latencies)))]

    return {"items_per_s": items / elapsed, "requests": len(latencies), "p50_ms": pct(0.50),
            "p99_ms": pct(0.99), "wrong_scores": errors}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=32, help="items per request")
    ap.add_argument("--seconds", type=float, default=5.0, help="duration per concurrency level")
    ap.add_argument("--workers", type=int, default=2, help="server scoring processes")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--url", default=None, help="use a running server instead of starting one")
    args = ap.parse_args(argv)
    proc, url = (None, args.url) if args.url else start_server(args.workers)
    try:
        bodies, expected = make_bodies(4000, args.batch)
        asyncio.run(load(url, bodies[:20], expected[:20], 4, 1.0))  # warm-up
        print(f"batch={args.batch} items/request, workers={args.workers}, {args.seconds:.0f}s per level")
        print(f"load average before: {os.getloadavg()[0]:.1f} (on {os.cpu_count()} CPUs); "
              f"calibration loop: {calibration_cpu_s():.2f} CPU s (idle core: ~0.25-0.3)")
        print("| concurrency | items/s | requests | p50 ms | p99 ms | wrong scores | server CPU us/item |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        for c in args.concurrency:
            cpu0 = tree_cpu_seconds(proc.pid) if proc is not None else 0.0
            r = asyncio.run(load(url, bodies, expected, c, args.seconds))
            cpu = (tree_cpu_seconds(proc.pid) - cpu0) if proc is not None else float("nan")
            per_item = 1e6 * cpu / max(1.0, r["items_per_s"] * args.seconds)
            print(f"| {c} | {r['items_per_s']:,.0f} | {r['requests']} | {r['p50_ms']:.1f} | "
                  f"{r['p99_ms']:.1f} | {r['wrong_scores']} | {per_item:.0f} |", flush=True)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(10)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
