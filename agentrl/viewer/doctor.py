"""A run directory's ``doctor.json`` (``agentrl doctor --out DIR``; ``agentrl train`` writes one on its
first step) as the viewer shows it, checked here rather than trusted.

:func:`read_doctor` never raises for what is in the file: it answers ``{"state": "missing"}``, ``{"state":
"error", "error": one line}`` (not JSON, not the doctor's shape, too large) or ``{"state": "ok", "report":
...}``: ``version``, ``ok``, ``facts`` (any JSON), ``notes`` (strings) and ``checks`` (``name``, ``status``,
``summary``, ``advice`` as strings, ``details`` any JSON). A status the viewer does not know is kept as it
is (the page shows it uncoloured). The viewer reads the file itself and imports nothing of
``agentrl.doctor``: the page must open on a machine that only holds run directories.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

DOCTOR_FILE = "doctor.json"
MAX_BYTES = 8 * 1024 * 1024
"""A doctor report is a few KB; a file larger than this is not one (said, not read)."""
KNOWN_VERSION = 1


class DoctorFormatError(ValueError):
    """``doctor.json`` is not a doctor report, said in one line."""


def read_doctor(run_dir: Path) -> dict[str, Any]:
    """The run's doctor report, or why there is none (see the module docstring)."""
    path = run_dir / DOCTOR_FILE
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        return {"state": "missing"}
    except OSError as e:
        return {"state": "error", "error": f"{DOCTOR_FILE}: cannot read it ({e.strerror})"}
    if size > MAX_BYTES:
        return {"state": "error", "error": f"{DOCTOR_FILE}: {size} bytes, not a doctor report (at most {MAX_BYTES})"}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return {"state": "error", "error": f"{DOCTOR_FILE}: cannot read it ({str(e)[:200]})"}
    try:
        raw = json.loads(text, parse_constant=lambda name: None)  # NaN and infinities: null, as JSON has them
    except json.JSONDecodeError as e:
        return {"state": "error", "error": f"{DOCTOR_FILE} is not JSON: {e.msg} at line {e.lineno} column {e.colno}"}
    except RecursionError:
        return {"state": "error", "error": f"{DOCTOR_FILE}: nested too deeply to be a doctor report"}
    try:
        return {"state": "ok", "report": normalize(raw)}
    except DoctorFormatError as e:
        return {"state": "error", "error": f"{DOCTOR_FILE}: {e}"}


def normalize(raw: Any) -> dict[str, Any]:
    """``raw`` (parsed JSON) as a report of the shape the page draws; DoctorFormatError if it is not one."""
    if not isinstance(raw, dict):
        raise DoctorFormatError(f"expected a JSON object, got {type(raw).__name__}")
    checks = raw.get("checks")
    if not isinstance(checks, list):
        raise DoctorFormatError("no list of checks (\"checks\")")
    facts = raw.get("facts", {})
    if not isinstance(facts, dict):
        raise DoctorFormatError(f"\"facts\" is {type(facts).__name__}, not an object")
    notes = raw.get("notes", [])
    if not isinstance(notes, list):
        raise DoctorFormatError(f"\"notes\" is {type(notes).__name__}, not a list")
    version = raw.get("version")
    ok = raw.get("ok")
    report = {"version": version, "ok": ok if isinstance(ok, bool) else not any(_status(c) == "fail" for c in checks),
              "facts": facts, "notes": [_text(n) for n in notes],
              "checks": [_check(c, i) for i, c in enumerate(checks)], "warning": ""}
    if version != KNOWN_VERSION:
        report["warning"] = f"report version {version!r}; this viewer reads version {KNOWN_VERSION} (shown as far as it can)"
    return report


def _check(raw: Any, index: int) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise DoctorFormatError(f"checks[{index}] is {type(raw).__name__}, not an object")
    for key in ("name", "status"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise DoctorFormatError(f"checks[{index}] has no {key} (a string)")
    details = raw.get("details", {})
    return {"name": raw["name"], "status": raw["status"], "summary": _text(raw.get("summary", "")),
            "advice": _text(raw.get("advice", "")), "details": details if details is not None else {}}


def _status(raw: Any) -> Any:
    return raw.get("status") if isinstance(raw, dict) else None


def _text(value: Any) -> str:
    """A one-line field as a string (null: empty; a number or an object: its JSON)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def doctor_stamp(run_dir: Path) -> str | None:
    """Changes when ``doctor.json`` is written (None without one): the page fetches the report again."""
    try:
        st = os.stat(run_dir / DOCTOR_FILE)
    except OSError:
        return None
    return f"{st.st_mtime_ns}:{st.st_size}:{st.st_ino}"
