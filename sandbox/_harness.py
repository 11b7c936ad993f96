"""The in-sandbox test harness (sent as the program by `sandbox.testing.run_tests`; runs as __main__).

It reads its spec (candidate code, tests, this run's nonce) from fd 3 and closes it before any
candidate code runs, takes private references to everything it needs, runs the candidate and then
each test, and writes one line per test to fd 4: `<nonce> <index> <1|0> <repr(error)>`. Only lines
with the nonce count. Between tests it restores the builtins (and, once, a few stdlib modules);
functions the candidate defines are wrapped so that each call restores the builtins again and must
return a plain builtin value (so an object whose __eq__ is always true cannot pass an assert).
"""

import builtins as _b
import os as _os
import sys as _sys
import types as _types

PLAIN = frozenset({int, float, complex, str, bytes, bytearray, bool, type(None), list, tuple, dict,
                   set, frozenset, range})


def _read_spec(read=_os.read, close=_os.close, loads=__import__("json").loads):
    """The spec from fd 3, which is closed afterwards."""
    raw = b""
    while chunk := read(3, 1 << 20):
        raw += chunk
    close(3)
    return loads(raw)


def _protections(spec, type_=type, dict_=dict, str_=str, BaseException_=BaseException, plain=PLAIN):
    """(restore, guard, describe): builtins restore, candidate-function wrapper, error text."""
    saved = dict_(_b.__dict__)
    update = _b.__dict__.update
    modules = [(m.__dict__, dict_(m.__dict__)) for name in spec["protect"]
               if (m := _sys.modules.get(name)) is not None]

    def restore(all_modules=False):
        update(saved)
        for mdict, snap in modules if all_modules else ():
            mdict.update(snap)

    def check_plain(value):
        stack, seen = [value], 0
        while stack:
            v = stack.pop()
            seen += 1
            t = type_(v)
            if t not in plain or seen > 1_000_000:
                raise TypeError("candidate returned a non-builtin value: " + t.__name__)
            if t is dict:
                stack.extend(v.keys())
                stack.extend(v.values())
            elif t in (list, tuple, set, frozenset):
                stack.extend(v)

    def guard(fn):
        def guarded(*args, **kwargs):
            result = fn(*args, **kwargs)
            restore()
            check_plain(result)
            return result
        return guarded

    def describe(exc):
        try:
            return (type_(exc).__name__ + ": " + str_(exc))[:500]
        except BaseException_:
            return type_(exc).__name__[:100]

    return restore, guard, describe, saved


def _harness(write=_os.write, exit_=_os._exit, compile_=compile, exec_=exec, type_=type, dict_=dict,
             list_=list, enumerate_=enumerate, BaseException_=BaseException,
             FunctionType=_types.FunctionType):
    """Run the candidate, then each test; report each result with the nonce. Everything used after
    the candidate ran is bound here or in closures, never looked up in (patchable) globals."""
    spec = _read_spec()
    nonce = spec.pop("nonce")
    restore, guard, describe, saved_builtins = _protections(spec)

    def report(i, ok, error):
        write(4, f"{nonce} {i} {1 if ok else 0} {error!r}\n".encode())

    def run(source, name, namespace):
        exec_(compile_(source, name, "exec", dont_inherit=True, optimize=0), namespace)

    ns = {"__name__": "__candidate__", "__builtins__": _b}
    error = None
    try:
        run(spec["code"], "<candidate>", ns)
    except BaseException_ as exc:
        restore()
        error = "candidate failed: " + describe(exc)
    restore(all_modules=True)
    tns = dict_(ns, __builtins__=dict_(saved_builtins))  # the tests' own globals and builtins
    for name, value in list_(ns.items()):
        if type_(value) is FunctionType:
            tns[name] = guard(value)
    if error is None and spec["setup"]:
        try:
            run(spec["setup"], "<setup>", tns)
        except BaseException_ as exc:
            restore()
            error = "setup failed: " + describe(exc)
        restore()
    for i, source in enumerate_(spec["tests"]):
        ok, msg = False, error
        if error is None:
            try:
                run(source, f"<test {i}>", tns)
                restore()
                ok, msg = True, ""
            except BaseException_ as exc:
                restore()
                msg = describe(exc)
        report(i, ok, msg)
    exit_(0)


if __name__ == "__main__":
    _harness()
