"""A small LaTeX expression reader: the parser of the fast symbolic path of :mod:`rewards.math`.

:func:`parse` turns a normalised answer (``\\frac{x+2}{7}``, ``2\\sin b\\cos a``, ``3\\sqrt{13}``,
``\\sum_{k=0}^{n-1} F_k``, ``\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}``) into a tree of tuples
``(op, *args)``; :mod:`rewards.math_eval` computes and compares such trees. Anything it cannot read
raises :class:`NotEvaluable` (the caller then asks sympy); two bare numbers side by side
(``11 6/6``, ``4 4/0``) raise :class:`Malformed` (no answer, never equal).
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

__all__ = ["NotEvaluable", "Malformed", "Matrix", "Node", "Value", "FUNCS", "GREEK", "parse", "variables"]


class NotEvaluable(ValueError):
    """The text is not an expression this module can compute."""


class Malformed(NotEvaluable):
    """The text is no well-formed answer (two numbers side by side)."""


class Matrix(tuple):
    """An immutable matrix: a tuple of equally long row tuples."""

    @property
    def shape(self) -> tuple[int, int]:
        return len(self), len(self[0]) if self else 0


Value = Fraction | complex | Matrix
Node = tuple

_TOKEN = re.compile(r"\s*(?:(\d+\.?\d*|\.\d+)|(\\[a-zA-Z]+)|(\\\\)|(\*\*|\\[{}|%]|[a-zA-Z]|[-+*/^_()\[\]{}|!,=<>&']))")
FUNCS = _FUNCS = {"sin", "cos", "tan", "sec", "csc", "cot", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh",
          "ln", "log", "exp"}
_GREEK = {"alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta", "vartheta", "iota",
          "kappa", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau", "upsilon", "phi", "varphi", "chi", "psi",
          "omega", "Gamma", "Delta", "Theta", "Lambda", "Xi", "Sigma", "Phi", "Psi", "Omega"}
GREEK = frozenset(_GREEK)
_FRACS = {"\\frac", "\\dfrac", "\\tfrac", "\\cfrac"}
_MULS = {"*", "\\cdot", "\\times"}
_DIVS = {"/", "\\div"}
_ENVS = {"pmatrix", "bmatrix", "matrix", "array", "Bmatrix", "smallmatrix"}
_MAX_LEN = 600


def _tokenize(s: str) -> list[str]:
    tokens, pos = [], 0
    s = s.rstrip()
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if not m:
            raise NotEvaluable(f"cannot read {s[pos:pos + 10]!r}")
        tokens.append(next(g for g in m.groups() if g is not None))
        pos = m.end()
    return tokens


class _Parser:
    """Recursive descent over the token list; builds tuples ``(op, *args)``."""

    def __init__(self, tokens: list[str]) -> None:
        self.t, self.i, self.abs_depth = tokens, 0, 0

    def peek(self, k: int = 0) -> str | None:
        return self.t[self.i + k] if self.i + k < len(self.t) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise NotEvaluable(f"expected {expected!r}, got {tok!r}")
        self.i += 1
        return tok

    def expr(self) -> Node:
        node = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            node = ("add" if op == "+" else "sub", node, self.term())
        return node

    def _starts_atom(self, tok: str | None) -> bool:
        if tok is None:
            return False
        if tok == "|":
            return self.abs_depth == 0
        if tok.startswith("\\") and len(tok) > 2:
            return tok[1:] in _FUNCS or tok[1:] in _GREEK or tok in _FRACS or tok in (
                "\\sqrt", "\\pi", "\\binom", "\\begin", "\\mathrm", "\\lvert", "\\mathbf", "\\sum", "\\prod")
        return tok[0].isdigit() or tok[0] == "." or tok.isalpha() or tok in ("(", "{", "[")

    def term(self) -> Node:
        node = self.unary()
        while True:
            tok = self.peek()
            if tok in _MULS or tok in _DIVS:
                self.take()
                node = ("div" if tok in _DIVS else "mul", node, self.unary())
            elif self._starts_atom(tok):
                if node[0] == "num" and (tok[0].isdigit() or tok[0] == "."):
                    raise Malformed("two numbers side by side")
                node = ("mul", node, self.power())
            else:
                return node

    def unary(self) -> Node:
        if self.peek() == "-":
            self.take()
            return ("neg", self.unary())
        if self.peek() == "+":
            self.take()
            return self.unary()
        return self.power()

    def power(self) -> Node:
        base = self.postfix(self.atom())
        while self.peek() in ("^", "**"):
            self.take()
            if self.peek() == "\\circ" or (self.peek() == "{" and self.peek(1) == "\\circ" and self.peek(2) == "}"):
                self.i += 1 if self.peek() == "\\circ" else 3
                base = ("deg", base)
                continue
            base = ("pow", base, self.exponent())
        return self.postfix(base)

    def postfix(self, node: Node) -> Node:
        while self.peek() in ("!", "\\%"):
            node = ("fact", node) if self.take() == "!" else ("pct", node)
        return node

    def exponent(self) -> Node:
        tok = self.peek()
        if tok == "{":
            return self.group()
        if tok in ("-", "+"):
            return self.unary()
        if tok is not None and tok[0].isdigit() and len(tok) > 1:  # x^23 is x^2 * 3 in LaTeX
            self.t[self.i] = tok[1:]
            return ("num", Fraction(tok[0]))
        return self.atom()

    def group(self) -> Node:
        self.take("{")
        node = self.expr()
        self.take("}")
        return node

    def arg(self) -> Node:
        """One macro argument: ``{...}`` or a single token (``\\frac12``, ``\\sqrt3``)."""
        tok = self.peek()
        if tok == "{":
            return self.group()
        if tok is not None and tok[0].isdigit():
            self.take()
            if len(tok) > 1:
                self.t.insert(self.i, tok[1:])
            return ("num", Fraction(tok[0]))
        return self.atom()

    def atom(self) -> Node:
        tok = self.peek()
        if tok is None:
            raise NotEvaluable("unexpected end")
        if tok[0].isdigit() or tok[0] == ".":
            self.take()
            return self._base_number(tok)
        if tok.isalpha() and len(tok) == 1:
            self.take()
            return self._variable(tok)
        if tok in ("(", "[", "{"):
            self.take()
            node = self.expr()
            self.take({"(": ")", "[": "]", "{": "}"}[tok])
            return node
        if tok in ("|", "\\lvert"):
            self.take()
            self.abs_depth += 1
            node = self.expr()
            self.abs_depth -= 1
            self.take("|" if tok == "|" else "\\rvert")
            return ("abs", node)
        if tok.startswith("\\"):
            return self._command(self.take())
        raise NotEvaluable(f"unexpected {tok!r}")

    def _base_number(self, tok: str) -> Node:
        value = Fraction(tok.rstrip(".") or "0")
        if self.peek() != "_":
            return ("num", value)
        self.take()
        base_tok = self.take()
        if base_tok == "{":
            base_tok = self.take()
            self.take("}")
        if not base_tok.isdigit() or not 2 <= int(base_tok) <= 36 or "." in tok:
            raise NotEvaluable("bad base")
        try:
            return ("num", Fraction(int(tok, int(base_tok))))
        except ValueError:
            raise NotEvaluable("digit out of range for the base") from None

    def _variable(self, name: str) -> Node:
        if self.peek() == "_":
            self.take()
            start = self.i
            try:
                sub = self.arg()
            except NotEvaluable:
                self.i = start
                sub = ("var", self._raw_group())
            return ("idx", name, sub)
        if name in ("i", "I"):
            return ("const", "i")
        return ("const", "e") if name == "e" else ("var", name)

    def _raw_group(self) -> str:
        tok = self.take()
        if tok != "{":
            return tok
        depth, parts = 1, []
        while depth:
            tok = self.take()
            depth += {"{": 1, "}": -1}.get(tok, 0)
            parts.append(tok)
        return "".join(parts[:-1])

    def _big_operator(self, name: str) -> Node:
        self.take("_")
        self.take("{")
        var = self.take()
        self.take("=")
        lo = self.expr()
        self.take("}")
        self.take("^")
        hi = self.exponent()
        return (name, var, lo, hi, self.term())

    def _command(self, cmd: str) -> Node:
        name = cmd[1:]
        if cmd in _FRACS:
            return ("div", self.arg(), self.arg())
        if name == "sqrt":
            if self.peek() == "[":
                self.take()
                n = self.expr()
                self.take("]")
                return ("root", n, self.arg())
            return ("sqrt", self.arg())
        if name == "pi":
            return ("const", "pi")
        if name in _GREEK:
            return ("var", name)
        if name in _FUNCS:
            return self._function(name)
        if name == "binom":
            return ("binom", self.arg(), self.arg())
        if name in ("sum", "prod"):
            return self._big_operator(name)
        if name in ("mathrm", "mathbf"):
            text = self._word()
            if text == "e" and name == "mathrm":
                return ("const", "e")
            if text.isalpha() and len(text) == 1:
                return ("var", text)
            raise NotEvaluable("text")
        if name == "begin":
            return self._matrix()
        raise NotEvaluable(f"unknown command {cmd}")

    def _function(self, name: str) -> Node:
        power: Node | None = None
        base: Node | None = None
        if name == "log" and self.peek() == "_":
            self.take()
            base = self.arg()
        if self.peek() == "^":
            self.take()
            power = self.exponent()
            if power == ("neg", ("num", Fraction(1))):
                raise NotEvaluable("inverse function")
        if self.peek() == "(":
            self.take()
            arg = self.expr()
            self.take(")")
        else:
            arg = self.power()
            while self.peek() is not None and (self.peek()[0].isdigit() or (self.peek().isalpha() and len(self.peek()) == 1)):
                arg = ("mul", arg, self.power())
        node: Node = ("fn", name, arg) if base is None else ("div", ("fn", "ln", arg), ("fn", "ln", base))
        return ("pow", node, power) if power is not None else node

    def _word(self) -> str:
        self.take("{")
        parts = []
        while self.peek() != "}":
            parts.append(self.take())
        self.take("}")
        return "".join(parts)

    def _matrix(self) -> Node:
        env = self._word()
        if env not in _ENVS:
            raise NotEvaluable(f"environment {env}")
        if env == "array" and self.peek() == "{":
            while self.take() != "}":
                pass
        rows: list[list[Node]] = [[]]
        while True:
            if self.peek() == "\\end":
                break
            if self.peek() == "\\\\":
                self.take()
                if self.peek() != "\\end":
                    rows.append([])
                continue
            rows[-1].append(self.expr())
            if self.peek() == "&":
                self.take()
        self.take("\\end")
        self._word()
        if not rows[-1]:
            rows.pop()
        if not rows or len({len(r) for r in rows}) != 1:
            raise NotEvaluable("ragged matrix")
        return ("matrix", tuple(tuple(r) for r in rows))


@lru_cache(maxsize=16384)
def parse(text: str) -> Node:
    """The expression tree of ``text`` (raises :class:`NotEvaluable`)."""
    if len(text) > _MAX_LEN or not text.strip():
        raise NotEvaluable("empty or too long")
    p = _Parser(_tokenize(text))
    node = p.expr()
    if p.peek() is not None:
        raise NotEvaluable(f"left over {p.peek()!r}")
    return node


def variables(node: Node) -> frozenset[str]:
    """The variable names of a tree."""
    if node[0] == "var":
        return frozenset([node[1]])
    if node[0] == "idx":
        return variables(node[2])
    if node[0] in ("sum", "prod"):
        return (variables(node[2]) | variables(node[3]) | variables(node[4])) - {node[1]}
    out: frozenset[str] = frozenset()
    for child in node[1:]:
        if isinstance(child, tuple) and child and isinstance(child[0], str):
            out |= variables(child)
        elif isinstance(child, tuple):  # matrix rows
            for row in child:
                for cell in row:
                    out |= variables(cell)
    return out


