"""Runs a program in the current (already isolated, forked) interpreter as `__main__`.

Standard library only; self-contained like `_supervisor`. Nothing here is trusted after the
program starts: it only runs inside the job process.
"""

from __future__ import annotations

import ast
import atexit
import io
import json
import os
import signal
import struct
import sys
import threading
import traceback
import types


def _fresh_stdio() -> None:
    """New sys.std* objects on fds 0-2 (the forked server's objects have their own state)."""
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8", errors="backslashreplace")
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8",
        errors="backslashreplace", line_buffering=True)


def _fresh_main(path: str, workdir: str) -> dict:
    """A new `__main__` module and argv/path as `python main.py` would set them."""
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    sys.argv = [path]
    sys.path[0] = workdir
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)
    return main.__dict__


def _print_exc(exc: BaseException) -> None:
    """Print a traceback without this module's own frames (as `python main.py` would)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


def _exit_code(exc: SystemExit) -> int:
    """The exit status `python` gives for SystemExit(code)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _finish(code: int) -> None:
    """Exit as the interpreter would: join threads, run atexit, flush, then leave at once."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(code)


def run_program(path: str, workdir: str) -> None:
    """Run the file at `path` as `__main__`; never returns."""
    _fresh_stdio()
    namespace = _fresh_main(path, workdir)
    code = 0
    try:
        with open(path, "rb") as f:
            source = f.read()
        exec(compile(source, path, "exec", dont_inherit=True), namespace)
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:
        _print_exc(exc)
        code = 1
    _finish(code)


def _read_exact(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _run_cell(source: str, namespace: dict) -> None:
    """Run a cell like a REPL: a final expression's value is printed (unless None)."""
    tree = ast.parse(source, "<session>")
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, "<session>", "exec", dont_inherit=True), namespace)
    if last is not None:
        value = eval(compile(ast.Expression(last.value), "<session>", "eval", dont_inherit=True), namespace)
        if value is not None:
            print(repr(value))


def run_session(workdir: str) -> None:
    """Persistent session: run code requests from fd 3 in one namespace; answer each on fd 4."""
    _fresh_stdio()
    namespace = _fresh_main(os.path.join(workdir, "main.py"), workdir)
    while True:
        try:
            (size,) = struct.unpack(">I", _read_exact(3, 4))
            request = json.loads(_read_exact(3, size))
        except (EOFError, OSError):
            _finish(0)
        error = False
        try:
            _run_cell(request["code"], namespace)
        except SystemExit as exc:
            error = _exit_code(exc) != 0
        except BaseException as exc:
            _print_exc(exc)
            error = True
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os.write(4, (json.dumps({"id": request["id"], "error": error}) + "\n").encode())
