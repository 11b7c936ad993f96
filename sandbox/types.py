"""Shared records of the sandbox package: `Limits`, `ExecutionResult` and the `Sandbox` base class."""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["ok", "error", "timeout", "memory", "killed"]


@dataclass(frozen=True)
class Limits:
    """Resource limits for one execution (or one session)."""

    timeout_s: float = 10.0
    """Wall-clock limit; the whole process tree is SIGKILLed when it runs out."""
    memory_mb: int = 1024
    """Memory the program may allocate beyond the warm interpreter (address space and cgroup)."""
    cpu_s: float | None = None
    """CPU-time limit (RLIMIT_CPU); None means ceil(timeout_s) + 1."""
    max_output_bytes: int = 65536
    """Bytes kept of stdout and of stderr each; the rest is read and dropped (flag `*_truncated`)."""
    max_file_bytes: int = 16 * 1024 * 1024
    """Largest file the program may write (RLIMIT_FSIZE)."""
    max_open_files: int = 64
    """File descriptors the program may hold (RLIMIT_NOFILE)."""
    max_processes: int = 32
    """Processes and threads the program may run at once (pids cgroup and RLIMIT_NPROC)."""
    network: bool = False
    """False: the program gets a network namespace with no interfaces up (no network at all)."""

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "max_output_bytes", "max_file_bytes", "max_open_files",
                     "max_processes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Limits.{name} must be > 0, got {getattr(self, name)!r}")
        if self.cpu_s is not None and not self.cpu_s > 0:
            raise ValueError(f"Limits.cpu_s must be > 0 or None, got {self.cpu_s!r}")
        if self.max_open_files < 8:
            raise ValueError("Limits.max_open_files must be >= 8 (the interpreter needs a few)")

    def cpu_limit(self) -> int:
        """The CPU-time limit in whole seconds."""
        return int(math.ceil(self.cpu_s if self.cpu_s is not None else self.timeout_s + 1))

    def replace(self, **changes: Any) -> Limits:
        """A copy with some fields changed; unknown names raise TypeError."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict form, as sent to the supervisor processes."""
        d = dataclasses.asdict(self)
        d["cpu_s"] = self.cpu_limit()
        return d


@dataclass(frozen=True)
class ExecutionResult:
    """What happened when a program ran."""

    status: Status
    """ok: exit 0; error: non-zero exit or uncaught exception; timeout: wall-clock or CPU limit;
    memory: out of memory; killed: ended by another signal (segfault, file size, ...)."""
    exit_code: int | None
    """The exit status, -N when ended by signal N, None when it never started."""
    stdout: str
    stderr: str
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the program exited with status 0 in time."""
        return self.status == "ok"


def result_from_dict(raw: dict[str, Any]) -> ExecutionResult:
    """Build an ExecutionResult from a supervisor's result dict."""
    return ExecutionResult(
        status=raw["status"],
        exit_code=raw["exit_code"],
        stdout=raw["stdout"],
        stderr=raw["stderr"],
        stdout_truncated=raw["stdout_truncated"],
        stderr_truncated=raw["stderr_truncated"],
        duration_s=raw["duration_s"],
    )


def make_job(
    code: str,
    limits: Limits,
    *,
    stdin: str = "",
    files: dict[str, str | bytes] | None = None,
    secret: str | None = None,
) -> dict[str, Any]:
    """The job dict the supervisor processes understand (JSON-safe)."""
    enc: dict[str, list[str]] = {}
    for name, data in (files or {}).items():
        parts = name.replace("\\", "/").split("/")
        if name.startswith("/") or ".." in parts or not name or name == "main.py":
            raise ValueError(f"bad file name {name!r}: must be relative, inside the work dir, not main.py")
        enc[name] = ["t", data] if isinstance(data, str) else ["b", bytes(data).hex()]
    return {"code": code, "stdin": stdin, "files": enc, "limits": limits.to_dict(), "secret": secret}


def failed_result(message: str) -> dict[str, Any]:
    """The result dict of a job that could not run (its server or container broke down)."""
    return {"status": "killed", "exit_code": None, "stdout": "", "stderr": message,
            "stdout_truncated": False, "stderr_truncated": False, "duration_s": 0.0, "report": ""}


class Sandbox:
    """Base class of the backends: runs untrusted Python programs under `Limits`."""

    backend = "base"

    def __init__(self, limits: Limits | None = None) -> None:
        self.limits = limits or Limits()

    def run(
        self,
        code: str,
        *,
        stdin: str = "",
        files: dict[str, str | bytes] | None = None,
        limits: Limits | None = None,
    ) -> ExecutionResult:
        """Run `code` as a Python `__main__` program in a fresh, private working directory.

        `files` are written (relative paths) into that directory first; `limits` override the
        sandbox's own for this run.
        """
        raw = self._execute(self._job(code, stdin=stdin, files=files, limits=limits))
        return result_from_dict(raw)

    async def run_async(self, code: str, **kwargs: Any) -> ExecutionResult:
        """`run` for asyncio callers: runs in the default executor, never blocks the loop."""
        import asyncio  # lazily: `import sandbox` stays light

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(self.run, code, **kwargs))

    def _job(
        self,
        code: str,
        *,
        stdin: str = "",
        files: dict[str, str | bytes] | None = None,
        limits: Limits | None = None,
        secret: str | None = None,
    ) -> dict[str, Any]:
        """The job description the supervisor understands."""
        return make_job(code, limits or self.limits, stdin=stdin, files=files, secret=secret)

    def _execute(self, job: dict[str, Any]) -> dict[str, Any]:
        """Run one job dict; return the supervisor's result dict (with `report`)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release processes and containers; the sandbox cannot be used afterwards."""

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
