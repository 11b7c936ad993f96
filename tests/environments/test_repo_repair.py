"""``agentrl/RepoRepair-v0``: the shipped task set (>= 300 tasks, >= 3 pinned projects with their licenses,
splits by file), a sample of tasks through the conformance suite in real workspaces (the oracle's edit
1.0; a no-op, random text and a destructive agent 0.0; the same seed the same task), hidden tests, and
the build script reproducing shipped rows from the pinned copies."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from wscheck import leftovers

import agentrl
from agentrl.env import EnvError
from environments.repo_repair.env import RepoRepairEnv, _patched, load_rows
from environments.repo_repair.mutations import find_mutations
from environments.repo_repair.projects import DATA_DIR, PROJECTS, project_files, sha256_file
from environments.tool_parsers import render_calls

ROOT = Path(__file__).resolve().parents[2]
ROWS = load_rows()


@pytest.fixture(scope="module", autouse=True)
def no_workspace_left():
    yield
    assert not leftovers()


def test_task_set_size_projects_licenses_and_pins() -> None:
    assert len(ROWS) >= 300
    per_project = Counter(r["project"] for r in ROWS)
    assert len(per_project) >= 3 and all(n >= 10 for n in per_project.values()), per_project
    pins = json.loads((DATA_DIR / "projects.json").read_text())
    for name, p in PROJECTS.items():
        assert (DATA_DIR / "licenses" / f"{p.key}-{p.license}").read_text().strip()
        assert pins[name]["sdist_sha256"] == p.sdist_sha256 and pins[name]["version"] == p.version
        assert sha256_file(p.archive) == pins[name]["archive_sha256"]  # the shipped copy is the pinned one
        assert pins[name]["passing_tests"], name
    kinds = Counter(r["kind"] for r in ROWS)
    assert len(kinds) >= 6, kinds
    assert len({r["id"] for r in ROWS}) == len(ROWS)


def test_no_test_split_file_is_trained_on() -> None:
    files = defaultdict(set)
    for r in ROWS:
        files[r["split"]].add((r["project"], r["file"]))
    assert files["test"] and files["train"]
    assert not files["test"] & files["train"]
    share = sum(r["split"] == "test" for r in ROWS) / len(ROWS)
    assert 0.08 <= share <= 0.4, share


def test_shipped_data_is_small() -> None:
    """One copy of each project and a patch per task: well under a few MB."""
    total = sum(f.stat().st_size for f in DATA_DIR.rglob("*") if f.is_file())
    assert total < 4 * 2**20, total
    assert all(r["patch"].count("\n+++ ") == 1 and r["patch"].startswith("--- a/") for r in ROWS)


def test_instructions_read_like_issues_and_hide_the_tests_and_the_diff() -> None:
    for r in ROWS:
        text = r["instruction"]
        assert text.startswith("# ") and "```python" in text and "/app" in text
        for test_id in r["fail_to_pass"]:
            method = test_id.rsplit(".", 1)[-1]
            if method.startswith("test"):
                assert method not in text, (r["id"], method)
        for module in r["hidden_tests"]:
            assert Path(module).stem not in text, (r["id"], module)
        removed = [ln[1:] for ln in r["patch"].splitlines() if ln.startswith("-") and not ln.startswith("---")]
        added = [ln[1:] for ln in r["patch"].splitlines() if ln.startswith("+") and not ln.startswith("+++")]
        assert not (removed and added and all(ln in text for ln in removed) and all(ln in text for ln in added))


def test_every_patch_is_a_mutation_the_finder_makes() -> None:
    """Each shipped patch applies to its pinned file and is one of the file's mutation sites."""
    found: dict[tuple[str, str], dict] = {}
    checked = 0
    for r in ROWS:
        key = (r["project"], r["file"])
        if key not in found:
            source = project_files(PROJECTS[r["project"]])[r["file"]].decode()
            if len(source) > 15_000:  # the sites of a large file take seconds to minutes (the slow tier's check)
                continue
            found[key] = {m.id: m for m in find_mutations(source, r["file"])}
        m = found[key][r["mutation"]]
        assert m.kind == r["kind"] and m.line == r["line"]
        checked += 1
    assert checked >= 30 and len({p for p, _ in found}) >= 2, (checked, found.keys())


@pytest.fixture(scope="module")
def env():
    e = agentrl.make("agentrl/RepoRepair-v0", split="all", projects=["cachetools"])
    yield e
    e.close()


def test_a_sample_passes_the_conformance_suite(env: RepoRepairEnv) -> None:
    """Cachetools (its suite runs in ~1 s): the oracle's str_replace 1.0; no-op, random text and deleting the
    broken code 0.0 — a changed tree graded by the project's whole suite in a fresh workspace; the untouched
    tree scores ``unchanged_reward`` without the suite, and the suite agrees (run with it off)."""
    for task in env.tasks[:2]:
        env.reset(options={"task": task})
        _, reward, terminated, _, info = env.step(env.reference_answer(task))
        assert reward == 1.0 and terminated, info["trajectory_info"]["verifier"]
        row = env.rows[task.id]
        wreck = render_calls("hermes", [("bash", {"command": f"rm -f {row['file']}"}), ("submit", {})])
        for action in ["", env.action_space.sample()[:300], wreck]:
            env.reset(options={"task": task})
            _, reward, *_, info = env.step(action)
            assert reward == 0.0, (task.id, action[:80])
            graded = not info["trajectory_info"]["verifier"]["output"].startswith("not graded")
            assert graded == (action == wreck), info["trajectory_info"]["verifier"]
    env.unchanged_reward = None  # this instance only: the suite itself on the untouched tree
    try:
        env.reset(options={"task": env.tasks[0]})
        _, reward, *_, info = env.step("")
        assert reward == 0.0 and "NOT PASSING" in info["trajectory_info"]["verifier"]["output"]
    finally:
        del env.unchanged_reward


def test_same_seed_same_task(env: RepoRepairEnv) -> None:
    other = agentrl.make("agentrl/RepoRepair-v0", split="all", projects=["cachetools"])
    assert [env.reset(seed=s)[1]["task_id"] for s in range(5)] == [other.reset(seed=s)[1]["task_id"] for s in range(5)]
    other.close()


def test_the_agent_never_sees_the_failing_tests(env: RepoRepairEnv, tmp_path) -> None:
    task = env.tasks[0]
    row = env.rows[task.id]
    out = env.export_task(task, tmp_path / "t")
    repo = out / "environment" / "repo"
    assert row["hidden_tests"] and not any((repo / h).exists() for h in row["hidden_tests"])
    assert all((out / "tests" / "suite" / Path(h).relative_to("tests")).exists() for h in row["hidden_tests"])
    pristine = project_files(PROJECTS[row["project"]])[row["file"]].decode()
    assert (repo / row["file"]).read_text() != pristine  # the bug is in the agent's tree
    assert _patched(env.pristine(PROJECTS[row["project"]]) / row["file"], row["patch"]) == \
        (repo / row["file"]).read_text()
    assert "patch -p1 -R" in (out / "solution" / "solve.sh").read_text()


def test_bad_kwargs() -> None:
    with pytest.raises(EnvError, match="unknown split"):
        RepoRepairEnv(split="dev")
    with pytest.raises(EnvError, match="unknown project 'numpy'"):
        RepoRepairEnv(projects=["numpy"])


@pytest.mark.slow
@pytest.mark.parametrize("project", sorted(PROJECTS))
def test_each_project_passes_the_conformance_suite(project: str) -> None:
    e = agentrl.make("agentrl/RepoRepair-v0", split="all", projects=[project])
    try:
        for task in e.tasks[:1] + e.tasks[-1:]:
            e.reset(options={"task": task})
            assert e.step(e.reference_answer(task))[1] == 1.0, task.id
            e.reset(options={"task": task})
            assert e.step("I cannot fix this.")[1] == 0.0, task.id
    finally:
        e.close()


@pytest.mark.slow
def test_the_build_script_reproduces_shipped_tasks() -> None:
    """Rebuilt from the pinned copies (baseline, validation, reproduction, issue text), shipped rows come out
    byte-identical (the cachetools ones: its suite is the fastest)."""
    ids = sorted(r["id"] for r in ROWS if r["project"] == "cachetools")[:3]
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "build_repo_repair.py"), "check", *ids],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count(": same") == len(ids)

