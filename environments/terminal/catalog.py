"""Every Terminal-v0 family, by name (importing the modules that define them registers them)."""

from __future__ import annotations

from environments.terminal import file_families, repair_families, text_families  # noqa: F401 - they register
from environments.terminal.families import FAMILIES, FamilyFn


def load_all() -> dict[str, FamilyFn]:
    """The families in registration order: files, text, repairs."""
    return FAMILIES
