"""The numeric-answer reward: hand-written cases."""

from fractions import Fraction

import pytest

from agentrl.types import Task
from rewards.numeric import extract_number, parse_number, score


@pytest.mark.parametrize("text,value", [
    ("42", 42), ("-7", -7), ("3.50", Fraction(7, 2)), ("7/2", Fraction(7, 2)), ("1,234,567", 1234567),
    ("$12$", 12), ("12.", 12), ("\u22125", -5), ("abc", None), ("1/0", None), ("", None),
])
def test_parse_number(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize("response,gold,expected", [
    ("46", "46", 1.0),
    ("The sum is 40 + 6 = 46.", "46", 1.0),
    ("so \\boxed{46}", "46", 1.0),
    ("work... #### 1,200", "1200", 1.0),
    ("The answer is 0.5", "1/2", 1.0),
    ("The answer is 5 or 6", "5", 0.0),          # hedged
    ("\\boxed{5} ... \\boxed{6}", "5", 0.0),     # two different boxed answers
    ("no number here", "5", 0.0),
    ("45", "46", 0.0),
    ("46 is wrong, 47", "46", 0.0),               # the final number counts, not any number
])
def test_score_free_form(response, gold, expected):
    assert score(response, Task("t", "p", gold)).score == expected


def test_bare_mode_demands_only_the_number():
    t = Task("t", "p", "46")
    assert score("46", t, bare=True).score == 1.0
    assert score(" 46 ", t, bare=True).score == 1.0
    assert score("46 46", t, bare=True).score == 0.0
    assert score("x46", t, bare=True).score == 0.0
    assert score("the answer is 46", t, bare=True).info["how"] == "not_bare"


def test_extract_reports_how():
    assert extract_number("\\boxed{3}")[1] == "boxed"
    assert extract_number("blah 3 then 4")[1] == "last_number"
    assert extract_number("nothing")[1] == "missing"
    with pytest.raises(ValueError, match="not a number"):
        score("1", Task("t", "p", "seven"))
