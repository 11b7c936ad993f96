"""Latency and throughput of the env server and the reward server under concurrent clients, on loopback.

    python bench/server_latency.py [--seconds 10] [--concurrency 8 64] [--env-threads 8]
                                   [--only env-http env-ws reward]

- ``env-http``: ``agentrl serve-env agentrl/Arithmetic-v0``; wrk with one connection per thread, each
  looping over HTTP episodes (``POST /reset`` with its own ``episode_id``, then ``POST /step``);
  a request counts as lost unless it answers 200 (and a step ``"done":true``). Resets carry no seed
  (the env draws the task; with a seed gymnasium's seeding adds ~0.2 ms of the env's own per reset).
- ``env-ws``: the same server over WebSocket sessions (what ``env.remote`` and OpenEnv's client use):
  C sessions spread over 4 client processes (asyncio), each looping reset -> step; per-message latency.
- ``reward``: ``agentrl serve-reward`` (2 scoring workers); wrk posting ``POST /score`` with 1 cheap
  math item (``\\boxed{n}`` against ``n``) per request; lost unless 200 with the item scored 1.0.

Each row gives requests/s, p50 and p99 in ms, and lost requests. The machine is shared: the load
average is printed before and after every row (``os.getloadavg``), and the servers and clients share
its cores, so these are the figures of the whole loopback system.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
SERVE_ENV = "import sys; from agentrl.serving.env_server import cli_main; sys.exit(cli_main(sys.argv[1:]))"
SERVE_REWARD = "import sys; from rewards.server import cli_main; sys.exit(cli_main(sys.argv[1:]))"

ENV_LUA = r"""
local counter, threads = 0, {}
function setup(thread) thread:set("tid", counter); counter = counter + 1; table.insert(threads, thread) end
function init(args) n, phase, bad, done, id = 0, "reset", 0, 0, "" end
function request()
  if phase == "reset" then
    n = n + 1
    id = string.format("w%d-%d", tid, n)
    return wrk.format("POST", "/reset", {["Content-Type"] = "application/json"},
                      string.format('{"episode_id": "%s"}', id))
  end
  return wrk.format("POST", "/step", {["Content-Type"] = "application/json"},
                    string.format('{"action": {"text": "42"}, "episode_id": "%s"}', id))
end
function response(status, headers, body)
  if status ~= 200 then bad = bad + 1 end
  if phase == "reset" then phase = "step" else
    if string.find(body, '"done":true', 1, true) then done = done + 1 else bad = bad + 1 end
    phase = "reset"
  end
end
function done(summary, latency, requests)
  local b, d = 0, 0
  for _, t in ipairs(threads) do b = b + t:get("bad"); d = d + t:get("done") end
  io.write(string.format("COUNTS requests=%d bad=%d episodes=%d\n", summary.requests, b, d))
end
"""

REWARD_LUA = r"""
local counter, threads = 0, {}
function setup(thread) thread:set("tid", counter); counter = counter + 1; table.insert(threads, thread) end
function init(args) n, bad = 0, 0 end
function request()
  n = n + 1
  local v = tid * 100000000 + n
  return wrk.format("POST", "/score", {["Content-Type"] = "application/json"},
                    string.format('{"reward": "math", "items": [{"response": "so \\\\boxed{%d}", "label": "%d"}]}', v, v))
end
function response(status, headers, body)
  if status ~= 200 or not string.find(body, '"score":%s*1%.0') then bad = bad + 1 end
end
function done(summary, latency, requests)
  local b = 0
  for _, t in ipairs(threads) do b = b + t:get("bad") end
  io.write(string.format("COUNTS requests=%d bad=%d episodes=0\n", summary.requests, b))
end
"""


def tree_cpu_seconds(pid: int) -> float:
    """User+system CPU seconds of ``pid`` and its descendants (Linux ``/proc``)."""
    tick, total, stack = os.sysconf("SC_CLK_TCK"), 0.0, [pid]
    while stack:
        p = stack.pop()
        try:
            fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            stack += [int(c) for t in os.listdir(f"/proc/{p}/task")
                      for c in open(f"/proc/{p}/task/{t}/children").read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(code: str, *args: str, root: Path = ROOT) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", code, *args, "--port", str(port)], cwd=root, env=env,
                            stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            for path in ("/health", "/healthz"):
                if httpx.get(url + path, timeout=1).status_code == 200:
                    return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start")


def run_wrk(url: str, lua: str, concurrency: int, seconds: float) -> dict[str, float]:
    """wrk with one connection per thread (each connection's requests strictly in turn)."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(lua)
    out = subprocess.run(["wrk", f"-t{concurrency}", f"-c{concurrency}", f"-d{seconds:g}s", "--timeout", "30s",
                          "--latency", "-s", f.name, url], capture_output=True, text=True, timeout=seconds + 120).stdout
    os.unlink(f.name)
    counts = re.search(r"COUNTS requests=(\d+) bad=(\d+)", out)

    def ms(label: str) -> float:
        m = re.search(rf"{label}%\s+([\d.]+)(us|ms|s)\b", out)
        if not m:
            return float("nan")
        return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]

    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    lost = int(counts.group(2)) + (sum(map(int, errors.groups())) if errors else 0)
    return {"rps": float(rate.group(1)), "p50": ms("50"), "p99": ms("99"), "lost": lost,
            "requests": int(counts.group(1))}


def _ws_client(url: str, sessions: int, seconds: float, start_at: float, out: mp.Queue) -> None:
    from websockets.asyncio.client import connect

    async def session(k: int) -> tuple[list[float], int]:
        lat, bad = [], 0
        async with connect(url.replace("http", "ws", 1) + "/ws", max_size=None, compression=None) as ws:
            n = 0
            while time.time() < start_at:
                await asyncio.sleep(0.01)
            while time.time() < start_at + seconds:
                n += 1
                for msg in ({"type": "reset", "data": {}},
                            {"type": "step", "data": {"text": "42"}}):
                    t0 = time.perf_counter()
                    await ws.send(json.dumps(msg))
                    reply = json.loads(await ws.recv())
                    lat.append(time.perf_counter() - t0)
                    bad += reply.get("type") != "observation" or (msg["type"] == "step" and not reply["data"]["done"])
        return lat, bad

    async def main() -> None:
        results = await asyncio.gather(*(session(k) for k in range(sessions)))
        out.put(([x for lat, _ in results for x in lat], sum(b for _, b in results)))

    asyncio.run(main())


def run_ws(url: str, concurrency: int, seconds: float, processes: int = 4) -> dict[str, float]:
    """``concurrency`` WebSocket sessions over ``processes`` client processes."""
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    start_at = time.time() + 8  # every client connected before the clock starts
    shares = [concurrency // processes + (i < concurrency % processes) for i in range(processes)]
    procs = [ctx.Process(target=_ws_client, args=(url, s, seconds, start_at, out)) for s in shares if s]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 300) for _ in procs]
    for p in procs:
        p.join(30)
    lat = sorted(x for r, _ in results for x in r)
    pct = lambda q: 1000 * lat[min(len(lat) - 1, int(q * len(lat)))]  # noqa: E731
    return {"rps": len(lat) / seconds, "p50": pct(0.50), "p99": pct(0.99), "lost": sum(b for _, b in results),
            "requests": len(lat)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[8, 64])
    ap.add_argument("--env-threads", type=int, default=8, help="serve-env --threads")
    ap.add_argument("--reward-workers", type=int, default=2)
    ap.add_argument("--only", nargs="+", default=["env-http", "env-ws", "reward"])
    ap.add_argument("--reward-root", type=Path, default=ROOT,
                    help="checkout whose reward server runs (another one measures before/after)")
    args = ap.parse_args(argv)
    if shutil.which("wrk") is None and {"env-http", "reward"} & set(args.only):
        print("wrk is not installed (apt-get install -y wrk)", file=sys.stderr)
        return 2
    print(f"{args.seconds:g} s per row; {os.cpu_count()} CPUs shared by the server, its workers and the clients")
    print("| server | transport | clients | requests/s | p50 ms | p99 ms | lost | server CPU us/request | "
          "load before / after |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    procs = []
    try:
        if {"env-http", "env-ws"} & set(args.only):
            env_proc, env_url = start(SERVE_ENV, "agentrl/Arithmetic-v0", "--threads", str(args.env_threads),
                                      "--max-sessions", "1024")
            procs.append(env_proc)
        if "reward" in args.only:
            rw_proc, rw_url = start(SERVE_REWARD, "--workers", str(args.reward_workers), root=args.reward_root)
            procs.append(rw_proc)
            httpx.post(rw_url + "/score", json={"items": [{"response": "\\boxed{1}", "label": "1"}] * 16}, timeout=120)
        for c in args.concurrency:
            for what in args.only:
                load = os.getloadavg()[0]
                server = env_proc if what.startswith("env") else rw_proc
                cpu0 = tree_cpu_seconds(server.pid)
                if what == "env-http":
                    r = run_wrk(env_url, ENV_LUA, c, args.seconds)
                    name = ("env (serve-env Arithmetic-v0)", "HTTP /reset + /step (wrk)")
                elif what == "env-ws":
                    r = run_ws(env_url, c, args.seconds)
                    name = ("env (serve-env Arithmetic-v0)", "WebSocket sessions (4 client processes)")
                else:
                    r = run_wrk(rw_url, REWARD_LUA, c, args.seconds)
                    name = (f"reward (serve-reward, {args.reward_workers} workers"
                            + ("" if args.reward_root == ROOT else f", {args.reward_root}") + ")", "HTTP /score, 1 item (wrk)")
                cpu = 1e6 * (tree_cpu_seconds(server.pid) - cpu0) / max(1, r["requests"])
                print(f"| {name[0]} | {name[1]} | {c} | {r['rps']:,.0f} | {r['p50']:.1f} | {r['p99']:.1f} | "
                      f"{r['lost']} of {r['requests']:,} | {cpu:.0f} | {load:.1f} / {os.getloadavg()[0]:.1f} |",
                      flush=True)
    finally:
        for p in procs:
            p.terminate()
            p.wait(15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
