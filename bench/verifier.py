"""Our math verifier (``rewards.math``) vs Math-Verify on the same cases: accuracy and speed.

    python bench/verifier.py [--limit N] [--json out.json]

Case sets (each case is ``(prediction, gold, expected verdict)``):

- ``math500``: every MATH-500 reference ``solution`` against its ``answer`` (all should verify);
- ``gsm8k+``: a model-style response made from each GSM8K test solution (calculator annotations
  removed, ``#### N`` replaced by "The answer is N.") against ``N`` (1319, all true);
- ``gsm8k-``: the same responses against the *next* problem's ``N`` (true only when the two
  numbers are equal), so that a verifier saying "yes" to everything is caught;
- ``hard``: hand-written cases in ``tests/rewards/math_hard_cases.jsonl`` (Math-Verify's known
  defects, units, percents, hedging, sets, intervals, matrices, ...).

Math-Verify is called the usual way: ``verify(parse("$" + gold + "$"), parse(pred))``, with a bare
prediction (no ``$``, ``\\boxed`` or newline) wrapped in ``$...$`` too. Both run single-threaded with
cold caches (ours are cleared, its helper restarted) after one warm-up call; verifications/s is
cases / wall time.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rewards import math as rmath  # noqa: E402
from rewards import mathnorm  # noqa: E402
from rewards._sympy_worker import _WORKER  # noqa: E402
from rewards.numeric import parse_number  # noqa: E402

DATA = ROOT / "environments" / "data"
Case = tuple[str, str, bool]


def _jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def gsm8k_response(solution: str) -> tuple[str, str]:
    """A model-style response from a GSM8K solution, and the ``#### N`` gold."""
    body, gold = solution.split("####")
    return re.sub(r"<<[^>]*>>", "", body).strip() + f"\nThe answer is {gold.strip()}.", gold.strip()


def case_sets(limit: int | None) -> dict[str, list[Case]]:
    """The four case sets described in the module docstring."""
    math500 = [(r["solution"], r["answer"], True) for r in _jsonl(DATA / "math500_test.jsonl")]
    gsm = [gsm8k_response(r["answer"]) for r in _jsonl(DATA / "gsm8k_test.jsonl")]
    pos = [(resp, gold, True) for resp, gold in gsm]
    neg = [(resp, nxt, parse_number(gold) == parse_number(nxt))
           for (resp, gold), (_, nxt) in zip(gsm, gsm[1:] + gsm[:1])]
    hard = [(c["pred"], c["gold"], c["expected"])
            for c in _jsonl(ROOT / "tests" / "rewards" / "math_hard_cases.jsonl")]
    sets = {"math500": math500, "gsm8k+": pos, "gsm8k-": neg, "hard": hard}
    return {k: v[:limit] for k, v in sets.items()} if limit else sets


def ours(pred: str, gold: str) -> bool:
    return rmath.is_equivalent(pred, gold)


def _mv_funcs() -> tuple[Callable, Callable]:
    logging.disable(logging.WARNING)
    from math_verify import parse, verify

    return parse, verify


def math_verify(pred: str, gold: str) -> bool:
    parse, verify = _mv_funcs()
    if not any(t in pred for t in ("$", "\\boxed", "\n", "\\(")):
        pred = f"${pred}$"
    try:
        return bool(verify(parse(f"${gold}$"), parse(pred)))
    except Exception:  # noqa: BLE001 - a crash is a wrong verdict
        return False


def _clear_ours() -> None:
    for fn in (rmath._extract_cached, mathnorm.normalize, mathnorm._to_number, mathnorm.structure):
        fn.cache_clear()
    _WORKER.close()
    _WORKER.start()


def _clear_mv() -> None:
    from math_verify import parser

    for name in ("parse_latex_cached", "parse_expr_cached"):
        getattr(getattr(parser, name, None), "cache_clear", lambda: None)()


def run(fn: Callable[[str, str], bool], cases: list[Case]) -> tuple[float, float, list[Case]]:
    """``(accuracy, verifications/s, wrong cases)``."""
    start = time.perf_counter()
    verdicts = [fn(p, g) for p, g, _ in cases]
    elapsed = time.perf_counter() - start
    wrong = [c for c, v in zip(cases, verdicts) if v != c[2]]
    return 1 - len(wrong) / len(cases), len(cases) / elapsed, wrong


def thread_check() -> dict[str, str]:
    """Does each verifier work when called from a non-main thread?"""
    out: dict[str, str] = {}

    def call(name: str, fn: Callable[[], bool]) -> None:
        try:
            out[name] = f"ok ({fn()})"
        except Exception as e:  # noqa: BLE001
            out[name] = f"fails: {type(e).__name__}: {str(e)[:80]}"

    parse, verify = _mv_funcs()
    threads = [threading.Thread(target=call, args=("ours", lambda: rmath.is_equivalent("x^2-1", "(x-1)(x+1)"))),
               threading.Thread(target=call, args=("math-verify", lambda: verify(parse("$x^2-1$"), parse("$(x-1)(x+1)$"))))]
    for t in threads:
        t.start()
        t.join()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=None, help="cases per set (default: all)")
    ap.add_argument("--json", default=None, help="write the results to this file")
    ap.add_argument("--show-wrong", action="store_true", help="print every wrong verdict")
    args = ap.parse_args(argv)
    ours("\\frac{1}{2}", "0.5"), math_verify("$\\frac{1}{2}$", "0.5")  # warm up imports
    rows, report = [], {}
    print("| set | cases | ours acc | math-verify acc | ours verif/s | math-verify verif/s | speed-up |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, cases in case_sets(args.limit).items():
        _clear_ours()
        acc_o, vps_o, wrong_o = run(ours, cases)
        _clear_mv()
        acc_m, vps_m, wrong_m = run(math_verify, cases)
        rows.append((name, len(cases), acc_o, acc_m, vps_o, vps_m))
        report[name] = {"cases": len(cases), "ours": {"accuracy": acc_o, "per_s": vps_o, "wrong": wrong_o},
                        "math_verify": {"accuracy": acc_m, "per_s": vps_m, "wrong": wrong_m}}
        print(f"| {name} | {len(cases)} | {acc_o:.4f} | {acc_m:.4f} | {vps_o:,.0f} | {vps_m:,.0f} | "
              f"{vps_o / vps_m:.1f}x |", flush=True)
        if args.show_wrong:
            for who, wrong in (("ours", wrong_o), ("math-verify", wrong_m)):
                for p, g, e in wrong:
                    print(f"    {who} wrong: pred={p[-80:]!r} gold={g!r} expected={e}")
    total = sum(r[1] for r in rows)
    t_o = sum(r[1] / r[4] for r in rows)
    t_m = sum(r[1] / r[5] for r in rows)
    print(f"| all | {total} | | | {total / t_o:,.0f} | {total / t_m:,.0f} | {t_m / t_o:.1f}x |")
    report["threads"] = thread_check()
    print("called from a non-main thread:", report["threads"])
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    ok = all(r[2] >= r[3] for r in rows) and t_m / t_o >= 3
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
