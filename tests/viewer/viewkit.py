"""Helpers shared by the viewer tests (imported by name: this directory is on sys.path): a tokenizer
and a two-turn trajectory built by hand, a run directory (and a warm-start curve) written with the real writers, and
``agentrl view`` started as a real process on 127.0.0.1 and stopped with a check that it is gone."""

from __future__ import annotations

import json
import os
import re
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agentrl.evaluation.command import report_json
from agentrl.models import train_tokenizer
from agentrl.runs.episodes import MAX_INFO_CHARS, append_records, episode_record
from agentrl.types import Segment, Trajectory

ROOT = Path(__file__).resolve().parents[2]
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "2+3"}}</tool_call>'
CORPUS = [CALL, "<tool_response>\n5\n</tool_response>", "What is 2+3? The answer is 5.", "é ü ok"] * 5


def tokenizer() -> Any:
    return train_tokenizer(CORPUS, 300)


def ids(tok: Any, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


def two_turn(tok: Any, *, versions: bool = True, failed: bool = False) -> Trajectory:
    """A calculator call, its response (feedback), then the answer; workspace-style info keys too."""
    a1, fb, a2 = ids(tok, CALL), ids(tok, "\n<tool_response>\n5\n</tool_response>\n"), ids(tok, "The answer is 5.")
    info: dict[str, Any] = {
        "turns": 2, "end_reason": "failed" if failed else "terminated", "reward_components": {"correct": 1.0},
        "responses": [CALL, "The answer is 5."], "response": "The answer is 5.", "finish_reason": "stop",
        "verified": True, "parsed": "5",
        "tool_calls": [{"turn": 0, "name": "calculator", "arguments": {"expression": "2+3"}, "result": "5",
                        "error": None}],
        "commands": ["ls", "pytest -q"], "outputs": ["a.py", "1 passed"], "diff": "--- a\n+++ b\n-x\n+y",
        "verifier": {"reward": 1.0, "stdout": "ok"}, "blob": "x" * (MAX_INFO_CHARS + 500)}
    if versions:
        info["action_versions"] = [3, 4]
    if failed:
        info.update(failed=True, error="StepTimeout: env step ran past 5 s")
    return Trajectory(prompt_ids=ids(tok, "What is 2+3?"),
                      segments=[Segment(a1, True, [-0.5] * len(a1)), Segment(fb, False),
                                Segment(a2, True, [-0.25] * len(a2))],
                      reward=0.0 if failed else 1.0, task_id="t-1", group_id=7, turn_rewards=[0.0, 1.0], info=info)


def write_run(path: Path, tok: Any, steps: int = 3) -> Path:
    """A run directory as agentrl train and agentrl eval write one: config, metrics (a NaN among
    them), two records per step (one failed; the other with learner log-probs on its first action)
    and an eval report with its episodes."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.yaml").write_text("env:\n  id: agentrl/CalculatorMath-v0\nalgo:\n  estimator: group_norm\n")
    with open(path / "metrics.jsonl", "w", encoding="utf-8") as f:
        for step in range(1, steps + 1):
            f.write(json.dumps({"step": step, "reward/mean": step / 10, "kl": float("nan") if step == 2 else 0.01})
                    + "\n")
    for step in range(1, steps + 1):
        first = len(two_turn(tok).segments[0].token_ids)  # learner 0.1 nats off the engine on the first action
        append_records(path / "samples.jsonl", [episode_record(two_turn(tok), tok, step=step,
                                                               learner_logprobs=[[-0.4] * first]),
                                                episode_record(two_turn(tok, failed=True), tok, step=step)])
    report = {"model": "m", "n_samples": 1, "overall": {"tasks": 1.0, "accuracy": 1.0, "pass@1": 1.0},
              "datasets": {"agentrl/CalculatorMath-v0": {"tasks": 1.0, "accuracy": 1.0, "pass@1": 1.0}},
              "difficulties": {}, "skipped": {}, "samples": [],
              "episodes": [episode_record(two_turn(tok), tok, split="eval", dataset="agentrl/CalculatorMath-v0")
                           .to_dict()]}
    (path / "eval").mkdir(exist_ok=True)
    (path / "eval" / "eval.json").write_text(report_json(report), encoding="utf-8")
    return path


def write_warm_start(path: Path, steps: int = 30, every: int = 10) -> Path:
    """``warm_start.jsonl`` of a warm start of ``steps`` steps (loss 2/step, 0.5 s each) evaluated every
    ``every`` (dev accuracy step/steps), written by the warm start's own writer."""
    from agentrl.training.supervised import SFTResult
    from agentrl.training.warm_start import curve_rows, write_curve

    curve = [(s, 2.0 / s, 0.5 * s) for s in range(1, steps + 1)]
    history = [(s, 2.0 / s, s / steps) for s in range(every, steps + 1, every)]
    result = SFTResult(steps, history[-1][2], curve[-1][1], curve[-1][2], history, curve=curve)
    path.mkdir(parents=True, exist_ok=True)
    write_curve(path, "".join(json.dumps(row) + "\n" for row in curve_rows(result)))
    return path


class Viewer:
    """A running ``agentrl view`` process and its URL."""

    def __init__(self, proc: subprocess.Popen, url: str) -> None:
        self.proc, self.url = proc, url
        self.port = int(re.search(r":(\d+)/", url).group(1))


@contextmanager
def viewer(*args: str, timeout_s: float = 60.0) -> Iterator[Viewer]:
    """``agentrl view ARGS --port 0`` on 127.0.0.1 until the block ends; then the process and its port
    are checked gone."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "agentrl.cli", "view", *args, "--port", "0"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = _first_line(proc, timeout_s)
        match = re.search(r"agentrl view: (http://127\.0\.0\.1:\d+/\S*)", line)
        assert match, f"agentrl view did not print its URL: {line!r}"
        yield Viewer(proc, match.group(1))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
    assert proc.returncode is not None
    if "match" in locals() and match:
        port = int(re.search(r":(\d+)/", match.group(1)).group(1))
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers after agentrl view stopped"


def _first_line(proc: subprocess.Popen, timeout_s: float) -> str:
    """The first line the process prints (what it printed so far if it exits or the time runs out)."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline, seen = time.monotonic() + timeout_s, ""
    while time.monotonic() < deadline:
        if sel.select(timeout=0.5):
            line = proc.stdout.readline()
            if not line:
                break
            seen += line
            if "agentrl view:" in line:
                return line
    return seen or f"(nothing printed; exit code {proc.poll()})"


def open_page(browser: Any, url: str) -> tuple[Any, list[str]]:
    """A page at ``url`` once it has loaded its data; the errors it logs are collected."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(url)
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    return page, errors
