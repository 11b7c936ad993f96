"""A workspace runtime's shell (``Shell``, a base of ``_workspace.Runtime``).

One ``bash`` with job control on (``set -m``: every command runs in its own process group), started with
the first command (a grading workspace never starts one), reading commands from a pipe, its stdout and
stderr one stream. A command is wrapped so that it cannot read the protocol (stdin is ``/dev/null``), a
syntax error is its own (``eval``), and it ends with a line holding a per-command random marker, its exit
status and working directory; after each command the working directory and exported variables are saved.
A command past its timeout: the process groups it started are SIGKILLed (its background jobs too) and so
is the shell (the rest of the command line must not run on), and a new shell starts in the saved
directory with the saved variables; a shell that exited (``exit``) is replaced the same way. Background
jobs of earlier commands keep running through both.

Standard library only, imported before the root pivots (``_workspace``).
"""

from __future__ import annotations

import os
import re
import select
import shlex
import signal
import time

from _ws_common import Capture, processes, reap_children  # type: ignore[import-not-found]

STATE = "/run/agentrl"
"""The runtime's own directory in the workspace: the shell's saved variables (``env``)."""
HARNESS_EVAL = re.compile(r"^(\S*bash): eval: line (\d+):", re.M)
"""The ``eval`` that runs each command names itself in bash's errors, with the shell's input line: the agent sees
``bash: line N:`` with N the line of its own command, as ``bash -c`` would say."""


class Shell:
    """The shell's half of a runtime: the runtime sets ``cwd``, ``workdir``, ``env``, ``keep``, ``limits``,
    ``pending``, ``sealed`` and ``shell_pid``/``shell_in``/``shell_out`` (-1 without a shell) and gives
    ``as_agent`` (a forked child made the agent)."""

    cwd: str
    workdir: str
    env: dict
    keep: set
    limits: dict
    pending: Capture
    sealed: bool
    shell_pid: int
    shell_in: int
    shell_out: int

    def start_shell(self, restore: bool) -> None:
        r_in, w_in = os.pipe()
        r_out, w_out = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                self.as_agent()
                os.dup2(r_in, 0)
                os.dup2(w_out, 1)
                os.dup2(w_out, 2)
                os.closerange(3, 1 << 16)
                for d in (self.cwd if restore else self.workdir, self.workdir, "/"):
                    try:
                        os.chdir(d)
                        break
                    except OSError:
                        continue
                os.execve("/bin/bash", ["bash", "--norc", "--noprofile"], self.env)
            finally:
                os._exit(127)
        os.close(r_in)
        os.close(w_out)
        self.shell_pid, self.shell_in, self.shell_out = pid, w_in, r_out
        setup = "set -m 2>/dev/null; unset HISTFILE\n"
        if restore:
            setup += f". {STATE}/env 2>/dev/null; cd {shlex.quote(self.cwd)} 2>/dev/null\n"
        self.send(setup)

    def send(self, text: str) -> None:
        view = memoryview(text.encode())
        try:
            while view:
                view = view[os.write(self.shell_in, view):]
        except BrokenPipeError:
            pass  # the shell is gone: the command's marker never comes and the shell restarts

    def stop_shell(self) -> None:
        if self.shell_pid > 0:
            try:
                os.killpg(self.shell_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for fd in (self.shell_in, self.shell_out):
                os.close(fd)
            self.reap()
            self.shell_pid = self.shell_in = self.shell_out = -1

    reap = staticmethod(reap_children)

    def drain(self) -> None:
        """Output of background jobs between commands (it leads the next command's output)."""
        while self.shell_out >= 0 and select.select([self.shell_out], [], [], 0)[0]:
            data = os.read(self.shell_out, 65536)
            if not data:
                return
            self.pending.add(data)

    def exec(self, command: str, timeout_s: float) -> dict:
        if self.sealed:
            return {"error": "the workspace is sealed: its processes ended for grading"}
        if self.shell_pid < 0:  # started on the first command (after a restore: afresh)
            self.start_shell(restore=False)
        self.drain()
        cap, self.pending = self.pending, Capture(int(self.limits["max_output_bytes"]))
        nonce = os.urandom(12).hex()
        before = set(processes().values())
        self.send(f"IFS= read -r -d '' __agentrl_cmd <<'AGENTRL_{nonce}'\n{command}\nAGENTRL_{nonce}\n"
                  f"__agentrl_line=$LINENO; eval \"$__agentrl_cmd\" < /dev/null\n__agentrl_rc=$?\n"
                  f"export -p 2>/dev/null > {STATE}/env\n"
                  f"printf '\\n{nonce} %d %d %s\\n' \"$__agentrl_rc\" \"$__agentrl_line\" \"$PWD\"\n")
        start = time.monotonic()
        found = self.read_until(cap, nonce.encode(), start + timeout_s)
        timed_out = found is None and time.monotonic() >= start + timeout_s  # else: the shell's output ended
        if found is None:  # past its timeout, or the shell exited (``exit``): a new shell, the saved state
            if timed_out:  # the shell first: the rest of the command line must not run on
                os.kill(self.shell_pid, signal.SIGKILL)
                self.kill_new_groups(before)
            self.read_until(cap, b"", time.monotonic() + 0.2)  # what the killed command printed last
            self.stop_shell()
            self.start_shell(restore=True)
            code, cut = None, 0
        else:
            code, cut, self.cwd, base = found
        output, truncated = cap.result(cut)
        if found is not None:  # bash numbers the eval's lines from the shell's input: the command's own instead
            output = HARNESS_EVAL.sub(lambda m: f"{m[1]}: line {max(1, int(m[2]) - base + 1)}:", output)
        return {"exit_code": code, "output": output, "timed_out": timed_out, "truncated": truncated,
                "duration_s": time.monotonic() - start, "shell_restarted": found is None and not timed_out}

    def read_until(self, cap: Capture, nonce: bytes, deadline: float) -> tuple[int, int, str, int] | None:
        """Read the shell's output into ``cap`` until the marker line: (status, its length, cwd, the shell's
        input line of the command's ``eval``)."""
        while True:
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                return None
            if not select.select([self.shell_out], [], [], min(timeout, 0.5))[0]:
                self.reap()
                continue
            data = os.read(self.shell_out, 65536)
            if not data:
                return None
            cap.add(data)
            if not nonce:
                continue
            tail = cap.last(8192)
            at = tail.rfind(b"\n" + nonce + b" ")
            if at >= 0 and tail.endswith(b"\n"):
                _, status, line, cwd = (tail[at + 1:-1].decode("utf-8", "replace").split(" ", 3) + [""])[:4]
                return int(status), len(tail) - at, cwd or self.cwd, int(line or 1)

    def kill_new_groups(self, before: set[int]) -> None:
        """SIGKILL every process group that appeared since the command started (not the shell's)."""
        for _ in range(100):
            groups = {g for p, g in processes().items() if p not in self.keep} - before - {self.shell_pid, 0}
            if not groups:
                return
            for g in groups:
                try:
                    os.killpg(g, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.01)
            self.reap()
