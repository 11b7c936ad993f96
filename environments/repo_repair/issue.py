"""Issue texts for RepoRepair tasks: the failing behaviour and a reproduction, never the diff or the test.

:func:`reproduce` turns one of the tests a mutation breaks into a standalone script
(:mod:`.snippets`) and keeps it only when it passes on the pristine project and fails on the mutated
one; the mutated run's error is what the issue shows. :func:`issue_text` writes the issue around it.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import subprocess
import tempfile
from pathlib import Path

from environments.repo_repair.mutations import Mutation
from environments.repo_repair.projects import PYTHON, Project, mutated_ns, suite_env, write_source
from environments.repo_repair.snippets import reproduction

PROBE = Path(__file__).resolve().parent / "probe.py"
MAX_TRIES = 4
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")


def _env(root: Path, project: Project) -> dict[str, str]:
    return {**suite_env(), "PYTHONPATH": str(root / project.source)}


def _run(script: Path, root: Path, project: Project) -> tuple[int | None, str]:
    try:
        r = subprocess.run([*PYTHON, str(script)], cwd=root, capture_output=True, timeout=20, env=_env(root, project))
    except subprocess.TimeoutExpired:
        return None, ""
    return r.returncode, (r.stdout + r.stderr).decode("utf-8", "replace")


def reproduce(root: Path, project: Project, m: Mutation, failing: list[str]) -> tuple[str, str] | None:
    """(script, its output on the mutated project) from one of the ``failing`` tests, or None."""
    probe = subprocess.run([*PYTHON, str(PROBE), str(root), project.source, *failing[:30]], cwd=root,
                           capture_output=True, timeout=120, env=_env(root, project))
    try:
        described = json.loads(probe.stdout or b"{}")
    except json.JSONDecodeError:
        return None
    usable = sorted(((t, d) for t, d in described.items() if d), key=lambda td: (len(td[1]["source"]), td[0]))
    tests_package = project.tests.split("/")[0]
    path = root / m.file
    pristine = path.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="agentrl-repro-") as tmp:
        script_path = Path(tmp) / "repro.py"
        for _, d in usable[:MAX_TRIES]:
            script = reproduction(d, Path(d["file"]).read_text(encoding="utf-8"), tests_package)
            if script is None:
                continue
            script_path.write_text(script, encoding="utf-8")
            code, _ = _run(script_path, root, project)
            if code != 0:
                continue
            write_source(path, m.apply(pristine), mutated_ns())
            try:
                code, output = _run(script_path, root, project)
            finally:
                write_source(path, pristine)
            if code in (0, None) or _ADDRESS.search(output):
                continue
            output = output.replace(str(script_path), "repro.py").replace(str(root), "/app")
            return script, "\n".join(output.strip().splitlines()[-12:])
    return None


def api_name(script: str, package: str) -> str:
    """The first function or class of ``package`` the script calls, as ``module.name``."""
    tree = ast.parse(script)
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname or a.name: a.name for a in node.names if a.name.split(".")[0] == package})
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == package:
            aliases.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            text = ast.unparse(node.func)
            head = text.split(".")[0]
            if head in aliases:
                return aliases[head] + text[len(head):]
    return package


def issue_text(project: Project, m: Mutation, script: str, output: str) -> str:
    """The instruction: what fails, how to see it, what is expected (no diff, no test name)."""
    package = project.package.split("/")[-1]
    api = api_name(script, package)
    last = output.strip().splitlines()[-1] if output.strip() else "an error"
    error = last.split(":")[0].strip()
    wrong = error == "AssertionError"
    pick = int(hashlib.sha256(m.id.encode()).hexdigest(), 16)
    titles = ([f"`{api}` returns a wrong result", f"Wrong result from `{api}`", f"`{api}` gives an incorrect value"]
              if wrong else [f"`{api}` raises {error}", f"{error} from `{api}`", f"`{api}` fails with {error}"])
    opening = ["I ran into this with the code in this repository:", "This snippet misbehaves with the current code:",
               "Something is broken; here is a small reproduction:"]
    run = project.run_prefix()
    return (f"# {titles[pick % 3]}\n\n"
            f"{opening[(pick // 3) % 3]} {project.name} {project.version}, checked out in /app.\n\n"
            f"Save this as repro.py and run `{run} repro.py` from /app:\n\n```python\n{script.rstrip()}\n```\n\n"
            f"It fails with:\n\n```\n{output.rstrip()}\n```\n\n"
            f"Expected: the script runs without an error. Find the cause in the library's code and fix it. The tests "
            f"that check this behaviour are not in the repository; the project's other tests are in "
            f"{project.tests}/ (`{run} -m unittest discover -s {project.tests} -t .` runs them), and every test of the "
            f"project must pass after your fix.\n")
