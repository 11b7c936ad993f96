"""The real projects RepoRepair-v0 breaks, pinned, and their shipped copies.

Each project is a permissively licensed, pure-Python PyPI package whose sdist holds its own test
suite, and that suite runs with the standard library alone (``python3 -m unittest``), so it runs in
a workspace's Python 3.11 with nothing installed. The build script downloads each sdist at its pinned
version, checks its SHA-256, and ships one copy: the package, the tests and the license, repacked
reproducibly into ``environments/data/repo_repair/projects/NAME-VERSION.tar.gz`` (the license is
also in ``licenses/``). Tasks are patches against these copies.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import itertools
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "repo_repair"
PYTHON = ("/usr/bin/python3", "-S")
"""The interpreter of the workspaces (the host's /usr), without site-packages: the suites see the
standard library only, as on either workspace backend, whatever Debian packages a host has."""


@dataclass(frozen=True)
class Project:
    """One pinned project: where its package, tests and license are inside the sdist."""

    name: str
    """The PyPI name (``pip download NAME==VERSION``)."""
    version: str
    sdist_sha256: str
    package: str
    """The package directory (relative to the project root): the files that get mutated."""
    source: str
    """The directory to put on ``sys.path`` (``.``, or ``src`` for a src layout)."""
    tests: str
    license: str
    license_name: str
    exclude: tuple[str, ...] = ()
    """Files of the package never mutated (data tables, test helpers, version strings)."""
    extra: tuple[str, ...] = ()
    """More of the sdist to ship (Markdown finds its own extensions through its egg-info's entry points)."""

    @property
    def key(self) -> str:
        return f"{self.name.lower()}-{self.version}"

    @property
    def archive(self) -> Path:
        return DATA_DIR / "projects" / f"{self.key}.tar.gz"

    def run_prefix(self) -> str:
        """How to run Python on the project from its root, as the instructions say it."""
        return "PYTHONPATH=src python3" if self.source != "." else "python3"


PROJECTS: dict[str, Project] = {p.name: p for p in (
    Project("cachetools", "5.5.0", "2cc24fb4cbe39633fb7badd9db9ca6295d766d9c2995f245725a46715d050f2a",
            "src/cachetools", "src", "tests", "LICENSE", "MIT"),
    Project("idna", "3.10", "12f65c9b470abda6dc35cf8e63cc574b1c52b11df2c86030af0ac09b01b13ea9",
            "idna", ".", "tests", "LICENSE.md", "BSD-3-Clause",
            exclude=("idna/idnadata.py", "idna/uts46data.py", "idna/package_data.py")),
    Project("Markdown", "3.7", "2ae2471477cfd02dbbf038d5d9bc226d40def84b4fe2986e49b59b6b472bbed2",
            "markdown", ".", "tests", "LICENSE.md", "BSD-3-Clause",
            exclude=("markdown/test_tools.py", "markdown/__meta__.py", "markdown/__main__.py"),
            extra=("Markdown.egg-info/",)),
    Project("more-itertools", "10.5.0", "5482bfef7849c25dc3c6dd53a6173ae4795da2a41a80faea6700d9f5846c5da6",
            "more_itertools", ".", "tests", "LICENSE", "MIT"),
)}


def suite_env() -> dict[str, str]:
    """A fixed environment for project code (hash seed, locale, time zone): the same run gives the same output."""
    return {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0", "LANG": "C.UTF-8", "TZ": "UTC", "HOME": "/tmp"}


PRISTINE_NS = 10**18  # the modification time of every unpacked file (2001-09-09)
_versions = itertools.count(1)


def mutated_ns() -> int:
    """A modification time no file of this process had before (whole seconds: a .pyc stores seconds)."""
    return PRISTINE_NS + next(_versions) * 10**9


def write_source(path: Path, text: str, mtime_ns: int = PRISTINE_NS) -> None:
    """Write a source file with the modification time ``mtime_ns``: a mutated file gets a time no other
    version of it had, so Python never loads a stale cached ``.pyc`` of another version (they can have
    the same size), while the unchanged files keep theirs."""
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(mtime_ns, mtime_ns))


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def repack(project: Project, sdist: Path) -> bytes:
    """The shipped copy of ``project`` from its sdist: package, tests and license, in a tar.gz that is
    the same bytes for the same sdist (sorted, owner root, time 0, modes 644/755)."""
    keep = (project.package + "/", project.tests + "/", project.license, *project.extra)
    members: list[tuple[str, bytes]] = []
    with tarfile.open(sdist) as src:
        for m in src.getmembers():
            rel = m.name.split("/", 1)[1] if "/" in m.name else ""
            if m.isfile() and rel.startswith(keep) and "__pycache__" not in rel and not rel.endswith(".pyc"):
                f = src.extractfile(m)
                members.append((rel, f.read() if f else b""))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, data in sorted(members):
            info = tarfile.TarInfo(rel)
            info.size, info.mtime, info.mode, info.uid, info.gid = len(data), 0, 0o644, 0, 0
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(buf.getvalue())
    return out.getvalue()


def project_files(project: Project) -> dict[str, bytes]:
    """The shipped copy of ``project``: relative path -> bytes."""
    with tarfile.open(project.archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def unpack(project: Project, dest: Path) -> Path:
    """Write the shipped copy of ``project`` under ``dest`` (the project root); returns ``dest``."""
    for rel, data in project_files(project).items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, ns=(PRISTINE_NS, PRISTINE_NS))
    return dest


def source_files(project: Project) -> list[str]:
    """The package's Python files that mutations may touch, sorted."""
    return sorted(rel for rel in project_files(project) if rel.startswith(project.package + "/")
                  and rel.endswith(".py") and rel not in project.exclude)
