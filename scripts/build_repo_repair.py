"""Build RepoRepair-v0's task set from pinned PyPI sdists (see environments/repo_repair/build.py).

    python scripts/build_repo_repair.py fetch      # download the pinned sdists (pip), check their SHA-256,
                                                   # write data/repo_repair/projects/*.tar.gz and licenses/
    python scripts/build_repo_repair.py build      # mutate, validate, write data/repo_repair/tasks.jsonl.gz
    python scripts/build_repo_repair.py check ID.. # rebuild shipped tasks by id and compare them row by row
    python scripts/build_repo_repair.py merge A B  # one task set from builds of disjoint projects run apart

``build`` takes ``--per-project N`` (tasks per project, default 100; ``--target NAME=N`` for one),
``--per-function`` (3), ``--seed`` (0) and ``--jobs``
(suites run at once, default 2); it needs only the shipped copies, so it runs offline. Every row is
reproducible: ``check`` rebuilds the named tasks from the shipped copies and exits 1 on any difference.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from environments.repo_repair.build import assign_splits, build_project  # noqa: E402
from environments.repo_repair.projects import DATA_DIR, PROJECTS, repack, sha256_file  # noqa: E402

TASKS = DATA_DIR / "tasks.jsonl.gz"
PINS = DATA_DIR / "projects.json"


def fetch(names: list[str]) -> None:
    """Download each pinned sdist with pip, check its hash, ship its package, tests and license."""
    (DATA_DIR / "projects").mkdir(parents=True, exist_ok=True)
    (DATA_DIR / "licenses").mkdir(parents=True, exist_ok=True)
    pins = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            p = PROJECTS[name]
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                            "-d", tmp, f"{p.name}=={p.version}"], check=True)
            sdist = next(f for f in Path(tmp).iterdir() if f.name.lower().startswith(p.key.replace("-", "_"))
                         or f.name.lower().startswith(p.key))
            got = sha256_file(sdist)
            if got != p.sdist_sha256:
                sys.exit(f"{sdist.name}: SHA-256 {got}, pinned {p.sdist_sha256}: refusing to build from it")
            p.archive.write_bytes(repack(p, sdist))
            with tempfile.TemporaryDirectory() as x:
                shutil.unpack_archive(sdist, x)
                top = next(Path(x).iterdir())
                shutil.copy(top / p.license, DATA_DIR / "licenses" / f"{p.key}-{p.license}")
            pins[p.name] = {"version": p.version, "sdist_sha256": p.sdist_sha256, "license": p.license_name,
                            "archive_sha256": sha256_file(p.archive)}
            print(f"{p.key}: {sdist.name} ok, shipped {p.archive.stat().st_size} bytes")
    old = json.loads(PINS.read_text()) if PINS.exists() else {}
    for name, pin in pins.items():
        pin["passing_tests"] = old.get(name, {}).get("passing_tests", [])
    PINS.write_text(json.dumps({**old, **pins}, indent=1, sort_keys=True) + "\n")


def build(names: list[str], targets: dict[str, int], per_function: int, seed: int, jobs: int, out: Path) -> None:
    start, rows = time.monotonic(), []
    for name in names:
        t = time.monotonic()
        got, passing = build_project(PROJECTS[name], seed, targets[name], per_function=per_function, jobs=jobs,
                                     log=lambda s: print(s, flush=True))
        pins = json.loads(PINS.read_text())
        pins[name]["passing_tests"] = passing  # what every task's verifier expects to pass
        PINS.write_text(json.dumps(pins, indent=1, sort_keys=True) + "\n")
        print(f"{name}: {len(got)} tasks in {time.monotonic() - t:.0f} s", flush=True)
        rows += got
    assign_splits(rows, seed)
    write_rows(rows, out)
    print(f"built in {time.monotonic() - start:.0f} s")


def merge(paths: list[Path], seed: int, out: Path) -> None:
    """The rows of several builds (of disjoint projects, e.g. run in parallel) as one task set: the same rows
    as one build of all of them (projects are built and split independently)."""
    rows = [r for p in paths for r in load_rows(p)]
    assign_splits(rows, seed)
    write_rows(rows, out)


def write_rows(rows: list[dict], out: Path) -> None:
    with gzip.GzipFile(out, "wb", mtime=0) as f:
        f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode())
    splits = {s: sum(r["split"] == s for r in rows) for s in ("train", "test")}
    print(f"{len(rows)} tasks ({splits}) -> {out}")


def load_rows(path: Path = TASKS) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def check(ids: list[str], seed: int) -> int:
    """Rebuild shipped rows by id; 0 when each comes out the same (its split is not rebuilt)."""
    shipped = {r["id"]: r for r in load_rows()}
    missing = [i for i in ids if i not in shipped]
    if missing:
        sys.exit(f"no shipped task {missing[0]}")
    bad = 0
    for name in sorted({shipped[i]["project"] for i in ids}):
        wanted = {shipped[i]["mutation"]: shipped[i] for i in ids if shipped[i]["project"] == name}
        rows, passing = build_project(PROJECTS[name], seed, len(wanted), per_function=10**6, jobs=1,
                                      only=set(wanted), log=lambda s: None)
        if passing != json.loads(PINS.read_text())[name]["passing_tests"]:
            print(f"{name}: the tests that pass on the pristine project differ from projects.json")
            bad += 1
        rebuilt = {r["mutation"]: r for r in rows}
        for mutation, row in wanted.items():
            new = rebuilt.get(mutation)
            same = new is not None and all(new[k] == row[k] for k in new if k != "split")
            print(f"{row['id']}: {'same' if same else 'DIFFERENT'}")
            bad += not same
    return 1 if bad else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("action", choices=["fetch", "build", "check", "merge"])
    p.add_argument("ids", nargs="*", help="check: task ids; merge: task files")
    p.add_argument("--projects", nargs="*", default=sorted(PROJECTS), help="default: all")
    p.add_argument("--per-project", type=int, default=100)
    p.add_argument("--target", action="append", default=[], metavar="NAME=N", help="tasks of one project")
    p.add_argument("--per-function", type=int, default=3, help="tasks per function at most")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", type=Path, default=TASKS)
    a = p.parse_args()
    unknown = sorted(set(a.projects) - set(PROJECTS))
    if unknown:
        sys.exit(f"unknown project {unknown[0]!r}; pinned: {', '.join(sorted(PROJECTS))}")
    if a.action == "fetch":
        fetch(a.projects)
    elif a.action == "build":
        targets = {name: a.per_project for name in a.projects}
        targets.update({k: int(v) for k, _, v in (t.partition("=") for t in a.target)})
        build(a.projects, targets, a.per_function, a.seed, a.jobs, a.out)
    elif a.action == "merge":
        merge([Path(x) for x in a.ids], a.seed, a.out)
    else:
        return check(a.ids, a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
