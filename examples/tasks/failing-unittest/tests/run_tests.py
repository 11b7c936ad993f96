"""Run the visible and the hidden tests in a child process, as the testee, and judge its report here.

This process (the verifier's own program, started from /tests: the grader) never imports the agent's
code. The child does: it reads a nonce from its standard input first, runs the tests with the standard
library first on the import path, then the tests, then /app (appended, so a module the agent leaves in
/app cannot shadow unittest or the tests), and writes the nonce and its result on a pipe of its own. A
child that exits early (os._exit(0) on import), crashes or hangs reports nothing: no test passed. Under
agentrl's grader the child cannot write the reward or signal this process, and whatever it leaves
running is ended before the verdict.
"""
import os
import select
import signal
import subprocess
import sys
import time

EXPECTED = 7  # the visible tests and the hidden ones
CHILD = r"""
import io, json, os, re, sys
nonce = sys.stdin.readline().strip()
sys.path.append("/tests")
sys.path.append("/app")
import unittest
report = io.StringIO()
result = unittest.TextTestRunner(stream=report, verbosity=2).run(
    unittest.defaultTestLoader.loadTestsFromNames(["test_stock", "test_hidden"]))
print(re.sub(r"(Ran \d+ tests?) in [\d.]+s", r"\1", report.getvalue()))  # the same output for the same code
passed = result.testsRun - len(result.failures) - len(result.errors) - len(result.skipped)
os.write(int(os.environ["REPORT_FD"]), f"{nonce} {passed} {result.testsRun}".encode())
"""


def main() -> int:
    nonce = os.urandom(16).hex()
    r, w = os.pipe()
    child = subprocess.Popen([sys.executable, "-I", "-c", CHILD], cwd="/tmp", stdin=subprocess.PIPE,
                             env={**os.environ, "REPORT_FD": str(w)}, pass_fds=(w,), start_new_session=True)
    os.close(w)
    child.stdin.write(f"{nonce}\n".encode())
    child.stdin.close()
    deadline, said = time.monotonic() + 60, b""
    while child.poll() is None and time.monotonic() < deadline:
        if select.select([r], [], [], 0.05)[0]:
            said += os.read(r, 4096) or b""
    while select.select([r], [], [], 0.05)[0] and len(said) < 4096:  # what it wrote as it exited
        chunk = os.read(r, 4096)
        if not chunk:
            break
        said += chunk
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except ProcessLookupError:  # it and its group are gone
        pass
    if "AGENTRL_TESTEE" in os.environ:  # agentrl's grader: end every process of the testee (kill runs as it)
        subprocess.run(["kill", "-9", "-1"], stderr=subprocess.DEVNULL)
    words = said.decode("utf-8", "replace").split()
    ok = len(words) == 3 and words[0] == nonce and words[1] == words[2] == str(EXPECTED)
    print("all tests pass" if ok else f"not every test passed (report: {' '.join(words[1:]) or 'none'})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
