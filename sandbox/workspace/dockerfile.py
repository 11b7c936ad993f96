"""A task environment's Dockerfile as build steps (``FROM``, ``WORKDIR``, ``COPY``, ``ENV``, ``RUN``).

The local backend runs the steps on its own tree (the base image's tools are the host's, read-only),
so it accepts only those five instructions and refuses any other in one line that names it and its
line. The Docker backend builds the Dockerfile itself; it uses the parsed ``FROM`` to know whether
the base image is here. ``$VAR``, ``${VAR}``, ``${VAR:-default}`` and ``${VAR:+alternative}`` expand
as Docker expands them, from earlier ``ENV`` lines over the base image's own (``BASE_ENV``: its
``PATH``, so ``ENV PATH=/opt/tool/bin:$PATH`` keeps the system's directories), in ``WORKDIR``,
``COPY`` and ``ENV``; ``COPY --chown``/``--chmod`` are accepted (everything in a workspace belongs to
its agent), ``COPY --from`` is refused.
"""

from __future__ import annotations

import glob
import io
import json
import os
import posixpath
import re
import shlex
import tarfile
from dataclasses import dataclass

from .base import BuildError, BuildStep

SUPPORTED = ("FROM", "WORKDIR", "COPY", "ENV", "RUN")
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
_VAR = re.compile(r"\$(?:\{(\w+)(?::([-+])([^}]*))?\}|(\w+))")
FETCHERS = re.compile(r"(?<![\w-])(apt-get|apt|apk|yum|dnf|pip3?|uv|npm|yarn|pnpm|curl|wget|git|cargo|go|gem)(?![\w-])")
"""Programs a RUN line uses to fetch from the network, which no workspace build has."""


def run_failed(where: str, command: str, output: str, code: int | None = None) -> str:
    """One line for a RUN step that failed: where, the exit status, what the network has to do with it when the
    command fetches (``apt-get install``, ``pip install``, ``curl``: builds here have no network), and the end of
    its output, cut at a line (never mid-word)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", output).strip()
    if len(text) > 400:
        tail = text[-400:]
        text = "... " + (tail.split("\n", 1)[1] if "\n" in tail[:-1] else tail.split(" ", 1)[-1])
    text = " | ".join(line.strip() for line in text.splitlines() if line.strip())  # one line
    status = f" (exit {code})" if code is not None else ""
    fetcher = FETCHERS.search(command)
    hint = (f"; `{fetcher[1]}` needs the network, which a workspace build does not have: install it in the FROM "
            f"image, or COPY the files in" if fetcher else "")
    return f"{where} failed{status}{hint}; its output ends: {text or '(none)'}"


@dataclass(frozen=True)
class Dockerfile:
    """What the build steps need: the base image, the steps, the final working directory and env."""

    base: str
    steps: tuple[BuildStep, ...]
    workdir: str
    env: tuple[tuple[str, str], ...]


def parse_dockerfile(text: str, name: str = "Dockerfile") -> Dockerfile:
    """Parse ``text``; a :class:`BuildError` names the first instruction it cannot run."""
    base, workdir, env, steps = "", "/", {}, []
    for lineno, instruction, rest in _instructions(text):
        where = f"{name} line {lineno}"
        if instruction not in SUPPORTED:
            raise BuildError(f"{where}: {instruction} is not supported by the local workspace backend "
                             f"(it runs {', '.join(SUPPORTED)}); use the docker backend for this task")
        if instruction == "FROM":
            base = rest.split()[0] if rest.split() else ""
        elif instruction == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, _expand(rest.strip(), env)))
            steps.append(BuildStep("workdir", (workdir,), lineno))
        elif instruction == "ENV":
            for key, value in _env_pairs(_expand(rest, env), where):
                env[key] = value
                steps.append(BuildStep("env", (key, value), lineno))
        elif instruction == "COPY":
            args = _words(rest)
            flags = [a for a in args if a.startswith("--")]
            if any(f.startswith("--from") for f in flags):
                raise BuildError(f"{where}: COPY --from (multi-stage builds) is not supported by the local backend")
            paths = [_expand(a, env) for a in args if not a.startswith("--")]
            if len(paths) < 2:
                raise BuildError(f"{where}: COPY needs a source and a destination")
            steps.append(BuildStep("copy", tuple(paths), lineno))
        else:
            command = " ".join(json.loads(rest)) if rest.lstrip().startswith("[") else rest
            steps.append(BuildStep("run", (command,), lineno))
    if not base:
        raise BuildError(f"{name}: no FROM line")
    return Dockerfile(base, tuple(steps), workdir, tuple(env.items()))


def _instructions(text: str) -> list[tuple[int, str, str]]:
    """(line number, INSTRUCTION, arguments) with continuations joined and comments dropped."""
    out, buf, start = [], "", 0
    for i, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if not buf:
            start = i
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        keyword, _, rest = buf.partition(" ")
        out.append((start, keyword.upper(), rest.strip()))
        buf = ""
    if buf:
        keyword, _, rest = buf.partition(" ")
        out.append((start, keyword.upper(), rest.strip()))
    return out


def _words(rest: str) -> list[str]:
    return json.loads(rest) if rest.lstrip().startswith("[") else shlex.split(rest)


def _expand(value: str, env: dict[str, str]) -> str:
    def one(m: re.Match) -> str:
        name, op, word = m.group(1) or m.group(4), m.group(2), m.group(3) or ""
        got = env[name] if name in env else BASE_ENV.get(name, "")
        if op == "-":
            return got or word
        if op == "+":
            return word if got else ""
        return got

    return _VAR.sub(one, value)


def _env_pairs(rest: str, where: str) -> list[tuple[str, str]]:
    words = shlex.split(rest)
    if words and "=" not in words[0]:  # ENV KEY value with spaces
        return [(words[0], rest.strip()[len(words[0]):].strip().strip('"'))]
    pairs = []
    for w in words:
        key, sep, value = w.partition("=")
        if not sep or not key:
            raise BuildError(f"{where}: ENV expects KEY=VALUE, got {w!r}")
        pairs.append((key, value))
    return pairs


def copy_archive(context: str | None, sources: list[str], dest: str, workdir: str) -> tuple[str, bytes]:
    """(directory to unpack in, tar) for ``COPY sources dest`` from the build ``context``, as Docker
    copies: a directory's contents, a file to ``dest`` or into it (``dest/`` or several sources)."""
    if context is None:
        raise BuildError("COPY needs a build context directory")
    root = os.path.realpath(context)
    target = posixpath.normpath(posixpath.join(workdir, dest))
    into_dir = dest.endswith("/") or len(sources) > 1
    matched: list[str] = []
    for src in sources:
        hits = sorted(glob.glob(os.path.join(root, src))) if any(c in src for c in "*?[") else \
            [os.path.join(root, src)]
        for hit in hits:
            real = os.path.realpath(hit)
            if real != root and not real.startswith(root + os.sep):
                raise BuildError(f"COPY {src}: outside the build context")
            if not os.path.lexists(hit):
                raise BuildError(f"COPY {src}: no such file in the build context {context}")
            matched.append(hit)
    if not matched:
        raise BuildError(f"COPY {' '.join(sources)}: nothing matched in the build context")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for hit in matched:
            if os.path.isdir(hit):
                for name in sorted(os.listdir(hit)):
                    tar.add(os.path.join(hit, name), arcname=name)
            elif into_dir or len(matched) > 1:
                tar.add(hit, arcname=os.path.basename(hit))
            else:
                tar.add(hit, arcname=posixpath.basename(target))
    single_file = len(matched) == 1 and not os.path.isdir(matched[0]) and not into_dir
    return (posixpath.dirname(target) if single_file else target), buf.getvalue()
