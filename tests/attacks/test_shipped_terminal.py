"""Terminal-v0 tasks of every family, as ``agentrl tasks export`` writes them (3 a family, 51 in all,
difficulty 1-3), resist every attack of the library on the local backend; one of them on Docker."""

from __future__ import annotations

import pytest
from auditkit import STORAGE, audit_clean, export, sample

from environments.terminal.catalog import load_all

pytestmark = pytest.mark.slow



@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return export(tmp_path_factory.mktemp("terminal") / "tasks", "agentrl/Terminal-v0", 3, "families",
                  list(load_all()), "difficulty=[1,2,3]")


def test_every_terminal_family_resists_every_attack(exported, capsys):
    rows = audit_clean(exported, "local", capsys, skip=STORAGE)  # the examples' audit and test_bounds play those
    assert len(rows) >= 50 and {r["task"].split("-")[1] for r in rows} == set(load_all())


@pytest.mark.docker
def test_a_terminal_task_resists_every_attack_on_docker(docker, exported, tmp_path, capsys):
    assert len(audit_clean(sample(exported, tmp_path / "one"), "docker", capsys)) == 1
