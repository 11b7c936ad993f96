"""Cache entries (tiny models, converted GGUF models, warm starts) are published by one rename, so
two processes building the same entry at once (two pytest-xdist workers, two runs) never mix files."""

from __future__ import annotations

import os
from pathlib import Path

from agentrl.models import cache_tmp, publish


def _build(tmp: Path, text: str) -> Path:
    tmp.mkdir(parents=True)
    (tmp / "config.json").write_text(text)
    return tmp


def test_first_publisher_wins_and_the_loser_leaves_nothing(tmp_path):
    out = tmp_path / "models" / "tiny-abc"
    mine = cache_tmp(out)
    assert mine.parent == out.parent and str(os.getpid()) in mine.name
    theirs = _build(out.with_name(out.name + ".tmp999999"), "theirs")
    _build(mine, "mine")
    assert publish(theirs, out) == out
    assert publish(mine, out) == out  # published meanwhile by the other process: keep theirs
    assert (out / "config.json").read_text() == "theirs"
    assert sorted(p.name for p in out.parent.iterdir()) == ["tiny-abc"]


def test_a_rename_that_loses_the_race_keeps_the_winner(tmp_path, monkeypatch):
    out = tmp_path / "tiny-abc"
    mine = _build(cache_tmp(out), "mine")
    real_exists = Path.exists
    calls = []

    def racing_exists(self: Path) -> bool:  # the other process renames between our check and our rename
        if self == out and not calls:
            calls.append(1)
            _build(out, "theirs")
            return False
        return real_exists(self)

    monkeypatch.setattr(Path, "exists", racing_exists)
    assert publish(mine, out) == out
    assert (out / "config.json").read_text() == "theirs" and not real_exists(mine)
