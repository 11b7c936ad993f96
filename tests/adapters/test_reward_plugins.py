"""`agentrl serve-reward --plugin FILE.py:FUNCTION` with OpenRLHF and verl reward files, unchanged: a real
server process on 127.0.0.1, the function registered under its own name."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.adapters.conftest import FILES, ROOT


@pytest.fixture(scope="module")
def server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "agentrl.cli", "serve-reward", "--port", str(port), "--workers", "1",
                             "--plugin", f"{FILES / 'math_reward_func.py'}:reward_func",
                             "--plugin", f"{FILES / 'compute_score.py'}:compute_score"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.mark.slow
def test_openrlhf_reward_func_plugin_by_its_name(server):
    listed = httpx.get(server + "/rewards").json()["rewards"]
    assert "reward_func" in listed and "compute_score" in listed
    body = {"query": ["2+2=4", "2+2=5"], "prompts": ["2+2=", "2+2="], "labels": ["4", "4"]}
    out = httpx.post(server + "/get_reward", params={"reward": "reward_func"}, json=body, timeout=30).json()
    assert out["rewards"] == pytest.approx([1.0, 0.1]) and out["scores"] == pytest.approx([1.0, 0.1])
    assert out["extra_logs"]["exact"] == pytest.approx([1.0, 0.1])


@pytest.mark.slow
def test_verl_compute_score_plugin(server):
    body = {"query": ["1+1=2", "1+1=three"], "prompts": ["1+1=", "1+1="], "labels": ["2", "2"]}
    out = httpx.post(server + "/get_reward", params={"reward": "compute_score"}, json=body, timeout=30).json()
    assert out["rewards"] == [1.0, 0.2] and out["extra_logs"]["length"] == [1.0, 5.0]
