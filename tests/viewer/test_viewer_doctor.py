"""``agentrl view`` shows a run's ``doctor.json``: the API serves it as written by the doctor's own
``Report.write``, a malformed file is one clear error and the rest of the run still loads, a directory
that holds only ``doctor.json`` (``agentrl doctor --out DIR``) is viewable, the export inlines it with
no way for a summary to end its script, a rewritten report reaches the poll. In Chromium (slow, as the
other browser tests): one row per check with its status coloured (computed style and pixels), details
folded open as pretty JSON, notes and facts, a run without a report says how to make one, and model
output in a summary stays text (no element, no script run). Every server is a real ``agentrl view`` on
127.0.0.1, checked gone afterwards."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from viewkit import open_page, tokenizer, viewer, write_run

from agentrl.cli import main
from agentrl.doctor.report import Check, Report
from agentrl.viewer.doctor import MAX_BYTES, read_doctor

XSS = 'model said <img src=x onerror="window.pwned=1"><script>window.pwned=2</script></td>&amp;'
COLOURS = {"pass": (22, 163, 74), "warn": (217, 119, 6), "fail": (220, 38, 38), "skip": (156, 163, 175)}
STATUSES = ["pass", "warn", "pass", "fail", "pass", "skip", "pass"]


def report() -> Report:
    """A report as ``agentrl doctor`` writes one: the seven checks in order, model output in a summary."""
    names = ["tokens", "tools", "mask", "logprobs", "reward", "grader", "cost"]
    checks = [Check(n, s, f"{n} looked {s}", "" if s == "pass" else f"change {n}", {"n": i})
              for i, (n, s) in enumerate(zip(names, STATUSES))]
    checks[1].details = {"unparsable": 2, "examples": ["<tool_call>{oops"], "nan": float("nan")}
    checks[3].summary, checks[3].advice = XSS, 'use "<b>hf</b>" & retry'
    checks[5].details = {}
    facts = {"config": "examples/configs/terminal_tiny.yaml", "model": "tiny", "episodes": 32, "seconds": 41.2,
             "engine": {"name": "<i>hf</i>"}}
    return Report(checks, facts, ["model.device cuda -> cpu (no GPU here)", "<b>not bold</b>"])


@pytest.fixture(scope="module")
def tok() -> Any:
    return tokenizer()


def test_the_api_serves_the_report_and_follows_a_rewrite(tmp_path: Path, tok: Any) -> None:
    run = write_run(tmp_path / "run", tok)
    report().write(run)
    bare = write_run(tmp_path / "bare", tok)  # no doctor.json
    with viewer(str(run), str(bare)) as v, httpx.Client(base_url=v.url, timeout=30) as http:
        d = http.get("/api/runs/0/doctor").json()
        assert d["state"] == "ok" and set(d) == {"state", "report"}
        rep = d["report"]
        assert (rep["version"], rep["ok"], rep["warning"]) == (1, False, "")
        assert [(c["name"], c["status"]) for c in rep["checks"]] == list(zip(
            ["tokens", "tools", "mask", "logprobs", "reward", "grader", "cost"], STATUSES))
        assert rep["checks"][3]["summary"] == XSS and rep["checks"][3]["advice"] == 'use "<b>hf</b>" & retry'
        assert rep["checks"][1]["details"] == {"unparsable": 2, "examples": ["<tool_call>{oops"], "nan": None}
        assert rep["facts"]["seconds"] == 41.2 and rep["notes"][1] == "<b>not bold</b>"
        assert http.get("/api/runs/1/doctor").json() == {"state": "missing"}
        assert http.get("/api/runs/2/doctor").status_code == 404
        stamps = [r["doctor"] for r in http.get("/api/poll").json()["runs"]]
        assert stamps[0] and stamps[1] is None

        # agentrl train writes its own report on the first step: the poll says so, the API serves it
        Report([Check("tokens", "pass", "ok"), Check("mask", "pass", "ok")], {"episodes": 4}).write(bare)
        stamps = [r["doctor"] for r in http.get("/api/poll").json()["runs"]]
        assert stamps[1] is not None
        assert [c["name"] for c in http.get("/api/runs/1/doctor").json()["report"]["checks"]] == ["tokens", "mask"]
        Report([Check("tokens", "fail", "broken")]).write(bare)
        assert http.get("/api/poll").json()["runs"][1]["doctor"] != stamps[1]
        assert http.get("/api/runs/1/doctor").json()["report"]["ok"] is False


@pytest.mark.parametrize("text, error", [
    ('{"version": 1, "checks": [', r"doctor\.json is not JSON: Expecting value at line 1 column 27"),
    ("[1, 2]", r"doctor\.json: expected a JSON object, got list"),
    ('{"version": 1, "checks": {"tokens": "pass"}}', r'doctor\.json: no list of checks \("checks"\)'),
    ('{"checks": ["pass"]}', r"doctor\.json: checks\[0\] is str, not an object"),
    ('{"checks": [{"name": "tokens"}]}', r"doctor\.json: checks\[0\] has no status \(a string\)"),
    ('{"checks": [], "facts": [1]}', r'doctor\.json: "facts" is list, not an object'),
    ('{"checks": [], "notes": "x"}', r'doctor\.json: "notes" is str, not a list'),
    (b"\xff\xfe{}", r"doctor\.json: cannot read it \(.*codec can't decode .*\)"),
    ("[" * 100_000, r"doctor\.json: nested too deeply to be a doctor report"),
], ids=["truncated", "list", "checks-dict", "check-str", "no-status", "facts-list", "notes-str", "not-utf8", "deep"])
def test_a_malformed_report_is_one_line(tmp_path: Path, text: str | bytes, error: str) -> None:
    path = tmp_path / "doctor.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    got = read_doctor(tmp_path)
    assert got["state"] == "error" and set(got) == {"state", "error"}
    assert re.fullmatch(error, got["error"]) and "\n" not in got["error"], got["error"]


def test_lenient_where_the_meaning_is_plain(tmp_path: Path) -> None:
    raw = ('{"version": 2, "checks": [{"name": "tokens", "status": "flaky", "summary": 3, "advice": null, '
           '"details": {"gap": NaN, "inf": -Infinity}}, {"name": "cost", "status": "fail"}]}')
    (tmp_path / "doctor.json").write_text(raw)
    rep = read_doctor(tmp_path)["report"]
    assert rep["checks"][0] == {"name": "tokens", "status": "flaky", "summary": "3", "advice": "",
                                "details": {"gap": None, "inf": None}}  # an unknown status is kept as it is
    assert rep["ok"] is False and rep["facts"] == {} and rep["notes"] == []  # no "ok": a fail says it
    assert rep["warning"].startswith("report version 2; this viewer reads version 1")
    (tmp_path / "doctor.json").write_bytes(b" " * (MAX_BYTES + 1))
    assert "not a doctor report" in read_doctor(tmp_path)["error"]


def test_a_malformed_report_leaves_the_run_viewable(tmp_path: Path, tok: Any) -> None:
    run = write_run(tmp_path / "run", tok)
    (run / "doctor.json").write_text('{"version": 1, "ok": tru')
    with viewer(str(run)) as v, httpx.Client(base_url=v.url, timeout=30) as http:
        d = http.get("/api/runs/0/doctor").json()
        assert d["state"] == "error" and d["error"].startswith("doctor.json is not JSON: ")
        [summary] = http.get("/api/runs").json()
        assert (summary["metrics"], summary["episodes"], summary["evals"]) == (3, 6, 1)
        assert len(http.get("/api/runs/0/metrics").json()["rows"]) == 3
        assert http.get("/api/runs/0/episodes/0").status_code == 200
        assert http.get("/api/poll").status_code == 200 and http.get("/").status_code == 200


def test_a_directory_with_only_a_doctor_report_is_viewable(tmp_path: Path, capsys) -> None:
    out = tmp_path / "doctor_out"
    report().write(out)  # what `agentrl doctor CONFIG --out DIR` leaves
    with viewer(str(out)) as v, httpx.Client(base_url=v.url, timeout=30) as http:
        [summary] = http.get("/api/runs").json()
        assert (summary["name"], summary["metrics"], summary["episodes"], summary["evals"], summary["config"]) == (
            "doctor_out", 0, 0, 0, {})
        assert http.get("/api/runs/0/doctor").json()["state"] == "ok"
        assert http.get("/api/runs/0/metrics").json()["rows"] == [] and http.get("/api/runs/0/evals").json() == []
        assert http.get("/").status_code == 200 and http.get("/static/doctor.js").status_code == 200
    (tmp_path / "empty").mkdir()
    assert main(["view", str(tmp_path / "empty")]) == 2
    assert "doctor.json" in capsys.readouterr().err  # the one line names it among what a run holds


def test_the_export_inlines_the_report_and_no_summary_ends_its_script(tmp_path: Path, tok: Any, capsys) -> None:
    run = write_run(tmp_path / "run", tok)
    report().write(run)
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "doctor.json").write_text("{not json")
    html_path = tmp_path / "report.html"
    assert main(["view", str(run), str(tmp_path / "only"), "--export", str(html_path)]) == 0
    capsys.readouterr()
    html = html_path.read_text(encoding="utf-8")
    assert html.count("<script") == 6 and html.count("</script>") == 6  # 5 scripts and the data, none injected
    assert "<img" not in html
    data = json.loads(re.search(r'<script id="agentrl-data" type="application/json">(.*?)</script>', html,
                                re.S).group(1))
    assert data["doctors"][0]["report"]["checks"][3]["summary"] == XSS
    assert data["doctors"][1]["state"] == "error"


# ---------------------------------------------------------------------------------------- in Chromium
def dominant(png: bytes) -> tuple[int, int, int]:
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    return max(img.getcolors(maxcolors=img.width * img.height))[1]


def rgb(colour: tuple[int, int, int]) -> str:
    return "rgb({}, {}, {})".format(*colour)


@pytest.mark.slow
def test_the_doctor_tab_colours_each_check_and_keeps_model_output_text(tmp_path: Path, tok: Any,
                                                                      browser: Any) -> None:
    run, bare = write_run(tmp_path / "run", tok), write_run(tmp_path / "bare", tok)
    report().write(run)
    with viewer(str(run), str(bare)) as v:
        page, errors = open_page(browser, v.url)
        assert "doctor: 1 fail, 1 warn" in page.locator(".run-chip").first.inner_text()
        page.click('#tabs a[data-tab="doctor"]')
        section = page.locator('section.doctor[data-run="0"]')
        rows = section.locator("tr.check")
        assert rows.count() == 7
        for k, status in enumerate(STATUSES):
            badge = rows.nth(k).locator(".status")
            assert badge.inner_text() == status
            assert badge.evaluate("el => getComputedStyle(el).backgroundColor") == rgb(COLOURS[status])
        for status in ("pass", "warn", "fail", "skip"):  # the pixels, not only the style
            assert dominant(section.locator(f".status-{status}").first.screenshot()) == COLOURS[status]
        assert section.locator(".doctor-head .status-fail").inner_text() == "failed"

        bad = section.locator('tr.check[data-check="logprobs"]')
        assert bad.locator(".check-summary").inner_text() == XSS  # model output shown as text
        assert bad.locator(".check-advice").inner_text() == '→ use "<b>hf</b>" & retry'
        injected = "main img, main script, .check-advice b, .doctor-notes b, .doctor-facts b i"
        assert page.locator(injected).count() == 0 and page.locator(".doctor-facts b").count() == 5
        assert page.evaluate("window.pwned") is None

        tools = section.locator('tr.check[data-check="tools"] details.check-details')
        assert not tools.locator("pre").is_visible()
        tools.locator("summary").click()
        assert json.loads(tools.locator("pre").inner_text()) == {"unparsable": 2, "examples": ["<tool_call>{oops"],
                                                                 "nan": None}
        assert tools.locator("pre").inner_text().startswith('{\n  "unparsable": 2')  # pretty-printed
        assert section.locator('tr.check[data-check="grader"] details').count() == 0  # no details: nothing folded

        assert section.locator(".doctor-notes li").all_inner_texts() == ["model.device cuda -> cpu (no GPU here)",
                                                                         "<b>not bold</b>"]
        facts = section.locator(".doctor-facts").inner_text()
        assert "terminal_tiny.yaml" in facts and "41.2" in facts and '{"name":"<i>hf</i>"}' in facts
        missing = page.locator('section.doctor[data-run="1"] .doctor-missing').inner_text()
        assert missing == f"no doctor report: agentrl doctor CONFIG --out {bare}"
        assert errors == []


@pytest.mark.slow
def test_the_doctor_tab_opens_first_for_a_report_alone_and_hides_without_one(tmp_path: Path, tok: Any,
                                                                            browser: Any) -> None:
    out = tmp_path / "doctor_out"
    report().write(out)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "doctor.json").write_text('{"checks": [{"name": "x", "status": "<u>odd</u>"}]')
    with viewer(str(out), str(tmp_path / "broken")) as v:
        page, errors = open_page(browser, v.url)  # no #fragment: the doctor's tab, as nothing else is there
        assert page.locator('#tabs a[data-tab="doctor"]').get_attribute("class") == "active"
        assert page.locator('section.doctor[data-run="0"] tr.check').count() == 7
        assert page.locator('section.doctor[data-run="1"] .doctor-error').inner_text().startswith(
            "doctor.json is not JSON")
        assert page.evaluate("window.pwned") is None and errors == []
    (tmp_path / "broken" / "doctor.json").write_text('{"checks": [{"name": "x", "status": "<u>odd</u>"}]}')
    with viewer(str(tmp_path / "broken")) as v:
        page, errors = open_page(browser, v.url + "#doctor")
        badge = page.locator("tr.check .status")
        assert badge.inner_text() == "<u>odd</u>" and badge.get_attribute("class") == "status status-other"
        assert page.locator("main u").count() == 0 and errors == []
    with viewer(str(write_run(tmp_path / "bare", tok))) as v:
        page, errors = open_page(browser, v.url)
        assert page.locator('#tabs a[data-tab="doctor"]').is_hidden()
        assert "doctor" not in page.locator(".run-chip").inner_text() and errors == []
