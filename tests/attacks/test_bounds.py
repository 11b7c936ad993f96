"""Grading costs the agent cannot blow up, through a real Terminal-v0 episode (the trainer's path:
``env.step`` seals, grades and records): a 64 MB file grows the trainer by < 50 MB, a 1,100-deep
tree scores 0 (not a failure), a 200 GB sparse file is refused by its apparent size and leaves the
workspace runtime's memory under the workspace's limit. The trainer's growth is measured in a
fresh process (its peak RSS before and after the episode), as a trainer would see it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.workspace import TreeTooLarge, WorkspaceError, WorkspaceLimits, WorkspaceSpec, open_workspace

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]
DEEP = 'd=a; for i in $(seq 1100); do d=$d/a; done; mkdir -p "$d" && echo x > "$d/f"'
EPISODE = r"""
import json, resource, sys, time
import agentrl
from environments.tool_parsers import render_calls
env = agentrl.make("agentrl/Terminal-v0", difficulty=1, backend=sys.argv[1])
def episode(command):
    env.reset(seed=0)
    obs, reward, term, trunc, info = env.step(render_calls("hermes", [("bash", {"command": command}), ("submit", {})]))
    return {"reward": reward, "failed": bool(info.get("failed")), "error": info.get("error"),
            "diff": len(info["trajectory_info"]["diff"])}
warm = episode("echo warm > warm.txt")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = episode(sys.argv[2])
out["grew_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
env.close()
print(json.dumps(out))
"""



def episode(backend: str, command: str) -> dict:
    r = subprocess.run([sys.executable, "-c", EPISODE, backend, command], capture_output=True, text=True,
                       cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_64_mb_file_grows_the_trainer_by_less_than_50_mb(backend):
    out = episode(backend, "seq 1 9000000 > notes.txt")  # 69 MB of text
    assert out["reward"] == 0.0 and not out["failed"], out
    assert out["grew_mb"] < 50, out
    assert out["diff"] < 70000, out  # the diff is capped, and says the file is large


def test_a_1100_deep_tree_scores_0_not_a_failure(backend):
    out = episode(backend, DEEP)
    assert out["reward"] == 0.0 and not out["failed"], out


@pytest.mark.parametrize("backend", ["local"])  # Docker's runtime sits inside the container's own cgroup
def test_a_200_gb_sparse_file_is_refused_and_the_runtime_stays_small(backend):
    spec = WorkspaceSpec(name="sparse", limits=WorkspaceLimits(memory_mb=512, storage_mb=256))
    with open_workspace(spec, backend) as ws:
        assert ws.exec("truncate -s 200G big && du -k big").output.split()[0] == "0"
        for attempt in (ws.diff, ws.snapshot, ws.seal):
            with pytest.raises(TreeTooLarge):
                attempt()
        assert ws.runtime_max_rss_kb() < 512 * 1024 / 4, ws.runtime_max_rss_kb()  # far under the limit
        with pytest.raises(WorkspaceError, match="sealed"):
            ws.exec("true")
    out = episode(backend, "truncate -s 200G big")
    assert out["reward"] == 0.0 and not out["failed"], out  # the agent's doing: 0, not a failure
