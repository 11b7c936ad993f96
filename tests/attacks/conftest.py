"""The attack tier (``make test`` runs it as its own step, ``-m attack``): every test here attacks the
grader or a shipped task's verifier, and is marked ``attack``. ``vulnerable/`` holds Harbor task
directories (data for the audit tests), not tests to collect: a task's environment may carry the
agent's own, deliberately failing, test file."""

from pathlib import Path

import pytest

collect_ignore_glob = ["vulnerable/*"]
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.attack)
