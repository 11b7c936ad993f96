"""The grader's exec hook (``sandbox/_runtime/_testee.c`` and ``_testee_files.c``), compiled once per machine
and cached.

Grading loads it into the verifier's shell (:mod:`sandbox.workspace.grading`): every program the
shell starts runs as the testee. It is C because the switch must happen inside bash, between fork
and exec; it links no libc (``-nostdlib``), so one build serves glibc and musl task images of this
machine's architecture. Built with the machine's C compiler (``cc``, ``gcc`` or ``clang``) into
``$AGENTRL_CACHE/sandbox`` (default ``~/.cache/agentrl/sandbox``), keyed by a hash of the source
and the architecture; a machine without a compiler cannot grade and says so in one line.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading

from .base import WorkspaceError

RUNTIME = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_runtime")
SOURCES = tuple(os.path.join(RUNTIME, name) for name in ("_testee.c", "_testee_files.c"))
HEADER = os.path.join(RUNTIME, "_testee.h")
FLAGS = ("-shared", "-fPIC", "-nostdlib", "-O2", "-fno-stack-protector", "-Wall")
_lock = threading.Lock()
_cached: bytes | None = None


def cache_dir() -> str:
    base = os.environ.get("AGENTRL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "agentrl")
    return os.path.join(base, "sandbox")


def hook_bytes() -> bytes:
    """The compiled hook (built on first use, then read from the cache)."""
    global _cached
    with _lock:
        if _cached is None:
            _cached = _build()
        return _cached


def _build() -> bytes:
    h = hashlib.sha256(platform.machine().encode() + " ".join(FLAGS).encode())
    for name in (*SOURCES, HEADER):
        with open(name, "rb") as f:
            h.update(f.read())
    key = h.hexdigest()[:16]
    path = os.path.join(cache_dir(), f"testee-{platform.machine()}-{key}.so")
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return f.read()
    compiler = next((c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)
    if compiler is None:
        raise WorkspaceError("grading needs a C compiler (cc, gcc or clang) once, to build the exec hook that "
                             "runs the verifier's programs as the testee; install one (Debian: apt-get install gcc)")
    os.makedirs(cache_dir(), exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        out = os.path.join(tmp, "testee.so")
        r = subprocess.run([compiler, *FLAGS, "-o", out, *SOURCES], capture_output=True, text=True)
        if r.returncode != 0:
            raise WorkspaceError(f"building the grader's exec hook failed: {(r.stderr or r.stdout).strip()[-400:]}")
        os.replace(out, path)  # atomic: a concurrent builder's copy is the same bytes
    with open(path, "rb") as f:
        return f.read()
