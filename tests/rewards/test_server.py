"""The reward server over loopback: a real uvicorn process, its protocols, limits and failures."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agentrl.types import Task
from rewards import get_reward
from rewards.client import RemoteReward, RemoteRewardError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SERVE = "import sys; from rewards.server import cli_main; sys.exit(cli_main(sys.argv[1:]))"
TOKEN = "s3cret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(*args: str) -> tuple[subprocess.Popen, str]:
    """Start ``python -m rewards.server`` on a free loopback port; wait for /healthz."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}"}
    env.pop("AGENTRL_REWARD_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-c", SERVE, "--port", str(port), *args],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start")


@pytest.fixture(scope="module")
def server():
    proc, url = start_server(
        "--token", TOKEN, "--workers", "2", "--max-body-bytes", "200000", "--item-timeout", "3",
        "--plugin", "rewards_test_plugins:hang", "--plugin", "rewards_test_plugins:crash",
        "--plugin", "rewards_test_plugins:busy_c_hang", "--plugin", "rewards_test_plugins:length_reward")
    yield url
    proc.terminate()
    proc.wait(10)


def post(url: str, **kw) -> httpx.Response:
    return httpx.post(url, timeout=kw.pop("timeout", 120), **kw)


def get(url: str, **kw) -> httpx.Response:
    return httpx.get(url, timeout=120, **kw)


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_healthz_and_listing(server):
    assert get(server + "/healthz").json()["status"] == "ok"
    names = get(server + "/rewards", headers=auth()).json()["rewards"]
    assert {"math", "code", "format", "hang", "length_reward"} <= set(names)
    assert "/score" in get(server + "/openapi.json").json()["paths"]
    assert get(server + "/docs").status_code == 200


def test_openrlhf_protocol_exact_json(server):
    body = {"query": ["<|user|>What is 6*7?<|assistant|>6*7 = \\boxed{42}",
                      "<|user|>What is 2+2?<|assistant|>The answer is 5.",
                      "<|user|>Half of 3?<|assistant|>It is 1.5"],
            "prompts": ["<|user|>What is 6*7?<|assistant|>", "<|user|>What is 2+2?<|assistant|>",
                        "<|user|>Half of 3?<|assistant|>"],
            "labels": ["42", "4", "\\frac{3}{2}"]}
    resp = post(server + "/get_reward", json=body, headers=auth())
    assert resp.status_code == 200
    out = resp.json()
    assert out["rewards"] == [1.0, 0.0, 1.0] and out["scores"] == [1.0, 0.0, 1.0]
    assert out["extra_logs"]["correct"] == [1.0, 0.0, 1.0] and out["extra_logs"]["error"] == [0.0] * 3


def test_status_codes(server):
    ok = {"items": [{"response": "5", "label": "5"}]}
    assert post(server + "/score", json=ok).status_code == 401
    assert post(server + "/score", json=ok, headers=auth("wrong")).status_code == 401
    assert post(server + "/score", json=ok, headers=auth()).status_code == 200
    assert post(server + "/score", json={"items": 5}, headers=auth()).status_code == 422
    assert post(server + "/score", content=b"{not json", headers={**auth(), "content-type": "application/json"}
                      ).status_code == 422
    assert post(server + "/get_reward", json={"query": ["a"], "labels": [1, 2]}, headers=auth()).status_code == 422
    big = {"items": [{"response": "x" * 1000, "label": "1"}] * 300}
    assert post(server + "/score", json=big, headers=auth()).status_code == 413

    def chunks():
        yield b'{"items": ['
        for _ in range(300):
            yield b'{"response": "' + b"x" * 1000 + b'", "label": "1"},'
        yield b'{"response": "1", "label": "1"}]}'
    streamed = post(server + "/score", content=chunks(), headers={**auth(), "content-type": "application/json"})
    assert streamed.status_code == 413


def test_bad_items_get_errors_not_500(server):
    items = [{"response": "ok", "reward": "crash"}, {"response": "raise", "reward": "crash"},
             {"response": "hang", "reward": "hang"}, {"response": "exit", "reward": "crash"},
             {"response": "hang", "reward": "busy_c_hang"}, {"response": "\\boxed{3}", "label": "3"},
             {"response": "1", "label": "1", "reward": "no-such-reward"},
             {"response": ".", "reward": "os.path:exists"}]  # never import what a request names
    t0 = time.monotonic()
    resp = post(server + "/score", json={"items": items}, headers=auth(), timeout=60)
    assert resp.status_code == 200
    res = resp.json()["results"]
    assert res[0] == {"score": 1.0, "components": {}, "info": {}, "error": None}
    assert "boom" in res[1]["error"]
    assert res[2]["error"].startswith("timeout")
    assert "crashed" in res[3]["error"]
    assert res[4]["error"].startswith("timeout")
    assert res[5]["score"] == 1.0 and res[5]["error"] is None
    assert "unknown reward" in res[6]["error"] and "math" in res[6]["error"]
    assert "unknown reward" in res[7]["error"]
    assert time.monotonic() - t0 < 60  # two worker restarts (seconds each on a loaded machine)
    # the server is still fine afterwards
    again = post(server + "/score", json={"items": [{"response": "7", "label": "7"}]}, headers=auth())
    assert again.json()["results"][0]["score"] == 1.0


def test_in_process_and_http_identical(server, math500):
    rows = math500[:24]
    responses = [r["solution"] for r in rows] + [f"I think it is {i}" for i in range(24)]
    tasks = [Task(r["unique_id"], r["problem"], r["answer"]) for r in rows] * 2
    local = [get_reward("math")(resp, t) for resp, t in zip(responses, tasks)]
    with RemoteReward(server, token=TOKEN, batch_size=16) as remote:
        over_http = remote.score_batch(responses, tasks, "math")
        assert remote(responses[0], tasks[0]) == local[0]
    assert over_http == local
    fmt_local = [get_reward("math_with_format")(r, t) for r, t in zip(responses, tasks)]
    with RemoteReward(server, reward="math_with_format", token=TOKEN) as remote:
        assert remote.score_batch(responses, tasks) == fmt_local


def test_client_errors_and_retries(server):
    with RemoteReward(server, token="wrong", retries=0) as bad:
        with pytest.raises(RemoteRewardError, match="401"):
            bad.score_batch(["1"], [Task("t", "", "1")])
    with RemoteReward(server, token=TOKEN, reward="crash") as remote:
        out = remote.score_batch(["raise", "fine"], [Task("a", ""), Task("b", "")])
        assert out[0].score == 0.0 and "boom" in out[0].info["error"] and out[1].score == 1.0
    with RemoteReward(server, token=TOKEN, reward="crash", on_item_error="raise") as strict:
        with pytest.raises(RemoteRewardError, match="boom"):
            strict.score_batch(["raise"], [Task("a", "")])
    dead = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with RemoteReward(dead, retries=2, backoff_s=0.05) as remote:
        with pytest.raises(RemoteRewardError, match="3 attempts"):
            remote(" 1", Task("t", "", "1"))
    assert time.monotonic() - t0 < 5


def test_cli_main_parser_defaults():
    from rewards.server import build_parser

    args = build_parser().parse_args([])
    assert args.host == "127.0.0.1" and args.token is None and args.workers == 2
