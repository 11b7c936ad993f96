"""Shared fixtures for the rewards tests: benchmark data paths and loaders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "environments" / "data"
HERE = Path(__file__).resolve().parent


def read_jsonl(path: Path) -> list[dict]:
    """Rows of a JSONL file."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="session")
def math500() -> list[dict]:
    return read_jsonl(DATA / "math500_test.jsonl")


@pytest.fixture(scope="session")
def gsm8k_test() -> list[dict]:
    return read_jsonl(DATA / "gsm8k_test.jsonl")
