"""``agentrl serve-env``: OpenEnv's protocol over WebSocket and HTTP, sessions, security, limits.

Real servers (subprocesses on loopback), real WebSocket and HTTP clients. openenv-core's own client
and its validator are in ``test_openenv_client.py`` (slow: openenv-core takes seconds to import).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import httpx
import pytest
from servers import ROOT, SERVE_ENV, environ, free_port, serve_env
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from agentrl import make

TASK = {"id": "arith-12+30", "prompt": "Compute 12+30. Give the final answer as a number.", "answer": "42",
        "metadata": {}}


def ws(url: str, **kw):
    return connect(url.replace("http", "ws", 1) + "/ws", open_timeout=30, **kw)


def ask(conn, message: dict) -> dict:
    conn.send(json.dumps(message))
    return json.loads(conn.recv(timeout=60))


@pytest.fixture(scope="module")
def arithmetic():
    with serve_env("agentrl/Arithmetic-v0") as (url, _):
        yield url


def test_a_websocket_session_resets_steps_and_reports_state(arithmetic):
    with ws(arithmetic) as conn:
        r = ask(conn, {"type": "reset", "data": {"task": TASK}})
        assert r["type"] == "observation" and r["data"]["done"] is False and r["data"]["reward"] is None
        assert r["data"]["observation"]["text"] == TASK["prompt"]
        info = r["data"]["observation"]["info"]
        assert info["task_id"] == TASK["id"] and "answer" not in info and "task" not in info  # no gold answer
        r = ask(conn, {"type": "step", "data": {"text": "The answer is 42"}})
        assert r["data"]["reward"] == 1.0 and r["data"]["done"] is True
        assert r["data"]["observation"]["info"]["terminated"] is True
        assert ask(conn, {"type": "state"})["data"] == {"episode_id": info["episode_id"], "step_count": 1,
                                                        "task_id": TASK["id"], "done": True}
        after = ask(conn, {"type": "step", "data": {"text": "42"}})
        assert after["type"] == "error" and after["data"]["code"] == "SESSION_ERROR"
        # the same seed gives the same task as the env in this process
        r = ask(conn, {"type": "reset", "data": {"seed": 7}})
        assert r["data"]["observation"]["text"] == make("agentrl/Arithmetic-v0").reset(seed=7)[0]
        assert ask(conn, {"type": "step", "data": {"text": "0"}})["data"]["reward"] in (0.0, 1.0)


@pytest.mark.parametrize("message, code", [
    ("not json", "INVALID_JSON"),
    (json.dumps({"type": "dance"}), "UNKNOWN_TYPE"),
    (json.dumps({"type": "step", "data": {"message": "42"}}), "VALIDATION_ERROR"),
    (json.dumps({"type": "step", "data": {"text": "42", "extra": 1}}), "VALIDATION_ERROR"),
    (json.dumps({"type": "reset", "data": {"seed": -1}}), "VALIDATION_ERROR"),
    (json.dumps({"type": "reset", "data": {"task": {"prompt": "no id"}}}), "VALIDATION_ERROR"),
    (json.dumps({"type": "step", "data": {"text": "42"}}), "SESSION_ERROR"),  # before any reset
])
def test_bad_messages_get_an_error_and_the_session_goes_on(arithmetic, message, code):
    with ws(arithmetic) as conn:
        conn.send(message)
        r = json.loads(conn.recv(timeout=60))
        assert r["type"] == "error" and r["data"]["code"] == code, r
        assert ask(conn, {"type": "reset", "data": {"task": TASK}})["type"] == "observation"


def test_sessions_are_isolated_and_concurrent(arithmetic):
    tasks = [dict(TASK, id=f"arith-{a}+1", prompt=f"Compute {a}+1.", answer=str(a + 1)) for a in range(8)]
    results: dict[int, float] = {}

    def episode(k: int) -> None:
        with ws(arithmetic) as conn:
            ask(conn, {"type": "reset", "data": {"task": tasks[k]}})
            time.sleep(0.05)  # every session holds its episode at once
            results[k] = ask(conn, {"type": "step", "data": {"text": str(k + 1 if k % 2 else k)}})["data"]["reward"]

    threads = [threading.Thread(target=episode, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {k: float(k % 2) for k in range(8)}


def test_plain_http_episodes(arithmetic):
    r = httpx.post(arithmetic + "/reset", json={"task": TASK, "episode_id": "ep-1"}, timeout=30).json()
    assert r["observation"]["info"]["episode_id"] == "ep-1" and r["done"] is False
    assert httpx.get(arithmetic + "/state", params={"episode_id": "ep-1"}).json()["step_count"] == 0
    r = httpx.post(arithmetic + "/step", json={"action": {"text": "42"}, "episode_id": "ep-1"}, timeout=30).json()
    assert r["reward"] == 1.0 and r["done"] is True
    again = httpx.post(arithmetic + "/step", json={"action": {"text": "42"}, "episode_id": "ep-1"}, timeout=30)
    assert again.status_code == 404 and "unknown episode_id 'ep-1'" in again.json()["detail"]
    no_id = httpx.post(arithmetic + "/step", json={"action": {"text": "42"}}, timeout=30)
    assert no_id.status_code == 422 and "episode_id" in no_id.json()["detail"]
    fresh = httpx.post(arithmetic + "/reset", timeout=30).json()  # no body: a drawn task and a new id
    assert fresh["observation"]["text"] and len(fresh["observation"]["info"]["episode_id"]) == 32
    bad = httpx.post(arithmetic + "/step", json={"action": {"answer": "1"}, "episode_id": "x"}, timeout=30)
    assert bad.status_code in (404, 422)


def test_schema_metadata_and_mcp(arithmetic):
    schema = httpx.get(arithmetic + "/schema").json()
    assert schema["action"]["required"] == ["text"] and set(schema["action"]["properties"]) == {"text", "metadata"}
    assert {"text", "info", "reward", "done"} <= set(schema["observation"]["properties"])
    assert {"episode_id", "step_count"} <= set(schema["state"]["properties"])
    assert httpx.get(arithmetic + "/metadata").json()["name"] == "agentrl/Arithmetic-v0"
    rpc = httpx.post(arithmetic + "/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).json()
    assert rpc["jsonrpc"] == "2.0" and rpc["id"] == 3 and rpc["error"]["code"] == -32601
    paths = httpx.get(arithmetic + "/openapi.json").json()["paths"]
    assert {"/reset", "/step", "/state", "/schema", "/health", "/metadata"} <= set(paths)


def test_a_multi_turn_env_over_one_session():
    with serve_env("slow_envs:Guess") as (url, _), ws(url) as conn:
        ask(conn, {"type": "reset", "data": {"task": {"id": "guess-6", "prompt": "Guess my number (0-9).",
                                                       "answer": 6}}})
        replies = [ask(conn, {"type": "step", "data": {"text": g}})["data"] for g in ("3", "8", "6")]
        assert [r["observation"]["text"] for r in replies] == ["higher", "lower", ""]
        assert [r["done"] for r in replies] == [False, False, True] and replies[-1]["reward"] == 1.0


def test_token_body_limit_capacity_and_idle_timeout():
    with serve_env("agentrl/Arithmetic-v0", "--token", "s3cret", "--max-sessions", "2", "--idle-timeout", "4",
                   "--max-body-bytes", "2000") as (url, _):
        assert httpx.get(url + "/health").status_code == 200  # liveness needs no token
        assert httpx.post(url + "/reset", json={}).status_code == 401
        auth = {"Authorization": "Bearer s3cret"}
        assert httpx.post(url + "/reset", json={"episode_id": "a"}, headers=auth).status_code == 200
        big = httpx.post(url + "/reset", content=b'{"seed": 1, "x": "' + b"y" * 5000 + b'"}', headers=auth)
        assert big.status_code == 413
        with pytest.raises(Exception):  # noqa: B017 - refused at the handshake (close code 1008)
            with ws(url) as conn:
                ask(conn, {"type": "reset", "data": {}})
        with ws(url, additional_headers=auth) as conn:  # with the header, or ?token= for clients without one
            assert ask(conn, {"type": "reset", "data": {"seed": 1}})["type"] == "observation"
            with connect(url.replace("http", "ws", 1) + "/ws?token=s3cret", open_timeout=30) as second:
                assert ask(second, {"type": "reset", "data": {}})["type"] == "observation"  # HTTP episode a gave way
                with ws(url, additional_headers=auth) as third:  # two live sessions: at capacity
                    r = json.loads(third.recv(timeout=30))
                    assert r["type"] == "error" and r["data"]["code"] == "CAPACITY_REACHED"
            conn.send(json.dumps({"type": "step", "data": {"text": "y" * 5000}}))
            with pytest.raises(ConnectionClosed) as closed:  # over --max-body-bytes: closed with 1009
                conn.recv(timeout=30)
            assert closed.value.rcvd.code == 1009
        assert httpx.post(url + "/reset", json={"episode_id": "z"}, headers=auth).status_code == 200
        deadline = time.monotonic() + 30
        while httpx.get(url + "/health").json()["sessions"] and time.monotonic() < deadline:
            time.sleep(0.2)
        assert httpx.get(url + "/health").json()["sessions"] == 0  # the idle HTTP episode was reaped
        assert httpx.post(url + "/step", json={"action": {"text": "1"}, "episode_id": "z"}, headers=auth
                          ).status_code == 404
        with ws(url, additional_headers=auth) as conn:
            time.sleep(8)  # idle past the timeout: the server closes the session
            with pytest.raises(ConnectionClosed):
                ask(conn, {"type": "reset", "data": {}})


def test_abandoned_http_episodes_make_room_for_new_ones():
    with serve_env("agentrl/Arithmetic-v0", "--max-sessions", "2") as (url, _):
        for eid in ("a", "b", "c"):  # reset, never stepped: at capacity the oldest HTTP episode goes
            assert httpx.post(url + "/reset", json={"episode_id": eid, "task": TASK}).status_code == 200
        assert httpx.post(url + "/step", json={"action": {"text": "42"}, "episode_id": "a"}).status_code == 404
        assert httpx.post(url + "/step", json={"action": {"text": "42"}, "episode_id": "c"}).json()["reward"] == 1.0
        with ws(url) as one, ws(url) as two:  # WebSocket sessions are never evicted: the third is refused
            assert ask(one, {"type": "reset", "data": {}})["type"] == "observation"
            assert ask(two, {"type": "reset", "data": {}})["type"] == "observation"  # took b's place
            with ws(url) as three:
                assert json.loads(three.recv(timeout=30))["data"]["code"] == "CAPACITY_REACHED"


@pytest.mark.parametrize("args, message", [
    (["agentrl/NoSuchEnv-v0"], "unknown environment 'agentrl/NoSuchEnv-v0'"),
    (["agentrl/Arithmetic-v0", "--kwargs", "[1]"], "--kwargs must be a JSON object"),
    (["agentrl/Arithmetic-v0", "--kwargs", '{"digits": 0}'], "digits >= 1"),
    (["agentrl/Arithmetic-v0", "--max-sessions", "0"], "--max-sessions must be at least 1"),
])
def test_bad_arguments_exit_with_one_line(args, message):
    out = subprocess.run([sys.executable, "-c", SERVE_ENV, *args, "--port", "0"], cwd=ROOT, env=environ(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_busy_port_is_refused_in_one_line():
    port = free_port()
    with serve_env("agentrl/Arithmetic-v0") as (url, _):
        port = int(url.rsplit(":", 1)[1])
        out = subprocess.run([sys.executable, "-m", "agentrl.cli", "serve-env", "agentrl/Arithmetic-v0", "--port",
                              str(port)], cwd=ROOT, env=environ(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_the_server_s_shutdown_ends_the_workspaces_of_its_env():
    """A served Harbor env's copies share the template's recycled runtimes and grader pool: the app's shutdown
    closes the template it built, so that nothing is left for an atexit hook that a SIGTERM skips (uvicorn
    re-raises it; CI saw a cgroup outlive `agentrl serve-env`). In this process, so that a runtime the shutdown
    did not end is still alive when it is checked."""
    import os

    import uvicorn

    from agentrl.serving.env_server import EnvServerConfig, create_app
    from rewards.server import listen_socket
    from sandbox.workspace.leftovers import leftovers

    local = make("harbor:examples/tasks")
    sock = listen_socket("127.0.0.1", 0, "test")
    port = sock.getsockname()[1]
    app = create_app(EnvServerConfig("harbor:examples/tasks", {}, host="127.0.0.1", port=port))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", ws_ping_interval=None))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        with ws(f"http://127.0.0.1:{port}") as conn:
            text, info = local.reset(seed=5)
            assert ask(conn, {"type": "reset", "data": {"seed": 5}})["data"]["observation"]["text"] == text
            reply = ask(conn, {"type": "step", "data": {"text": local.reference_answer(info["task"])}})["data"]
            assert reply["reward"] == 1.0 and reply["done"] is True
        assert leftovers(os.getpid())["cgroups"]  # the env's runtimes wait, parked, for the next episode
    finally:
        server.should_exit = True
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert not any(leftovers(os.getpid()).values())
