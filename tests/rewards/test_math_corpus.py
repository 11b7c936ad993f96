"""rewards.math against the field's grader test suites (tests/rewards/corpus, see SOURCES.md)."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from rewards import math as rmath
from rewards import math_compare
from tests.rewards.conftest import HERE, read_jsonl

CORPUS_DIR = HERE / "corpus"
SOURCES = ["math_verify", "hendrycks_math", "qwen25_math", "mario_eval", "ours"]
CASES = [c for name in SOURCES for c in read_jsonl(CORPUS_DIR / f"{name}.jsonl")]


def _wrong(cases: list[dict]) -> list[dict]:
    return [c for c in cases if rmath.is_equivalent(c["pred"], c["gold"]) != c["expected"]]


def test_corpus_files_are_well_formed():
    assert len(CASES) >= 400
    for c in CASES:
        assert set(c) >= {"gold", "pred", "expected", "source"} and isinstance(c["expected"], bool)
    assert {c["source"] for c in CASES} == set(SOURCES)
    assert (CORPUS_DIR / "SOURCES.md").exists()


def test_at_least_98_percent_on_the_combined_corpus():
    wrong = _wrong(CASES)
    accuracy = 1 - len(wrong) / len(CASES)
    detail = "\n".join(f"[{c['source']}] gold={c['gold'][-60:]!r} pred={c['pred'][-60:]!r}" for c in wrong)
    assert accuracy >= 0.98, f"{accuracy:.4f}; wrong:\n{detail}"


@pytest.mark.parametrize("source", SOURCES)
def test_every_source_is_mostly_right(source):
    cases = [c for c in CASES if c["source"] == source]
    assert 1 - len(_wrong(cases)) / len(cases) >= 0.95


def test_hedges_score_zero():
    hedges = [c for c in CASES if c.get("category") == "hedge"]
    assert len(hedges) >= 8
    assert _wrong(hedges) == []


def test_no_false_positive_on_the_negative_cases():
    """Saying "equal" to a wrong answer trains the wrong policy: every expected-False case holds."""
    negatives = [c for c in CASES if not c["expected"]]
    assert len(negatives) >= 80
    assert [(c["gold"][-40:], c["pred"][-40:]) for c in _wrong(negatives)] == []


def test_the_fast_path_decides_almost_everything():
    """The speed design: sympy (the helper process) is needed for at most 2% of the corpus."""
    paths: Counter[str] = Counter()
    for c in CASES:
        g = rmath.extract(c["gold"])
        gold = ", ".join(g.values) if g.values else g.answer
        p = rmath.extract(c["pred"])
        pred = ", ".join(p.values) if p.values and (g.values or rmath._several(gold or "")) else p.answer
        if gold is None or pred is None:
            paths["extraction"] += 1
            continue
        decided = math_compare.equal(pred, gold) is not None or math_compare.has_or(pred)
        paths["fast" if decided else "slow"] += 1
    assert paths["slow"] <= 0.02 * len(CASES), paths


@pytest.mark.slow
def test_no_single_check_takes_a_second():
    from rewards._sympy_worker import prestart

    prestart(wait=True)
    slowest = (0.0, None)
    for c in CASES:
        t0 = time.perf_counter()
        rmath.is_equivalent(c["pred"], c["gold"])
        slowest = max(slowest, (time.perf_counter() - t0, c["gold"][:40]), key=lambda x: x[0])
    assert slowest[0] < 1.0, slowest


@pytest.mark.slow
def test_at_least_as_right_as_math_verify_on_every_source():
    """Math-Verify's plain ``verify(parse(gold), parse(pred))`` on the same cases (tens of seconds)."""
    import logging

    logging.disable(logging.WARNING)
    from math_verify import parse, verify

    def mv(c: dict) -> bool:
        try:
            return bool(verify(parse(c["gold"]), parse(c["pred"])))
        except Exception:  # noqa: BLE001 - a crash is a wrong verdict
            return False

    for source in SOURCES:
        cases = [c for c in CASES if c["source"] == source]
        ours = sum(rmath.is_equivalent(c["pred"], c["gold"]) == c["expected"] for c in cases)
        theirs = sum(mv(c) == c["expected"] for c in cases)
        assert ours >= theirs, (source, ours, theirs)
