"""The Terminal-v0 verifier: check a final tree against a task's checks (standard library only).

This file is the task's grader twice over: the env copies it, unchanged, into every task's
``tests/`` as ``check.py`` (``tests/test.sh`` runs ``python3 -I -S /tests/check.py /tests/spec.json`` in a
fresh workspace holding the agent's final tree), and exported Harbor tasks carry the same copy. It
never looks at the transcript: only at the files under the task's working directory.

``spec.json`` is ``{"workdir": "/app", "checks": [CHECK, ...]}``; every check must hold (reward 1,
else 0). A check is a dict with ``kind`` and its fields (paths are relative to ``workdir``):

- ``text`` (``path``, ``text``): a regular file (not a link) whose text equals ``text``, trailing
  spaces of each line and blank lines at the end ignored (``echo 5 > answer.txt`` writes ``5\\n``);
- ``lines`` (``path``, ``lines``): a regular file whose non-empty lines, trailing spaces stripped,
  are exactly ``lines`` in order;
- ``sha256`` (``path``, ``sha256``): a regular file with exactly these bytes;
- ``absent`` (``path``): nothing at ``path``;
- ``files`` (``dir``, ``names``): the regular files under ``dir`` (recursively, relative paths,
  links and other kinds count as wrong) are exactly ``names``;
- ``json`` (``path``, ``value``): a regular file holding valid JSON equal to ``value``;
- ``executable`` (``path``, ``value``): the file's owner-execute bit is ``value``;
- ``tar`` (``path``, ``members``): a tar archive (any compression) whose regular files are exactly
  ``members`` (name -> sha256; a leading ``./`` is ignored), and no link or device member;
- ``command`` (``command``, ``stdout``, optional ``files``): first write ``files`` (relative path ->
  text: fresh inputs the agent never saw, so a script that prints a memorised answer fails), then
  run ``command`` with bash in ``workdir`` (10 s): it must exit 0 and print ``stdout`` (compared as
  ``text``). The command runs the agent's script, so it runs as the testee, never in this process
  (``testee.py``, copied beside this file: under agentrl's grader it can neither write the reward
  nor signal this checker, and whatever it leaves running is ended before the next check).
"""

from __future__ import annotations

import os
import stat
import sys

_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_SPACE = " \t\n\r"
_NUMBER = set("+-0123456789.eE")


def load_spec(path: str) -> dict:
    """``spec.json``, parsed without importing ``json`` (which imports ``re``: ~8 ms of a ~20 ms check):
    what ``json.dumps`` writes (objects, arrays, strings with any escape, numbers, true/false/null) is
    read here; anything this reader does not take is left to ``json.loads``."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        value, end = _value(text, 0)
        if text[end:].strip(_SPACE):
            raise ValueError("text after the value")
        return value
    except (ValueError, IndexError, KeyError):
        import json

        return json.loads(text)


def _value(s: str, i: int) -> tuple:  # noqa: C901 - one branch per JSON kind
    """The JSON value starting at ``s[i]`` (after any spaces) and the index after it."""
    while s[i] in _SPACE:
        i += 1
    c = s[i]
    if c == '"':
        return _string(s, i + 1)
    if c in "{[":
        out, close, i = ({} if c == "{" else []), "}" if c == "{" else "]", i + 1
        while s[i] in _SPACE:
            i += 1
        if s[i] == close:
            return out, i + 1
        while True:
            if close == "}":
                while s[i] in _SPACE:
                    i += 1
                if s[i] != '"':
                    raise ValueError("a key must be a string")
                key, i = _string(s, i + 1)
                while s[i] in _SPACE:
                    i += 1
                if s[i] != ":":
                    raise ValueError("':' expected")
                out[key], i = _value(s, i + 1)
            else:
                item, i = _value(s, i)
                out.append(item)
            while s[i] in _SPACE:
                i += 1
            if s[i] == close:
                return out, i + 1
            if s[i] != ",":
                raise ValueError("',' expected")
            i += 1
    for word, literal in (("true", True), ("false", False), ("null", None)):
        if s.startswith(word, i):
            return literal, i + len(word)
    j = i
    while j < len(s) and s[j] in _NUMBER:
        j += 1
    number = s[i:j]
    if not number or number[0] == "+":
        raise ValueError("a value expected")
    return (float(number) if any(ch in number for ch in ".eE") else int(number)), j


def _string(s: str, i: int) -> tuple[str, int]:
    """The string whose text starts at ``s[i]`` (after its opening quote) and the index after it."""
    parts = []
    quote = s.index('"', i)
    while True:
        esc = s.find("\\", i, quote)
        if esc < 0:
            parts.append(s[i:quote])
            return "".join(parts), quote + 1
        parts.append(s[i:esc])
        kind = s[esc + 1]
        if kind == "u":
            code, i = int(s[esc + 2:esc + 6], 16), esc + 6
            if 0xD800 <= code < 0xDC00 and s.startswith("\\u", i):  # a surrogate pair
                low = int(s[i + 2:i + 6], 16)
                if 0xDC00 <= low < 0xE000:
                    code, i = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00), i + 6
            parts.append(chr(code))
        else:
            parts.append(_ESCAPES[kind])
            i = esc + 2
        if i > quote:  # the quote found was an escaped one
            quote = s.index('"', i)


def normalise(text: str) -> str:
    """Text with trailing spaces of each line and blank lines at the end removed."""
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n")).rstrip("\n")


def regular_bytes(path: str) -> bytes | None:
    """The bytes of a regular file (None for a missing file, a link, a directory or anything else)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    with open(path, "rb") as f:
        return f.read()


def regular_text(path: str) -> str | None:
    data = regular_bytes(path)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def list_files(root: str) -> list[str] | None:
    """Relative paths of everything under ``root`` that is not a directory (None if ``root`` is no
    directory); a link or a special file is listed with a ``!`` prefix so it never matches a name."""
    if not os.path.isdir(root) or os.path.islink(root):
        return None
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for d in list(dirnames):
            if os.path.islink(os.path.join(dirpath, d)):
                out.append("!" + os.path.relpath(os.path.join(dirpath, d), root))
                dirnames.remove(d)
        for name in filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, root)
            out.append(rel if stat.S_ISREG(os.lstat(full).st_mode) else "!" + rel)
    return sorted(out)


def check_one(check: dict, workdir: str) -> str | None:
    """None when ``check`` holds, else why not (one line)."""
    kind = check["kind"]
    path = os.path.join(workdir, check.get("path", ""))
    if kind == "text":
        got = regular_text(path)
        if got is None:
            return f"{check['path']}: not a readable text file"
        return None if normalise(got) == normalise(check["text"]) else f"{check['path']}: wrong contents"
    if kind == "lines":
        got = regular_text(path)
        if got is None:
            return f"{check['path']}: not a readable text file"
        lines = [ln.rstrip() for ln in got.replace("\r\n", "\n").split("\n") if ln.strip()]
        return None if lines == check["lines"] else f"{check['path']}: wrong lines"
    if kind == "sha256":
        got = regular_bytes(path)
        if got is None:
            return f"{check['path']}: missing (or not a regular file)"
        return None if _sha256(got) == check["sha256"] else f"{check['path']}: changed"
    if kind == "absent":
        return None if not os.path.lexists(path) else f"{check['path']}: should not exist"
    if kind == "files":
        got = list_files(os.path.join(workdir, check["dir"]))
        if got is None:
            return f"{check['dir']}: not a directory"
        want = sorted(check["names"])
        if got == want:
            return None
        extra, missing = sorted(set(got) - set(want)), sorted(set(want) - set(got))
        return f"{check['dir']}: unexpected {extra[:3]}, missing {missing[:3]}"
    if kind == "json":
        got = regular_text(path)
        import json

        try:
            value = json.loads(got) if got is not None else None
        except ValueError:
            return f"{check['path']}: not valid JSON"
        return None if got is not None and value == check["value"] else f"{check['path']}: wrong JSON value"
    if kind == "executable":
        try:
            st = os.lstat(path)
        except OSError:
            return f"{check['path']}: missing"
        is_exec = stat.S_ISREG(st.st_mode) and bool(st.st_mode & stat.S_IXUSR)
        return None if is_exec == check["value"] else f"{check['path']}: executable should be {check['value']}"
    if kind == "tar":
        return check_tar(path, check)
    if kind == "command":
        return check_command(check, workdir)
    return f"unknown check kind {kind!r}"


def _sha256(data: bytes) -> str:
    import hashlib  # here: OpenSSL's start is a fifth of this interpreter's, and most tasks hash nothing

    return hashlib.sha256(data).hexdigest()


def check_tar(path: str, check: dict) -> str | None:
    import tarfile  # here: most tasks have no archive, and every grade starts this interpreter afresh
    if regular_bytes(path) is None:
        return f"{check['path']}: missing (or not a regular file)"
    try:
        with tarfile.open(path) as tar:
            got = {}
            for m in tar.getmembers():
                name = m.name[2:] if m.name.startswith("./") else m.name
                if m.isdir():
                    continue
                if not m.isfile():
                    return f"{check['path']}: holds a member that is not a regular file: {name}"
                f = tar.extractfile(m)
                got[name.rstrip("/")] = _sha256(f.read() if f else b"")
    except (tarfile.TarError, OSError, EOFError) as e:
        return f"{check['path']}: not a readable tar archive ({e})"
    return None if got == check["members"] else f"{check['path']}: wrong members or contents"


def check_command(check: dict, workdir: str) -> str | None:
    for rel, text in check.get("files", {}).items():
        full = os.path.join(workdir, rel)
        if os.path.lexists(full) and not os.path.isfile(full):
            return f"{rel}: not a regular file"
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)
    code, out, _ = testee().run(["bash", "-c", check["command"]], cwd=workdir, timeout_s=10.0)
    if code is None:
        return f"`{check['command']}` ran past 10 s"
    if code != 0:
        return f"`{check['command']}` exited {code}"
    return None if normalise(out) == normalise(check["stdout"]) else f"`{check['command']}` printed the wrong output"


def testee():  # noqa: ANN201 - a module
    """The testee runner: ``testee.py`` beside this file (in a task's tests/), else the package's."""
    import importlib.util

    beside = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testee.py")
    if os.path.isfile(beside):
        spec = importlib.util.spec_from_file_location("agentrl_testee", beside)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    from environments import testee as module

    return module


def run_checks(spec: dict, commands: bool = True) -> list[str]:
    """Why each failing check fails (empty: every check holds); ``commands=False`` runs only the checks that
    read files (every kind but ``command``: nothing is written or run)."""
    problems = []
    ordered = sorted(spec["checks"], key=lambda c: c.get("kind") == "command")  # commands (which write) last
    for check in ordered if commands else [c for c in ordered if c.get("kind") != "command"]:
        try:
            problem = check_one(check, spec["workdir"])
        except Exception as e:  # noqa: BLE001 - a tree that breaks a check fails it, in one line
            problem = f"{check.get('kind')} check raised {type(e).__name__}: {e}"
        if problem:
            problems.append(problem)
    return problems


def main(argv: list[str]) -> int:
    spec = load_spec(argv[1])
    problems = run_checks(spec)
    for p in problems:
        print("FAIL", p)
    print(f"{len(spec['checks']) - len(problems)} of {len(spec['checks'])} checks hold")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
