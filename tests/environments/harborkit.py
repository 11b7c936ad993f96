"""Small Harbor tasks written into a temporary folder for the tests, and the backends to run them on."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest

from environments.harbor.task import write_task

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "tasks"
SECRET = "grader-only-9f3c1e"  # in every test task's tests/ and solution/, never in its environment
TOML = """version = "1.0"
[agent]
timeout_sec = {agent}
[verifier]
timeout_sec = 30.0
[verifier.env]
EXPECTED = "{expected}"
[environment]
cpus = 1
memory_mb = 512
storage_mb = 128
{extra}"""
# The verifier: 1 when /app/out.txt holds the expected text (from [verifier] env), else 0.
CHECK_OUT = f"""#!/bin/bash
# {SECRET}
mkdir -p /logs/verifier
if [ "$(cat /app/out.txt 2>/dev/null)" = "$EXPECTED" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
"""


def docker_available() -> bool:
    if importlib.util.find_spec("sandbox.workspace.docker") is None or shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


DOCKER = [pytest.mark.docker, pytest.mark.skipif(not docker_available(), reason="no Docker daemon")]
BACKENDS = ["local", pytest.param("docker", marks=DOCKER)]


def make_task(root: Path, name: str = "echo-42", test_sh: str = CHECK_OUT, solve: str | None = "echo 42 > /app/out.txt",
              expected: str = "42", agent_timeout: float = 60.0, dockerfile: str = "FROM ubuntu:24.04\nWORKDIR /app\n",
              files: dict[str, str] | None = None, extra_toml: str = "") -> Path:
    """A task whose verifier wants /app/out.txt to read ``expected`` (by default)."""
    toml = TOML.format(agent=agent_timeout, expected=expected, extra=extra_toml)
    return write_task(root / name, f"Write {expected} to /app/out.txt.\n", toml,
                      {"Dockerfile": dockerfile, **(files or {})}, {"test.sh": test_sh},
                      None if solve is None else {"solve.sh": f"#!/bin/bash\n# {SECRET}\n{solve}\n"})


def call(name: str, **arguments: object) -> str:
    """One Hermes tool call."""
    import json

    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


class ScriptedPolicy:
    """An engine whose k-th ``generate`` call answers ``script(k)`` (then EOS) for every context: a scripted
    policy, so an episode's tool calls are known (the executor and the env stay real)."""

    def __init__(self, tok, script) -> None:
        self.tok, self.script, self.calls = tok, script, []

    def generate(self, prompts, params):
        from agentrl.rollout.engines.base import Completion

        self.calls.append([list(p) for p in prompts])
        ids = self.tok(self.script(len(self.calls) - 1), add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
        return [Completion(ids[:params.max_new_tokens], [-0.5] * len(ids[:params.max_new_tokens]), "stop")
                for _ in prompts]
