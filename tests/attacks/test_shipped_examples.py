"""The twelve example tasks resist every attack of the library (``agentrl tasks audit examples/tasks``
reports nothing) on the local backend; on Docker, four of them that cover the verifier shapes (a
verifier that runs the agent's script, one that runs its unit tests in a testee child, git on its
repository, a checker program of the grader's). All twelve on Docker take ~3 minutes on 2 cores:
``agentrl tasks audit examples/tasks --backend docker``."""

from __future__ import annotations

import shutil

import pytest
from auditkit import ROOT, audit_clean, nothing_left

EXAMPLES = ROOT / "examples" / "tasks"
ON_DOCKER = ("backup-script-bug", "failing-unittest", "git-fix-commit", "csv-to-json")
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def clean_after():
    yield
    left = nothing_left()
    assert not any(left.values()), left


def test_the_example_tasks_resist_every_attack(capsys):
    rows = audit_clean(EXAMPLES, "local", capsys)
    assert sorted(r["task"] for r in rows) == sorted(p.name for p in EXAMPLES.iterdir() if p.is_dir())


@pytest.mark.docker
def test_example_tasks_of_each_verifier_shape_resist_every_attack_on_docker(tmp_path, capsys):
    from tests.sandbox.test_workspace import _docker_or_skip

    _docker_or_skip()
    for name in ON_DOCKER:
        shutil.copytree(EXAMPLES / name, tmp_path / "tasks" / name)
    assert len(audit_clean(tmp_path / "tasks", "docker", capsys)) == len(ON_DOCKER)
