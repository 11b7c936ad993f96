"""rewards.math on answers as models write them on olympiad problems (issue 34).

The cases are ours (``tests/rewards/corpus/ours.jsonl``, one ``category`` per class), written from a
reading of the public grader suites named in ``corpus/SOURCES.md``; no case is copied from them.
"""

from __future__ import annotations

import re

import pytest

from agentrl.types import Task
from rewards import math as rmath
from rewards import math_items, math_labels, math_ranges
from tests.rewards.conftest import HERE, read_jsonl

CLASSES = ["labelled", "tuple_sets", "ranges", "functions", "normaliser"]
OURS = read_jsonl(HERE / "corpus" / "ours.jsonl")
WRONG_LABELLED = [c for c in OURS if c["category"] == "labelled_wrong" or (c["category"] == "labelled" and not c["expected"])]


def _wrong(cases: list[dict]) -> list[tuple[str, str]]:
    return [(c["gold"], c["pred"]) for c in cases if rmath.is_equivalent(c["pred"], c["gold"]) != c["expected"]]


@pytest.mark.parametrize("category", CLASSES)
def test_each_class_has_15_cases_and_passes(category):
    cases = [c for c in OURS if c["category"] == category]
    assert len(cases) >= 15
    assert any(not c["expected"] for c in cases), "every class also holds answers that must fail"
    wrong = _wrong(cases)
    assert 1 - len(wrong) / len(cases) >= 0.99, wrong


def test_wrong_labelled_answers_all_score_zero():
    """A label never turns a wrong value right: 50+ wrong labelled answers, every one scores 0."""
    assert len(WRONG_LABELLED) >= 50
    scores = [rmath.score(c["pred"], Task("t", "q", c["gold"])).score for c in WRONG_LABELLED]
    assert [(c["gold"], c["pred"]) for c, s in zip(WRONG_LABELLED, scores) if s != 0.0] == []


_NOT_A_VALUE = re.compile(r"[_^]$|[_^]\{[^}]*$|\\(?:frac|sqrt)$|\d\.\d*$")


def _change_last_value_digit(pred: str) -> str | None:
    """The prediction with its last digit that is a value (not a subscript, exponent or decimal
    place) changed, or ``None``."""
    for i in range(len(pred) - 1, -1, -1):
        if pred[i].isdigit() and not _NOT_A_VALUE.search(pred[:i]) and not pred[i + 1:i + 2].isdigit():
            return pred[:i] + str((int(pred[i]) + 3) % 10) + pred[i + 1:]
    return None


@pytest.mark.parametrize("category", CLASSES)
def test_a_changed_value_is_never_accepted(category):
    """Mutation test: every right answer of a class, with one of its values changed, scores 0."""
    mutated = [(c["gold"], m) for c in OURS if c["category"] == category and c["expected"]
               for m in [_change_last_value_digit(c["pred"])] if m is not None]
    assert len(mutated) >= 8
    assert [(g, p) for g, p in mutated if rmath.is_equivalent(p, g)] == []


def test_hedged_labelled_answers_score_zero():
    task = Task("t", "q", "x = 3")
    for pred in ["\\boxed{x = 3 \\text{ or } x = 4}", "\\boxed{x=3} or \\boxed{x=4}", "x = 3 or x = 4",
                 "\\boxed{3 \\lor 4}", "\\boxed{x = 3, x = 4}"]:
        assert rmath.score(pred, task).score == 0.0, pred
    union = Task("t", "q", "x \\in (-\\infty, 1) \\cup (3, \\infty)")
    assert rmath.score("\\boxed{x < 1 \\text{ or } x > 3}", union).score == 1.0  # a union, not a hedge


@pytest.mark.parametrize("label, expected", [
    ("x", True), ("a_{37}", True), ("(p, q)", True), ("AB", True), ("|AB|", True), ("V_1:V_2", True),
    ("\\frac{NO}{BO}", True), ("S_{\\triangle ABC}", True), ("\\angle BAC", True), ("f(x)", True), ("f(2)", True),
    ("Area", True), ("x + z", False), ("7", False), ("2x", False), ("x^2", False), ("\\frac{1}{2}", False),
    ("(1, 2)", False), ("\\pi r", False), ("x(x+1)", False),
])
def test_what_is_a_label(label, expected):
    assert math_labels.is_label(label) is expected


def test_records_and_their_order():
    assert math_items.items_of("a = 1, b = 2")[0] == "record"
    assert math_items.items_of("x = 1, x = 2")[0] == "list"  # one name twice: the roots, unordered
    assert math_items.items_of("(p, q) = (3, 2)") == ("record", ("p=3", "q=2"))
    assert math_items.items_of("p=5,q=2;p=7,q=2") == ("list", ("p=5,q=2", "p=7,q=2"))
    assert math_items.items_of("(0;-2;6)") == ("()", ("0", "-2", "6"))


@pytest.mark.parametrize("condition, expected", [
    ("x > 3", ("x", "(3,\\infty)")), ("-2 \\leq x < 7", ("x", "[-2,7)")), ("7 > x \\geq -2", ("x", "[-2,7)")),
    ("x \\neq 3", ("x", "(-\\infty,3) \\cup (3,\\infty)")), ("|t| < 3", ("t", "(-3,3)")),
    ("|t| \\geq 1", ("t", "(-\\infty,-1] \\cup [1,\\infty)")), ("1 \\leq |z| < 2", ("z", "(-2,-1] \\cup [1,2)")),
    ("0 \\leq |z| \\leq 2", ("z", "[-2,2]")), ("x < -1 or x > 2", ("x", "(-\\infty,-1) \\cup (2,\\infty)")),
    ("\\{x \\mid x > 2\\}", ("x", "(2,\\infty)")), ("0 < x < \\infty", ("x", "(0,\\infty)")), ("x > \\pi", ("x", "(\\pi,\\infty)")), ("x < 1 or y > 2", None), ("x < y", None), ("|x| < y", None),
])
def test_conditions_as_sets(condition, expected):
    assert math_ranges.as_set(condition) == expected


def test_slow_loop_matches_the_pairwise_verdicts():
    """The structure layer's set matching (with repeats) agrees with a plain loop over all items."""
    gold = ["(1,2)", "(2,1)", "(3,3)"]
    for pred in (["(2,1)", "(1,2)", "(3,3)", "(1,2)"], ["(1,2)", "(3,3)"], ["(3,3)", "(2,1)", "(1,2)"]):
        loop = all(any(rmath.is_equivalent(p, g) for g in gold) for p in pred) and \
            all(any(rmath.is_equivalent(p, g) for p in pred) for g in gold)
        assert rmath.is_equivalent(", ".join(pred), ", ".join(gold)) is loop


def test_a_gold_label_is_read_without_hedges_and_with_an_unclosed_box():
    assert rmath.extract_answer("$21,16$ or $11$", gold=True) == "21,16 or 11"
    assert rmath.extract_answer("$21,16$ or $11$") is None  # the same text as a response hedges
    assert rmath.is_equivalent("\\boxed{16, 11, 21}", "$21,16$ or $11$")
    gold = "\\boxed{W(n) = 1 \\text{ and } W(n) = -1"  # a dataset typo: the box never closes
    assert rmath.is_equivalent("\\boxed{W(x) = -1 \\text{ or } W(x) = 1}", gold)
    assert rmath.is_equivalent("W(x)=1orW(x)=-1", gold)  # "or" that lost its spaces
    assert not rmath.is_equivalent("\\boxed{W(x) = 1}", gold)
    assert not rmath.is_equivalent("\\boxed{1", "12")  # a response's unclosed box is no answer of 12
