"""The verifier's environment in a grading workspace (``_ws_grade``'s **The environment**): nothing in it
comes from what the agent wrote.

``HOME`` is a fresh directory outside the tree; ``PATH`` and the interpreters' search paths keep only
directories that no one but root could ever have written; git reads no global configuration and every
setting or driver (filter, diff, merge) that could run a program of the agent's choosing is overridden;
links from the tree into the grader's directories are removed before the verifier runs.

Standard library only, imported before the root pivots.
"""

from __future__ import annotations

import os
import re
import stat

from _ws_tree import walk  # type: ignore[import-not-found]

GRADER_DIR = "/run/agentrl-grader"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GIT_SAFE = {  # git settings that would run a program of the agent's choosing, made harmless
    "core.fsmonitor": "false", "core.hooksPath": "/dev/null", "core.pager": "cat", "core.editor": "true",
    "core.sshCommand": "false", "core.askPass": "true", "core.gitProxy": "", "sequence.editor": "true",
    "diff.external": "", "log.showSignature": "false", "gpg.program": "false", "gpg.ssh.program": "false",
    "gpg.x509.program": "false", "credential.helper": "", "core.alternateRefsCommand": "",
    "uploadpack.packObjectsHook": "", "protocol.allow": "never", "core.attributesFile": "/dev/null",
}
DROPPED = ("BASH_ENV", "ENV", "HOME", "TMPDIR", "CDPATH", "GLOBIGNORE", "SHELLOPTS", "BASHOPTS", "PS4",
           "PROMPT_COMMAND", "PYTHONSTARTUP", "PYTHONINSPECT", "PERL5OPT", "RUBYOPT", "NODE_OPTIONS")
SEARCH_PATHS = ("LD_LIBRARY_PATH", "PYTHONHOME", "PERL5LIB", "PERLLIB", "RUBYLIB", "NODE_PATH")
EXT_DIFF = f"{GRADER_DIR}/ext-diff"  # what a diff driver's external command becomes: a plain diff
DRIVER_SAFE = {("filter", "clean"): "", ("filter", "smudge"): "", ("filter", "process"): "",
               ("diff", "textconv"): "cat", ("diff", "command"): EXT_DIFF, ("merge", "driver"): "false"}


def environment(base: dict[str, str], testee: int, drivers: set[tuple[str, str]]) -> dict[str, str]:
    """The verifier's environment from the workspace's (the image's and the task's variables) and the
    git drivers the tree names: see the module docstring."""
    env = {k: v for k, v in base.items() if not k.startswith(("LD_", "GIT_CONFIG", "BASH_FUNC_"))
           and k not in DROPPED}
    env["PATH"] = secure_path(base.get("PATH", SYSTEM_PATH)) or SYSTEM_PATH
    for key in SEARCH_PATHS:  # where interpreters load code from: root's directories only
        kept = secure_path(base.get(key, ""))
        env.pop(key, None)
        if kept:
            env[key] = kept
    env.update(HOME=f"{GRADER_DIR}/home", BASH_ENV=f"{GRADER_DIR}/probe.sh", GIT_CONFIG_GLOBAL="/dev/null",
               GIT_TERMINAL_PROMPT="0", LD_PRELOAD=f"{GRADER_DIR}/testee.so", AGENTRL_TESTEE=f"{testee}:{testee}")
    safe = dict(GIT_SAFE)
    for section, name in drivers:
        for (sec, key), value in DRIVER_SAFE.items():
            if sec == section:
                safe[f"{section}.{name}.{key}"] = value
    env["GIT_CONFIG_COUNT"] = str(len(safe))
    for i, (key, value) in enumerate(sorted(safe.items())):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    return env


def secure_path(value: str) -> str:
    """The directories of a ``:``-separated list that no one but root could ever have written: absolute,
    and every directory from ``/`` down (links resolved too) root's and not writable by group or
    others."""
    return ":".join(d for d in dict.fromkeys(value.split(":")) if d.startswith("/") and _root_only(d))


def _root_only(path: str) -> bool:
    for p in (os.path.normpath(path), os.path.realpath(path)):
        parts = p.strip("/").split("/") if p != "/" else []
        for i in range(len(parts) + 1):
            try:
                st = os.lstat("/" + "/".join(parts[:i]))
            except OSError:
                return False
            if st.st_uid != 0 or (st.st_mode & 0o022 and not stat.S_ISLNK(st.st_mode)):
                return False
    return os.path.isdir(path)


_SECTION = re.compile(r'^\s*\[\s*(filter|diff|merge)\s+"((?:[^"\\]|\\.)*)"\s*\]', re.M)
_INCLUDE = re.compile(r"^\s*path\s*=\s*(.+?)\s*$", re.M)
_ATTRIBUTE = re.compile(r"(?:^|\s)(filter|diff|merge)=(\S+)")


def scan_tree(roots: list[str], limit: int = 2000) -> tuple[set[tuple[str, str]], int]:
    """One walk of the tree before the verifier runs: (the git drivers to override, see
    :func:`git_drivers`; how many links into the grader's directories were removed). A link whose
    target, read as written, lies under ``/tests``, ``/logs/verifier``, ``/run`` or ``/proc`` is
    removed: the tests do not exist while the agent works, so no honest tree holds one, and through
    it a verifier would compare the expected output with itself."""
    found: set[tuple[str, str]] = set()
    configs: list[str] = []
    removed = 0
    for path, st in walk(roots):
        name = os.path.basename(path)
        if stat.S_ISLNK(st.st_mode):
            removed += _remove_grader_link(path)
            continue
        if not stat.S_ISREG(st.st_mode) or st.st_size > (1 << 20):
            continue
        if name in (".gitattributes", "attributes"):
            found.update(_matches(path, _ATTRIBUTE))
        elif name == "config" and "/.git/" in path or name == ".gitconfig":
            configs.append(path)
        elif name == ".git":  # a worktree's or submodule's pointer: its configuration lives at gitdir
            configs += [os.path.join(os.path.dirname(path), m[1], "config") for m in _matches(path, _GITDIR, 0)]
        if len(configs) > limit:
            break
    return git_drivers(found, configs, limit), removed


GRADER_PREFIXES = ("/tests", "/logs/verifier", "/run", "/proc")
_GITDIR = re.compile(r"^\s*gitdir:\s*(.+?)\s*$", re.M)


def _remove_grader_link(path: str) -> int:
    try:
        target = os.path.normpath(os.path.join(os.path.dirname(path), os.readlink(path)))
        if any(target == p or target.startswith(p + "/") for p in GRADER_PREFIXES):
            os.unlink(path)
            return 1
    except OSError:
        pass
    return 0


def git_drivers(found: set[tuple[str, str]], configs: list[str], limit: int) -> set[tuple[str, str]]:
    """(section, name) of every filter, diff and merge driver that the tree's git configurations (and
    the files they include) define, with those its attribute files select (``found``): any of them
    could name a program, and each is overridden."""
    seen: set[str] = set()
    while configs and len(seen) < limit:
        path = configs.pop()
        if path in seen or not os.path.isfile(path) or os.path.getsize(path) > (1 << 20):
            continue
        seen.add(path)
        found.update(_matches(path, _SECTION))
        for m in _matches(path, _INCLUDE, group=0):  # [include] and [includeIf] paths, relative or not
            configs.append(os.path.realpath(os.path.join(os.path.dirname(path), m[1].strip('"'))))
    return {(s, n) for s, n in found if n and "=" not in n and len(n) < 200}


def _matches(path: str, pattern: re.Pattern, group: int = 1) -> list[tuple[str, str]]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return []
    if group == 0:
        return [("", m.group(1)) for m in pattern.finditer(text)]
    return [(m.group(1), m.group(2)) for m in pattern.finditer(text)]
