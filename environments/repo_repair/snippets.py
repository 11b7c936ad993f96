"""A failing test method as a standalone reproduction script (for RepoRepair's issue texts).

``reproduction(described)`` takes what :mod:`environments.repo_repair.probe` read about a test (its
method source, its module, what each ``self.NAME`` stands for) and returns a script: unittest's
assertions become ``assert`` statements (``self.assertEqual(a, b)`` -> ``got = a`` and ``assert got ==
b, got``), ``self.assertRaises`` becomes try/except, ``self.subTest`` blocks are inlined, and the
imports and module-level helpers the body uses are copied from the test module. A test whose body
needs anything else of the test case (fixtures from ``setUp``, the tests package) gives None. The
build script keeps a script only when it fails on the mutated project and passes on the pristine one.
"""

from __future__ import annotations

import ast
from typing import Any

EQUAL = {"assertEqual", "assertEquals", "assertListEqual", "assertTupleEqual", "assertDictEqual", "assertSetEqual",
         "assertSequenceEqual", "assertMultiLineEqual"}
BINARY = {"assertNotEqual": ast.NotEq, "assertIs": ast.Is, "assertIsNot": ast.IsNot, "assertIn": ast.In,
          "assertNotIn": ast.NotIn, "assertGreater": ast.Gt, "assertGreaterEqual": ast.GtE, "assertLess": ast.Lt,
          "assertLessEqual": ast.LtE}
MAX_LINES, MAX_CHARS = 25, 1500


class Unusable(Exception):
    """The test cannot become a standalone script."""


def _stmts(code: str) -> list[ast.stmt]:
    return ast.parse(code).body


def _src(node: ast.AST) -> str:
    return ast.unparse(node)


class _Rewrite(ast.NodeTransformer):
    def __init__(self, attrs: dict[str, dict[str, str]]) -> None:
        self.attrs, self.imports = attrs, set()

    def visit_Expr(self, node: ast.Expr) -> Any:  # noqa: N802
        call = node.value
        if not (isinstance(call, ast.Call) and _is_self_attr(call.func)):
            return self.generic_visit(node)
        name = call.func.attr
        args = [self.visit(a) for a in call.args]
        kwargs = {k.arg: self.visit(k.value) for k in call.keywords}
        a = [_src(x) for x in args]
        if name in EQUAL and len(a) >= 2:
            return _stmts(f"got = {a[0]}\nassert got == {a[1]}, got")
        if name in BINARY and len(a) >= 2:
            op = {ast.NotEq: "!=", ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in", ast.Gt: ">",
                  ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<="}[BINARY[name]]
            return _stmts(f"got = {a[0]}\nassert got {op} {a[1]}, got")
        if name in ("assertTrue", "assert_") and a:
            return _stmts(f"assert {a[0]}")
        if name == "assertFalse" and a:
            return _stmts(f"assert not ({a[0]})")
        if name in ("assertIsNone", "assertIsNotNone") and a:
            return _stmts(f"got = {a[0]}\nassert got is {'not ' if 'Not' in name else ''}None, got")
        if name in ("assertIsInstance", "assertNotIsInstance") and len(a) >= 2:
            return _stmts(f"assert {'not ' if 'Not' in name else ''}isinstance({a[0]}, {a[1]})")
        if name == "assertAlmostEqual" and len(a) >= 2:
            places = a[2] if len(a) > 2 else _src(kwargs["places"]) if "places" in kwargs else "7"
            return _stmts(f"got = {a[0]}\nassert round(abs(got - ({a[1]})), {places}) == 0, got")
        if name == "assertCountEqual" and len(a) >= 2:
            return _stmts(f"got = list({a[0]})\nassert sorted(got, key=repr) == sorted({a[1]}, key=repr), got")
        if name == "assertRegex" and len(a) >= 2:
            self.imports.add("import re")
            return _stmts(f"assert re.search({a[1]}, {a[0]})")
        if name == "assertRaises" and len(a) >= 2:
            call_args = ", ".join(a[2:] + [f"{k}={_src(v)}" for k, v in kwargs.items()])
            return _stmts(f"try:\n    {a[1]}({call_args})\nexcept {a[0]}:\n    pass\n"
                          f"else:\n    raise AssertionError('{a[0]} was not raised')")
        if name == "assertMarkdownRenders" and len(a) >= 2:
            self.imports.add("import markdown")
            extra = ", ".join(f"{k}={_src(v)}" for k, v in kwargs.items())
            return _stmts(f"got = markdown.markdown({a[0]}{', ' + extra if extra else ''})\n"
                          f"assert got == {a[1]}, got")
        if name == "fail":
            return _stmts(f"raise AssertionError({a[0] if a else ''})")
        raise Unusable(f"self.{name}(...)")

    def visit_With(self, node: ast.With) -> Any:  # noqa: N802
        item = node.items[0].context_expr if len(node.items) == 1 else None
        if isinstance(item, ast.Call) and _is_self_attr(item.func):
            body = [s for stmt in node.body for s in _as_list(self.visit(stmt))]
            if item.func.attr == "subTest":
                return body
            if item.func.attr in ("assertRaises", "assertRaisesRegex") and item.args and \
                    node.items[0].optional_vars is None:
                exc = _src(self.visit(item.args[0]))
                handler = _stmts(f"try:\n    pass\nexcept {exc}:\n    pass\n"
                                 f"else:\n    raise AssertionError('{exc} was not raised')")[0]
                handler.body = body
                return handler
            raise Unusable(f"with self.{item.func.attr}")
        return self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> Any:  # noqa: N802
        if len(node.targets) == 1 and _is_self_attr(node.targets[0]) and node.targets[0].attr == "maxDiff":
            return None
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> Any:  # noqa: N802
        if _is_self_attr(node.func) and node.func.attr == "dedent" and node.args:
            self.imports.add("import textwrap")
            return ast.parse(f"textwrap.dedent({_src(self.visit(node.args[0]))}).strip()", mode="eval").body
        return self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> Any:  # noqa: N802
        if _is_self_attr(node):
            target = self.attrs.get(node.attr)
            if target is None:
                raise Unusable(f"self.{node.attr}")
            if "literal" in target:
                return ast.parse(target["literal"], mode="eval").body
            self.imports.add(f"import {target['module']}")
            return ast.parse(f"{target['module']}.{target['qualname']}", mode="eval").body
        return self.generic_visit(node)


def _is_self_attr(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def _as_list(x: Any) -> list[ast.stmt]:
    return [] if x is None else x if isinstance(x, list) else [x]


def reproduction(described: dict[str, Any], module_source: str, tests_package: str) -> str | None:
    """A standalone script for one described test (see the module docstring), or None."""
    try:
        fn = ast.parse(described["source"]).body[0]
        if not isinstance(fn, ast.FunctionDef) or fn.decorator_list:
            return None
        rewrite = _Rewrite(described["attrs"])
        body = [s for stmt in fn.body if not _is_docstring(stmt) for s in _as_list(rewrite.visit(stmt))]
    except (Unusable, SyntaxError, KeyError, IndexError):
        return None
    if not body:
        return None
    script = ast.Module(body=body, type_ignores=[])
    ast.fix_missing_locations(script)
    if any(isinstance(n, ast.Name) and n.id in ("self", "cls") for n in ast.walk(script)):
        return None
    header = _needed(script, ast.parse(module_source), tests_package, described["module"])
    if header is None:
        return None
    text = "\n".join(sorted(rewrite.imports) + header + [ast.unparse(script)]) + "\n"
    lines = text.count("\n")
    return text if lines <= MAX_LINES and len(text) <= MAX_CHARS else None


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _needed(script: ast.Module, module: ast.Module, tests_package: str, module_name: str) -> list[str] | None:
    """The test module's imports and top-level helpers that ``script`` uses (None: it needs the tests package)."""
    used = {n.id for n in ast.walk(script) if isinstance(n, ast.Name)}
    defined = {t.id for n in ast.walk(script) if isinstance(n, ast.Assign | ast.For | ast.With | ast.comprehension)
               for t in ast.walk(n) if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
    wanted = used - defined
    for node in module.body:  # helpers the script uses may use more names of the module
        if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.Assign) and _binds(node) & wanted:
            wanted |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    out, helpers = [], []
    for node in module.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = {(a.asname or a.name).split(".")[0] for a in node.names}
            if not names & wanted:
                continue
            source = node.module or "" if isinstance(node, ast.ImportFrom) else node.names[0].name
            if isinstance(node, ast.ImportFrom) and node.level or source.split(".")[0] == tests_package:
                return None
            out.append(ast.unparse(node))
        elif isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name in wanted:
            helpers.append(ast.unparse(node))
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in wanted for t in node.targets):
            helpers.append(ast.unparse(node))
    return out + helpers


def _binds(node: ast.AST) -> set[str]:
    if isinstance(node, ast.FunctionDef | ast.ClassDef):
        return {node.name}
    return {t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)}
