"""``agentrl view`` as a server and an exported file: the JSON API on a real uvicorn on 127.0.0.1, a
run followed while it grows and when it is rewritten, the warm-start curve, the token, the Host check,
one-line errors for a busy port and a directory without a run, and an export that needs no network.
(The page itself, in Chromium: test_view_browser.py.)"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from viewkit import tokenizer, two_turn, viewer, write_run, write_warm_start

from agentrl.cli import main
from agentrl.runs.episodes import append_records, episode_record


@pytest.fixture(scope="module")
def tok() -> Any:
    return tokenizer()


def wait_for(fn: Any, timeout_s: float = 30.0) -> Any:
    """``fn()`` once it is truthy (bounded: generous under load, never a fixed sleep)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_api_serves_a_run_and_follows_it_live(tmp_path: Path, tok: Any) -> None:
    run = write_run(tmp_path / "run", tok)
    with viewer(str(run)) as v, httpx.Client(base_url=v.url, timeout=30) as http:
        page = http.get("/")
        assert page.status_code == 200 and '<script src="static/app.js"></script>' in page.text
        assert http.get("/static/app.js").status_code == 200 and http.get("/static/secret.py").status_code == 404
        [summary] = http.get("/api/runs").json()
        assert (summary["name"], summary["metrics"], summary["episodes"], summary["evals"]) == ("run", 3, 6, 1)
        assert summary["config"] == {"env.id": "agentrl/CalculatorMath-v0", "algo.estimator": "group_norm"}
        rows = http.get("/api/runs/0/metrics").json()["rows"]
        assert [r["kl"] for r in rows] == [0.01, None, 0.01]  # NaN in metrics.jsonl: null in JSON
        episodes = http.get("/api/runs/0/episodes").json()["episodes"]
        assert [(e["step"], e["failed"], e["tool_calls"], e["turns"]) for e in episodes[:2]] == [
            (1, False, 1, 2), (1, True, 1, 2)]
        record = http.get("/api/runs/0/episodes/1").json()
        assert record["failed"] and [s["role"] for s in record["segments"]] == ["prompt", "action", "feedback",
                                                                                "action"]
        [ev] = http.get("/api/runs/0/evals").json()
        assert ev["name"] == "eval" and ev["report"]["overall"]["pass@1"] == 1.0 and len(ev["episodes"]) == 1
        assert http.get("/api/runs/0/evals/0/episodes/0").json()["split"] == "eval"
        assert http.get("/api/runs/1/metrics").status_code == 404
        assert http.get("/api/runs/0/episodes/99").status_code == 404
        assert http.get("/api/runs/0/episodes/-1").status_code == 404
        assert http.get("/api/runs", headers={"Host": "attacker.example:80"}).status_code == 421

        # the run goes on: a new step and episode appear on the next poll; a half-written line waits
        with open(run / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": 4, "reward/mean": 0.4}) + "\n" + '{"step": 5, "rew')
        append_records(run / "samples.jsonl", [episode_record(two_turn(tok), tok, step=4)])
        poll = http.get("/api/poll").json()["runs"][0]
        assert (poll["metrics"], poll["episodes"], poll["generation"]) == (4, 7, 0)
        assert http.get("/api/runs/0/metrics", params={"since": 3}).json()["rows"] == [{"step": 4, "reward/mean": 0.4}]
        # a resumed run rewrites metrics.jsonl (atomically): the viewer starts it over
        tmp = run / ".metrics.tmp"
        tmp.write_text(json.dumps({"step": 1, "reward/mean": 0.1}) + "\n")
        os.replace(tmp, run / "metrics.jsonl")
        poll = http.get("/api/poll").json()["runs"][0]
        assert (poll["metrics"], poll["generation"]) == (1, 1)


def test_the_warm_start_curve_is_served_and_followed(tmp_path: Path, tok: Any) -> None:
    """Issue 46, finding 8: the warm start's curve (warm_start.jsonl) through the API; a run without one (an
    old run) has no rows; a curve written while the server runs is seen on the next poll; the export has it."""
    warm = write_warm_start(write_run(tmp_path / "warm", tok))
    old = write_run(tmp_path / "old", tok)
    with viewer(str(warm), str(old)) as v, httpx.Client(base_url=v.url, timeout=30) as http:
        got = http.get("/api/runs/0/warm_start").json()
        assert got["error"] is None and [r["step"] for r in got["rows"]] == list(range(1, 31))
        assert got["rows"][9] == {"step": 10, "loss": 0.2, "seconds": 5.0, "dev_accuracy": pytest.approx(1 / 3)}
        assert [r["step"] for r in got["rows"] if "dev_accuracy" in r] == [10, 20, 30]
        assert http.get("/api/runs/1/warm_start").json() == {"rows": [], "error": None}
        assert http.get("/api/runs/2/warm_start").status_code == 404
        stamps = [r["warm_start"] for r in http.get("/api/poll").json()["runs"]]
        assert stamps[0] and stamps[1] is None
        write_warm_start(old, steps=4, every=2)  # a run that was warm-starting when the page opened
        assert http.get("/api/poll").json()["runs"][1]["warm_start"]
        assert [r["step"] for r in http.get("/api/runs/1/warm_start").json()["rows"]] == [1, 2, 3, 4]
    assert main(["view", str(tmp_path / "solo"), "--export", str(tmp_path / "x.html")]) == 2  # no such directory
    write_warm_start(tmp_path / "solo")  # a directory holding only the curve is a run to view
    assert main(["view", str(tmp_path / "solo"), "--export", str(tmp_path / "solo.html")]) == 0
    html = (tmp_path / "solo.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'<script id="agentrl-data" type="application/json">(.*?)</script>', html, re.S).group(1))
    assert len(data["warm_starts"][0]["rows"]) == 30


def test_a_token_guards_everything_but_health(tmp_path: Path, tok: Any) -> None:
    import uvicorn

    from agentrl.viewer.command import bind, load_runs
    from agentrl.viewer.server import create_app

    runs = load_runs([write_run(tmp_path / "run", tok)])
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(runs, token="s3cret", port=port), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: server.started)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            assert http.get("/healthz").status_code == 200
            assert http.get("/api/runs").status_code == 401 and http.get("/").status_code == 401
            assert http.get("/api/runs", headers={"Authorization": "Bearer nope"}).status_code == 401
            assert http.get("/api/runs", headers={"Authorization": "Bearer s3cret"}).status_code == 200
            assert http.get("/", params={"token": "nope"}).status_code == 401
            opened = http.get("/", params={"token": "s3cret"}, follow_redirects=True)  # a cookie, then the page
            assert opened.status_code == 200 and "agentrl view" in opened.text
            assert http.get("/api/runs").status_code == 200  # the cookie now
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    assert not thread.is_alive()


def test_busy_port_and_directories_without_a_run_are_one_line(tmp_path: Path, tok: Any, capsys) -> None:
    run = write_run(tmp_path / "run", tok)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["view", str(run), "--port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert re.fullmatch(rf"agentrl view: cannot listen on 127\.0\.0\.1:{port}: .* \(pass another --port, or "
                        r"--port 0 for a free one\)", err), err
    assert main(["view", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no such run directory" in err
    (tmp_path / "empty").mkdir()
    assert main(["view", str(run), str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds no run" in err and "empty" in err
    with pytest.raises(SystemExit):
        main(["view", str(run), "--port", "70000"])
    assert "not a port number 0-65535" in capsys.readouterr().err


def test_export_is_one_file_that_needs_no_network(tmp_path: Path, tok: Any, capsys) -> None:
    run = write_run(tmp_path / "run", tok)
    hostile = two_turn(tok)
    hostile.task_id = "</script><script>window.pwned=1</script><!--"
    append_records(run / "samples.jsonl", [episode_record(hostile, tok, step=9)])
    out = tmp_path / "share" / "report.html"
    assert main(["view", str(run), "--export", str(out)]) == 0
    assert f"wrote {out} (1 run, 7 episodes" in capsys.readouterr().out
    html = out.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)=["']?(https?:|//|static/)""", html)  # nothing fetched, no server
    assert html.count("<script") == 6 and html.count("</script>") == 6  # 5 scripts and the data, none injected
    data = json.loads(re.search(r'<script id="agentrl-data" type="application/json">(.*?)</script>', html,
                                re.S).group(1))
    assert [len(x) for x in (data["runs"], data["metrics"][0], data["episodes"][0], data["records"][0])] == [1, 3, 7, 7]
    assert data["records"][0][6]["task_id"] == hostile.task_id
    assert data["metrics"][0][1]["kl"] is None and len(data["evals"][0][0]["records"]) == 1


def test_json_gets_null_for_every_nan_and_infinity() -> None:
    from agentrl.viewer.data import finite

    nan, inf = float("nan"), float("inf")
    assert finite({"a": [1.0, nan, 2], "b": [inf, -inf], "c": nan, "d": [[-inf], "x", None]}) == {
        "a": [1.0, None, 2], "b": [None, None], "c": None, "d": [[None], "x", None]}
    ids = [3, 1, 4]
    assert finite(ids) is ids and finite([1e308, 1e308]) == [1e308, 1e308]  # all finite: returned as is
