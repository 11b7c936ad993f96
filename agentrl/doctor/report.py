"""The doctor's findings: one :class:`Check` per check, printed as a table, written as ``doctor.json``.

Every check says ``pass``, ``warn``, ``fail`` or ``skip`` (it does not apply to this config), one line of
what it saw (``summary``) and, when it is not ``pass``, one line of what to change (``advice``);
``details`` holds its figures (JSON values only). ``agentrl doctor`` exits 1 when any check fails."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

STATUSES = ("pass", "warn", "fail", "skip")
REPORT_VERSION = 1


@dataclass
class Check:
    """One check's verdict: ``name`` (``tokens``, ``tools``, ``mask``, ``logprobs``, ``reward``,
    ``grader``, ``cost``), ``status`` (one of :data:`STATUSES`), ``summary`` (what it saw, one line),
    ``advice`` (what to change; "" on pass) and ``details`` (its figures)."""

    name: str
    status: str
    summary: str
    advice: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.name}: status {self.status!r} is not one of {', '.join(STATUSES)}")


@dataclass
class Report:
    """Everything ``agentrl doctor`` found: the checks in order, what it played (``facts``: config, model,
    episodes, seconds) and what it changed to run here (``notes``: e.g. the vLLM engine replaced by hf)."""

    checks: list[Check]
    facts: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(c.status == "fail" for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"version": REPORT_VERSION, "ok": not self.failed, "facts": self.facts, "notes": self.notes,
                "checks": [asdict(c) for c in self.checks]}

    def to_json(self) -> str:
        return json.dumps(_finite(self.to_dict()), indent=1, sort_keys=False)

    def write(self, directory: str | Path) -> Path:
        """``DIRECTORY/doctor.json`` (written whole, then renamed: a reader never sees half of it)."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        tmp = out / ".doctor.json.tmp"
        tmp.write_text(self.to_json() + "\n")
        tmp.replace(out / "doctor.json")
        return out / "doctor.json"


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities as None (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


COLORS = {"pass": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def print_table(report: Report, out: TextIO | None = None) -> None:
    """The report as a table on the terminal (rich; plain text when ``out`` is not a terminal)."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=out, soft_wrap=False, width=160 if out is not None else None)
    for note in report.notes:
        console.print(f"[dim]note:[/dim] {note}", highlight=False)
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("check")
    table.add_column("result")
    table.add_column("what it saw / what to change", overflow="fold")
    for c in report.checks:
        text = c.summary + (f"\n[italic]-> {c.advice}[/italic]" if c.advice else "")
        table.add_row(c.name, f"[{COLORS[c.status]}]{c.status}[/{COLORS[c.status]}]", text)
    console.print(table)
    n = {s: sum(c.status == s for c in report.checks) for s in STATUSES}
    console.print(f"{n['fail']} fail, {n['warn']} warn, {n['pass']} pass, {n['skip']} skip", highlight=False)
