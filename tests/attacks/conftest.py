"""The attack tier (``make test`` runs it as its own step, ``-m attack``): every test here attacks the
grader or a shipped task's verifier, and is marked ``attack``. ``vulnerable/`` holds Harbor task
directories (data for the audit tests), not tests to collect: a task's environment may carry the
agent's own, deliberately failing, test file."""

from pathlib import Path

import pytest
from auditkit import nothing_left

from agentrl.env import end_parked_workspaces
from tests.sandbox.test_workspace import _docker_or_skip

collect_ignore_glob = ["vulnerable/*"]
HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def clean_after():
    """Every attack test closes every workspace it opened: nothing of them is left on the host. The runtimes
    an env parked for its next episode end first (they would end by themselves ``park_s`` later, 10 s)."""
    yield
    end_parked_workspaces()
    left = nothing_left()
    assert not any(left.values()), left


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request):
    """Each backend (Docker skipped without a daemon, failed without one under CI)."""
    if request.param == "docker":
        _docker_or_skip()
    return request.param


@pytest.fixture
def docker():
    """Docker, or a skip (a failure under CI)."""
    _docker_or_skip()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.attack)
