"""``agentrl/Countdown-v0``: reach a target number with the given numbers and ``+ - * /``.

Procedural and deterministic by seed: ``count`` numbers from ``1..max_number``; the target is the
value of a random expression over them (exact arithmetic, every intermediate value a
non-negative integer, target in ``min_target..max_target``), so every task has a solution. Every
task falls in one split by a hash of its numbers and target (80% train, 10% dev, 10% test).

The answer is the expression in the last ``\\boxed{}`` or ``<answer>...</answer>`` (a bare
expression as the whole response also counts); an ``= target`` tail is allowed. The verifier
parses it with :mod:`ast` (never ``eval``): only numbers, ``+ - * /`` and parentheses. It rejects
numbers that are not in the question or are used more often than given, and, with ``use_all``
(default), expressions that leave a number unused. Division is exact (fractions).
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections import Counter
from fractions import Fraction

import numpy as np

from agentrl.env import TextEnv
from agentrl.types import RewardResult, Task
from rewards.math import boxed_contents

SPLITS = {"train": (0, 80), "dev": (80, 90), "test": (90, 100)}
TEMPLATE = ("Using the numbers {numbers}, create an expression that equals {target}. You may use + - * / "
            "and parentheses; {rule} Put the final expression in \\boxed{{}}, e.g. \\boxed{{(1 + 2) * 3}}.")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.Div: lambda a, b: a / b}


class ExpressionError(ValueError):
    """An answer that is not a valid countdown expression."""


def evaluate(expr: str) -> tuple[Fraction, list[int]]:
    """Exact value of an expression over integers, ``+ - * /`` and parentheses; the numbers it uses."""
    if len(expr) > 500:
        raise ExpressionError("expression too long")
    try:
        tree = ast.parse(expr.replace("×", "*").replace("÷", "/").replace("\\times", "*")
                         .replace("\\div", "/").strip(), mode="eval")
    except SyntaxError as e:
        raise ExpressionError(f"not an expression: {e.msg}") from None
    used: list[int] = []

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Div) and right == 0:
                raise ExpressionError("division by zero")
            return _OPS[type(node.op)](left, right)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            used.append(node.value)
            return Fraction(node.value)
        raise ExpressionError(f"only numbers, + - * / and parentheses are allowed, not {type(node).__name__}")

    return walk(tree.body), used


def extract_expression(response: str) -> str | None:
    """The last ``\\boxed{}`` or ``<answer>`` content, else the response itself; ``= N`` tail cut."""
    candidates = boxed_contents(response) or _ANSWER_TAG.findall(response)
    text = candidates[-1] if candidates else response
    text = text.strip().strip("$").strip()
    if "=" in text:
        text = text.split("=", 1)[0]
    return text or None


class CountdownEnv(TextEnv):
    """Countdown numbers game; reward 1 for a valid expression that hits the target."""

    def __init__(self, count: int = 4, max_number: int = 50, min_target: int = 10, max_target: int = 200,
                 use_all: bool = True, split: str = "train", template: str = TEMPLATE,
                 render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        if count < 2 or max_number < 2 or not 1 <= min_target <= max_target:
            raise ValueError("Countdown-v0 needs count >= 2, max_number >= 2, 1 <= min_target <= max_target")
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
        self.count, self.max_number, self.use_all, self.split = count, max_number, use_all, split
        self.min_target, self.max_target, self.template = min_target, max_target, template

    def _candidate(self, rng: np.random.Generator) -> tuple[list[int], str, Fraction]:
        numbers = [int(x) for x in rng.integers(1, self.max_number + 1, size=self.count)]
        order = [numbers[int(i)] for i in rng.permutation(self.count)]
        expr, value = str(order[0]), Fraction(order[0])
        for n in order[1:]:
            op = "+-*/"[int(rng.integers(4))]
            if op == "/" and (n == 0 or value % n):
                op = "+"
            if op == "-" and value - n <= 0:
                expr, value, op = f"{n} - ({expr})", n - value, ""
            if op:
                expr, value = f"({expr}) {op} {n}", _OPS[{"+": ast.Add, "-": ast.Sub, "*": ast.Mult,
                                                          "/": ast.Div}[op]](value, Fraction(n))
        return sorted(numbers), _simplify(expr), value

    def sample_task(self, rng: np.random.Generator) -> Task:
        for _ in range(10_000):
            numbers, expr, value = self._candidate(rng)
            target = int(value)
            if value.denominator == 1 and self.min_target <= target <= self.max_target and value > 0:
                key = f"{numbers}->{target}"
                if split_of(key) == self.split:
                    break
        else:  # pragma: no cover - only with degenerate settings
            raise RuntimeError("no countdown task found for these settings")
        rule = "use every number exactly once." if self.use_all else "use each number at most once."
        prompt = self.template.format(numbers=", ".join(map(str, numbers)), target=target, rule=rule)
        return Task(id=f"countdown-{'-'.join(map(str, numbers))}-{target}", prompt=prompt, answer=str(target),
                    metadata={"numbers": numbers, "target": target, "solution": expr, "split": self.split})

    def score(self, action: str, task: Task) -> RewardResult:
        expr = extract_expression(action)
        if expr is None:
            return RewardResult(0.0, {"correct": 0.0}, {"error": "no expression found"})
        try:
            value, used = evaluate(expr)
        except (ExpressionError, RecursionError, MemoryError, ValueError) as e:
            return RewardResult(0.0, {"correct": 0.0}, {"parsed": expr, "error": str(e)})
        given, counted = Counter(task.metadata["numbers"]), Counter(used)
        extra = counted - given
        error = ""
        if extra:
            error = f"numbers not given (or used too often): {sorted(extra.elements())}"
        elif self.use_all and counted != given:
            error = f"numbers left unused: {sorted((given - counted).elements())}"
        elif value != task.metadata["target"]:
            error = f"expression equals {value}, not {task.metadata['target']}"
        correct = 0.0 if error else 1.0
        return RewardResult(correct, {"correct": correct}, {"parsed": expr, "error": error})

    def reference_answer(self, task: Task) -> str:
        return f"\\boxed{{{task.metadata['solution']}}}"


def split_of(key: str) -> str:
    """Which split a task belongs to (a stable hash of its numbers and target)."""
    bucket = int(hashlib.sha1(key.encode()).hexdigest()[:8], 16) % 100
    return next(name for name, (lo, hi) in SPLITS.items() if lo <= bucket < hi)


def _simplify(expr: str) -> str:
    """Drop the redundant parentheses around a leading bare number: ``(7) + 3`` -> ``7 + 3``."""
    return re.sub(r"\((\d+)\)", r"\1", expr)
