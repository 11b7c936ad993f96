"""RepoRepair-v0 tasks of every project, as ``agentrl tasks export`` writes them (3 a project, 12 in
all), resist every attack of the library on the local backend; one of them on Docker. The suite
imports the agent's code, so these are the attacks on a verifier that runs it: its runner must see a
report of every expected test, with its nonce, from a testee child (``runner.py --grade``)."""

from __future__ import annotations

import pytest
from auditkit import STORAGE, audit_clean, export, sample

PROJECTS = ["cachetools", "idna", "Markdown", "more-itertools"]
pytestmark = pytest.mark.slow



@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return export(tmp_path_factory.mktemp("repo_repair") / "tasks", "agentrl/RepoRepair-v0", 3, "projects",
                  PROJECTS)


def test_every_repo_repair_project_resists_every_attack(exported, capsys):
    rows = audit_clean(exported, "local", capsys, skip=STORAGE)  # the examples' audit and test_bounds play those
    assert len(rows) == 12 and {r["task"].rsplit("-", 2)[0] for r in rows} == {p.lower() for p in PROJECTS}


@pytest.mark.docker
def test_a_repo_repair_task_resists_every_attack_on_docker(docker, exported, tmp_path, capsys):
    assert len(audit_clean(sample(exported, tmp_path / "one"), "docker", capsys)) == 1
