"""``agentrl/Arithmetic-v0``: procedural arithmetic with exact numeric rewards.

Unlimited tasks, deterministic by seed. Knobs: ``digits`` (operand size), ``operators`` (any of
``+-*/``; division is always exact), ``terms`` (operands per expression). Every expression falls in
one split by a hash of its text (80% train, 10% dev, 10% test), so held-out tasks never appear in
training. ``template`` formats the prompt; the tiny CPU demo uses ``"{expr}="`` and
``bare_answer=True`` (the whole response must be the number).
"""

from __future__ import annotations

import hashlib
from fractions import Fraction

import numpy as np

from agentrl.env import TextEnv
from agentrl.types import RewardResult, Task
from rewards import numeric

SPLITS = {"train": (0, 80), "dev": (80, 90), "test": (90, 100), "all": (0, 100)}
DEFAULT_TEMPLATE = "Compute {expr}. Give the final answer as a number."


def split_of(expr: str) -> str:
    """Which split an expression belongs to (a stable hash of its text)."""
    bucket = int(hashlib.sha1(expr.encode()).hexdigest()[:8], 16) % 100
    return next(name for name, (lo, hi) in SPLITS.items() if name != "all" and lo <= bucket < hi)


class ArithmeticEnv(TextEnv):
    """Arithmetic expressions such as ``37+58`` or ``12*4-7``; reward 1 for the exact value."""

    def __init__(self, digits: int = 2, operators: str = "+", terms: int = 2, split: str = "train",
                 template: str = DEFAULT_TEMPLATE, bare_answer: bool = False,
                 render_mode: str | None = None) -> None:
        super().__init__(render_mode=render_mode)
        if digits < 1 or terms < 2:
            raise ValueError("Arithmetic-v0 needs digits >= 1 and terms >= 2")
        if not operators or set(operators) - set("+-*/"):
            raise ValueError(f"operators must be a non-empty subset of '+-*/', got {operators!r}")
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
        self.digits, self.operators, self.terms, self.split = digits, operators, terms, split
        self.template, self.bare_answer = template, bare_answer

    def _expression(self, rng: np.random.Generator) -> tuple[str, Fraction]:
        hi = 10**self.digits
        nums = [int(rng.integers(0, hi)) for _ in range(self.terms)]
        ops = [self.operators[int(rng.integers(0, len(self.operators)))] for _ in range(self.terms - 1)]
        for i, op in enumerate(ops):  # exact division: make the dividend a multiple
            if op == "/":
                nums[i + 1] = max(1, nums[i + 1] % hi)
                nums[i] = nums[i + 1] * int(rng.integers(0, max(2, hi // nums[i + 1])))
        expr = str(nums[0]) + "".join(f"{op}{n}" for op, n in zip(ops, nums[1:]))
        return expr, _evaluate(expr)

    def sample_task(self, rng: np.random.Generator) -> Task:
        lo, hi = SPLITS[self.split]
        for _ in range(10_000):
            expr, value = self._expression(rng)
            if self.split == "all" or split_of(expr) == self.split:
                break
        else:  # pragma: no cover - only with a degenerate (1-digit, 2-term) space and a tiny split
            raise RuntimeError(f"no expression found in split {self.split!r} ({lo}-{hi}%)")
        answer = str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
        return Task(id=f"arith-{expr}", prompt=self.template.format(expr=expr), answer=answer,
                    metadata={"expr": expr, "split": split_of(expr), "difficulty": self.digits * self.terms})

    def score(self, action: str, task: Task) -> RewardResult:
        return numeric.score(action, task, bare=self.bare_answer)


def _evaluate(expr: str) -> Fraction:
    """Exact value of an expression over ``+-*/`` with the usual precedence (no eval)."""
    tokens, num = [], ""
    for ch in expr:
        if ch.isdigit():
            num += ch
        else:
            tokens += [Fraction(int(num)), ch]
            num = ""
    tokens.append(Fraction(int(num)))
    terms, i = [tokens[0]], 1
    while i < len(tokens):  # fold * and / first
        op, val = tokens[i], tokens[i + 1]
        if op == "*":
            terms[-1] *= val
        elif op == "/":
            terms[-1] /= val
        else:
            terms += [op, val]
        i += 2
    total = terms[0]
    for op, val in zip(terms[1::2], terms[2::2]):
        total = total + val if op == "+" else total - val
    return total
