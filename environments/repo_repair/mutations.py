"""Synthetic bugs in real source files: every AST mutation site of a file, applied as a minimal text edit.

The kinds (SWE-smith's procedural modifiers, one small edit each): ``compare`` (``<`` and ``<=``,
``==`` and ``!=``, ``in`` and ``not in``, ``is`` and ``is not`` swapped), ``arith`` (``+``/``-``,
``*``/``//``, ``//``/``/``, ``<<``/``>>``, ``&``/``|``, also in ``+=``), ``bool_op`` (``and``/``or``),
``negate`` (an ``if`` condition negated), ``off_by_one`` (an integer index or slice bound moved by
one, a ``range`` stop one short), ``swap_args`` (the first two positional arguments of a call
swapped), ``remove_branch`` (an ``if`` without ``else`` whose body is one statement removed — a
lost early return, guard or special case) and ``default`` (a constant default of a parameter changed:
``True``/``False``, an integer moved by one).

A :class:`Mutation` replaces the exact text of one span, so the rest of the file (comments,
formatting) is untouched and the patch is a few lines. ``scope`` lists the first lines of the
functions enclosing the site (innermost first; the ``co_firstlineno`` of their code objects), which
the build script matches against the functions each test called.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import asdict, dataclass

COMPARE = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
           ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.Is: ("is", "is not"), ast.IsNot: ("is not", "is"),
           ast.In: ("in", "not in"), ast.NotIn: ("not in", "in")}
ARITH = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "//"), ast.FloorDiv: ("//", "/"),
         ast.Div: ("/", "//"), ast.LShift: ("<<", ">>"), ast.RShift: (">>", "<<"), ast.BitAnd: ("&", "|"),
         ast.BitOr: ("|", "&")}
TOKEN = {"<": r"<(?![<=])", "<=": r"<=", ">": r"(?<![->])>(?![>=])", ">=": r">=", "==": r"==", "!=": r"!=",
         "is": r"\bis\b(?!\s+not\b)", "is not": r"\bis\s+not\b", "in": r"(?<!not )\bin\b", "not in": r"\bnot\s+in\b",
         "+": r"\+", "-": r"-", "*": r"(?<!\*)\*(?!\*)", "//": r"//", "/": r"(?<!/)/(?!/)", "<<": r"<<", ">>": r">>",
         "&": r"&", "|": r"\|", "and": r"\band\b", "or": r"\bor\b"}


@dataclass(frozen=True)
class Mutation:
    """One edit: the text at ``start``..``end`` (character offsets in the file) becomes ``new``."""

    file: str
    kind: str
    start: int
    end: int
    old: str
    new: str
    line: int
    function: str
    scope: tuple[int, ...]

    @property
    def id(self) -> str:
        """Stable across runs: file, kind, line and the character offset."""
        return f"{self.file}:{self.line}:{self.kind}:{self.start}"

    def apply(self, source: str) -> str:
        if source[self.start:self.end] != self.old:
            raise ValueError(f"{self.id}: the source does not hold {self.old!r} there")
        return source[:self.start] + self.new + source[self.end:]

    def to_json(self) -> dict:
        d = asdict(self)
        d["scope"] = list(self.scope)
        return d


class _Offsets:
    """AST (line, UTF-8 byte column) positions as character offsets into the source."""

    def __init__(self, source: str) -> None:
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def at(self, line: int, col: int) -> int:
        text = self.lines[line - 1]
        return self.starts[line - 1] + len(text.encode("utf-8")[:col].decode("utf-8", "replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.at(node.lineno, node.col_offset), self.at(node.end_lineno, node.end_col_offset)


def first_line(fn: ast.AST) -> int:
    """The ``co_firstlineno`` of a function's code object (its first decorator, if any)."""
    decorators = getattr(fn, "decorator_list", [])
    return min([fn.lineno] + [d.lineno for d in decorators])


class _Finder(ast.NodeVisitor):
    def __init__(self, source: str, path: str) -> None:
        self.src, self.path, self.pos = source, path, _Offsets(source)
        self.stack: list[ast.AST] = []
        self.found: list[Mutation] = []

    # -- scope -------------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:  # noqa: N802
        for decorator in node.decorator_list:
            self.visit(decorator)
        self.stack.append(node)
        self._defaults(node)
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            self.visit(default)
        for stmt in node.body:
            self.visit(stmt)
        self.stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815

    def visit_Lambda(self, node: ast.Lambda) -> None:  # noqa: N802
        self.stack.append(node)
        self.generic_visit(node)
        self.stack.pop()

    def add(self, kind: str, start: int, end: int, new: str, node: ast.AST) -> None:
        old = self.src[start:end]
        if old == new or not old:
            return
        names = [getattr(f, "name", "<lambda>") for f in self.stack]
        self.found.append(Mutation(self.path, kind, start, end, old, new, node.lineno, ".".join(names) or "<module>",
                                   tuple(first_line(f) for f in reversed(self.stack))))

    def token(self, kind: str, left: ast.AST, right: ast.AST, old: str, new: str, node: ast.AST) -> None:
        """The operator ``old`` between ``left`` and ``right`` becomes ``new``."""
        gap_start, gap_end = self.pos.span(left)[1], self.pos.span(right)[0]
        gap = self.src[gap_start:gap_end]
        if "#" in gap:
            return
        hits = list(re.finditer(TOKEN[old], gap))
        if len(hits) == 1:
            self.add(kind, gap_start + hits[0].start(), gap_start + hits[0].end(), new, node)

    # -- the kinds ---------------------------------------------------------------------------
    def visit_Compare(self, node: ast.Compare) -> None:  # noqa: N802
        operands = [node.left, *node.comparators]
        for i, op in enumerate(node.ops):
            old, new = COMPARE[type(op)]
            self.token("compare", operands[i], operands[i + 1], old, new, node)
        self.generic_visit(node)

    def visit_BinOp(self, node: ast.BinOp) -> None:  # noqa: N802
        if type(node.op) in ARITH and not any(_is_text(x) for x in (node.left, node.right)):
            old, new = ARITH[type(node.op)]
            self.token("arith", node.left, node.right, old, new, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:  # noqa: N802
        if isinstance(node.op, ast.Add | ast.Sub) and not _is_text(node.value):
            old, new = ARITH[type(node.op)]
            gap_start, gap_end = self.pos.span(node.target)[1], self.pos.span(node.value)[0]
            gap = self.src[gap_start:gap_end]
            at = gap.find(old + "=")
            if at >= 0 and gap.count(old + "=") == 1:
                self.add("arith", gap_start + at, gap_start + at + 1, new, node)
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:  # noqa: N802
        old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
        self.token("bool_op", node.values[0], node.values[1], old, new, node)
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:  # noqa: N802
        if self.stack:
            start, end = self.pos.span(node.test)
            text = self.src[start:end]
            if "\n" not in text:
                negated = isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)
                new = text[4:].strip() if negated and text.startswith("not ") \
                    else f"not ({text})" if not isinstance(node.test, ast.Name | ast.Call | ast.Attribute) \
                    else f"not {text}"
                self.add("negate", start, end, new, node)
            if not node.orelse and len(node.body) == 1 and _is_if_statement(self.src, self.pos, node):
                start, end = self.pos.span(node)
                self.add("remove_branch", start, end, "pass", node)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:  # noqa: N802
        sl = node.slice
        if isinstance(sl, ast.Slice):
            for bound in (sl.lower, sl.upper):
                self._bump(bound, node, +1)
        elif _int_value(sl) is not None:
            self._bump(sl, node, +1)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:  # noqa: N802
        if isinstance(node.func, ast.Name) and node.func.id == "range" and node.args and not node.keywords:
            stop = node.args[0] if len(node.args) == 1 else node.args[1]
            self._bump(stop, node, -1)
        positional = [a for a in node.args if not isinstance(a, ast.Starred)]
        if len(positional) >= 2 and positional[:2] == node.args[:2]:
            a, b = (self.pos.span(x) for x in node.args[:2])
            first, second = self.src[a[0]:a[1]], self.src[b[0]:b[1]]
            if first != second and "\n" not in self.src[a[0]:b[1]]:
                self.add("swap_args", a[0], b[1], second + self.src[a[1]:b[0]] + first, node)
        self.generic_visit(node)

    def _bump(self, bound: ast.AST | None, node: ast.AST, delta: int) -> None:
        """An integer bound moves by ``delta`` (away from zero for negative ones); a name gets ``+ 1``/``- 1``."""
        if bound is None:
            return
        start, end = self.pos.span(bound)
        value = _int_value(bound)
        if value is not None:
            new = value + delta if value >= 0 else value - delta
            self.add("off_by_one", start, end, str(new), node)
        elif isinstance(bound, ast.Name | ast.Call | ast.Attribute):
            self.add("off_by_one", start, end, f"{self.src[start:end]} {'+' if delta > 0 else '-'} 1", node)

    def _defaults(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for default in fn.args.defaults + [d for d in fn.args.kw_defaults if d is not None]:
            if not isinstance(default, ast.Constant):
                continue
            v = default.value
            new = {True: "False", False: "True"}.get(v) if isinstance(v, bool) else \
                str(v + 1) if isinstance(v, int) else None
            if new is not None:
                start, end = self.pos.span(default)
                self.add("default", start, end, new, default)


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str | bytes))


def _int_value(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and type(node.operand.value) is int:
        return -node.operand.value
    return None


def _is_if_statement(source: str, pos: _Offsets, node: ast.If) -> bool:
    """An ``if`` (not an ``elif``) whose body is one simple statement."""
    start = pos.span(node)[0]
    body = node.body[0]
    return source.startswith("if", start) and isinstance(body, ast.Return | ast.Raise | ast.Continue | ast.Break
                                                         | ast.Assign | ast.AugAssign | ast.Expr)


def find_mutations(source: str, path: str) -> list[Mutation]:
    """Every mutation site of one file, in source order (the same list for the same text)."""
    finder = _Finder(source, path)
    finder.visit(ast.parse(source))
    valid = []
    for m in sorted(finder.found, key=lambda m: (m.start, m.kind, m.new)):
        try:
            ast.parse(m.apply(source))
        except SyntaxError:
            continue
        valid.append(m)
    return valid


def unified_diff(path: str, before: str, after: str) -> str:
    """A ``git diff``-style patch of one file (``a/PATH``, ``b/PATH``; ``patch -p1`` applies it)."""
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        f"a/{path}", f"b/{path}", n=3))
