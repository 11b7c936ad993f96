"""sandbox: run untrusted (model-written) Python programs and tests. Imports nothing else of ours.

Threat model
------------
Every program is assumed hostile. Covered, on the local backend when run as root on Linux (the
default on our machines and in CI):

* Runaway time: a wall-clock limit kills the job's whole process tree with SIGKILL (sleeping,
  SIGTERM-ignoring, alarm-disabling and C-level hangs included), plus RLIMIT_CPU.
* Runaway resources: RLIMIT_AS / memory cgroup (memory bombs), pids cgroup and RLIMIT_NPROC (fork
  and thread bombs), RLIMIT_FSIZE and a size-capped private tmpfs (disk), RLIMIT_NOFILE, capped and
  truncated stdout/stderr (output floods), no core dumps.
* Escape and persistence: each job is pid 1 of a new pid namespace, so no process outlives it
  (daemons, double forks, `setsid` included); it runs in its own session under a non-root uid
  (unique per server) with `no_new_privs`; /tmp, /dev/shm, /var/tmp and its working directory are
  private tmpfs mounts that vanish with it; /proc shows only its own processes.
* Secrets: the environment is scrubbed; the server processes are started with a minimal
  environment; /root (and any other directory others cannot enter that holds the interpreter) is
  replaced by an empty tmpfs with only the interpreter bind-mounted read-only.
* Network: a new network namespace with no interface up (no loopback, no routes) unless
  `Limits(network=True)`.
* Test results (`run_tests`): a pass is reported out of band with a per-run random nonce on a
  private fd, never by exit status or output; builtins are restored before tests and after every
  call of the candidate; candidate results must be plain builtin values (no always-equal objects).

Not covered: kernel exploits and side channels (use the Docker backend or a VM for stronger walls);
world-readable host files stay readable (e.g. /etc, the repository); a candidate that deliberately
reverse-engineers the in-process test harness (walking interpreter frames or the heap to find the
nonce) can forge a test result. Without root the local backend degrades to rlimits, a new session,
a private temp dir and an environment scrub, and warns once, loudly (as root without namespaces, it
also ends and reaps every process of the job's uid before answering, as in Docker). The Docker backend runs the
same fork-server inside each warm container and adds the container boundary (`network_mode=none`,
read-only root, memory/CPU/pids limits set from the sandbox's limits, which bound per-run ones);
inside it, jobs run under a per-container uid, and after each job that uid's processes are killed
and reaped (the server is their subreaper) and its files removed; a result comes back only once
they are counted gone, so the next job never meets one. A persistent `PythonSession` is local-only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .session import PythonSession
from .testing import IOCase, TestOutcome, TestReport, TestSuite, default_sandbox, run_tests
from .types import ExecutionResult, Limits, Sandbox, Status

__all__ = [
    "ExecutionResult", "IOCase", "Limits", "PythonSession", "Sandbox", "Status", "TestOutcome",
    "TestReport", "TestSuite", "default_sandbox", "get_sandbox", "run_tests",
]

BACKENDS = ("local", "docker")


def get_sandbox(backend: str = "local", **options: Any) -> Sandbox:
    """Make a sandbox. Keyword arguments named like `Limits` fields set its default limits; the
    rest go to the backend (local: `workers`, `preload`, `python`; docker: `image`, `workers`)."""
    fields = {f.name for f in dataclasses.fields(Limits)}
    limits = Limits(**{k: v for k, v in options.items() if k in fields})
    rest = {k: v for k, v in options.items() if k not in fields}
    if backend == "local":
        from .local import LocalSandbox

        return LocalSandbox(limits, **rest)
    if backend == "docker":
        from .docker import DockerSandbox

        return DockerSandbox(limits, **rest)
    raise ValueError(f"unknown sandbox backend {backend!r}; valid: {', '.join(BACKENDS)}")
