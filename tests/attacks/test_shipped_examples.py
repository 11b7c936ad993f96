"""The twelve example tasks resist every attack of the library (``agentrl tasks audit examples/tasks``
reports nothing) on the local backend; on Docker, the one whose verifier runs the most of the agent's
(its unit tests, in a testee child). All twelve on Docker take ~3 minutes on 2 cores: ``agentrl tasks
audit examples/tasks --backend docker`` (tests/attacks/test_grader.py attacks the other verifier shapes
on Docker)."""

from __future__ import annotations

import shutil

import pytest
from auditkit import ROOT, audit_clean

EXAMPLES = ROOT / "examples" / "tasks"
ON_DOCKER = ("failing-unittest",)
pytestmark = pytest.mark.slow



def test_the_example_tasks_resist_every_attack(capsys):
    rows = audit_clean(EXAMPLES, "local", capsys)
    assert sorted(r["task"] for r in rows) == sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir())


@pytest.mark.docker
def test_example_tasks_of_each_verifier_shape_resist_every_attack_on_docker(docker, tmp_path, capsys):
    for name in ON_DOCKER:
        shutil.copytree(EXAMPLES / name, tmp_path / "tasks" / name)
    assert len(audit_clean(tmp_path / "tasks", "docker", capsys)) == len(ON_DOCKER)
