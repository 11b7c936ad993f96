"""Read test methods for reproductions (run by the build script in a subprocess, on the pristine project).

``python3 probe.py ROOT SOURCE ID [ID ...]`` prints JSON: for each test id, the method's source,
the file of the module that defines it, and what each ``self.NAME`` it uses stands for: a class or
function of an importable module (``{"module": ..., "qualname": ...}``) or a literal constant
(``{"literal": repr}``); anything else makes the test unusable for a standalone reproduction.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import sys
import textwrap

LITERALS = (int, float, str, bytes, bool, type(None), tuple)


def describe(test_id: str) -> dict | None:
    module_name, cls_name, method_name = test_id.rsplit(".", 2)
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
        method = getattr(cls, method_name)
        source = textwrap.dedent(inspect.getsource(method))
        defining = sys.modules[method.__module__].__file__
    except Exception:  # noqa: BLE001 - a test we cannot read is not used
        return None
    attrs = {}
    for name in sorted(set(re.findall(r"\bself\.(\w+)", source))):
        value = inspect.getattr_static(cls, name, None) if hasattr(cls, name) else None
        value = getattr(cls, name, None) if value is None else value
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        if isinstance(value, LITERALS) and len(repr(value)) < 200:
            attrs[name] = {"literal": repr(value)}
        elif (inspect.isclass(value) or inspect.isfunction(value)) and not value.__module__.startswith("tests") \
                and "<" not in value.__qualname__ and value.__module__ != method.__module__:
            attrs[name] = {"module": value.__module__, "qualname": value.__qualname__}
    return {"source": source, "file": defining, "module": method.__module__, "attrs": attrs}


def main(argv: list[str]) -> int:
    root, source = argv[1], argv[2]
    sys.path[:0] = [f"{root}/{source}", root]
    print(json.dumps({t: describe(t) for t in argv[3:]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
