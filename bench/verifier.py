"""Our math verifier (``rewards.math``) vs Math-Verify on the grader-test corpus: accuracy and speed.

    python bench/verifier.py [--anchors] [--json out.json] [--show-wrong]

Cases: ``tests/rewards/corpus/*.jsonl`` (the public test suites of Math-Verify, Hendrycks MATH,
Qwen2.5-Math and MARIO_EVAL, plus our cases per failure class; ``disputed.jsonl`` is left out; see
``SOURCES.md``). ``--anchors`` adds three sanity sets: every MATH-500 reference solution against its
answer, a model-style response made from each GSM8K test solution against its ``#### N``, and the
same responses against the next problem's ``N`` (true only when equal).

Math-Verify is called plainly, ``verify(parse(gold), parse(pred))``, our verifier as
``rewards.math.is_equivalent(pred, gold)``. Each runs cold in a fresh process of its own: imports
done and one warm-up call on a pair outside the corpus (for ours that also starts its sympy helper
process, the counterpart of Math-Verify importing sympy), no result cache, one thread, then every
case once; verifications/s is cases / wall time, and the slowest single check is reported. Not a
timed test: run it by hand (``make bench`` runs it too).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "rewards" / "corpus"
DATA = ROOT / "environments" / "data"
SOURCES = ["math_verify", "hendrycks_math", "qwen25_math", "mario_eval", "ours"]
VERIFIERS = ["ours", "math-verify"]


def _jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _gsm8k_response(solution: str) -> tuple[str, str]:
    body, gold = solution.split("####")
    return re.sub(r"<<[^>]*>>", "", body).strip() + f"\nThe answer is {gold.strip()}.", gold.strip()


def load_cases(anchors: bool) -> list[dict]:
    """The corpus (and with ``anchors`` the MATH-500 / GSM8K sets) as ``{gold, pred, expected, source}``."""
    cases = [c for name in SOURCES for c in _jsonl(CORPUS / f"{name}.jsonl")]
    if anchors:
        cases += [{"gold": r["answer"], "pred": r["solution"], "expected": True, "source": "anchor:math500"}
                  for r in _jsonl(DATA / "math500_test.jsonl")]
        gsm = [_gsm8k_response(r["answer"]) for r in _jsonl(DATA / "gsm8k_test.jsonl")]
        cases += [{"gold": g, "pred": p, "expected": True, "source": "anchor:gsm8k+"} for p, g in gsm]
        cases += [{"gold": nxt, "pred": p, "expected": float(g.replace(",", "")) == float(nxt.replace(",", "")),
                   "source": "anchor:gsm8k-"} for (p, g), (_, nxt) in zip(gsm, gsm[1:] + gsm[:1])]
    return cases


def _verifier(name: str):
    """The verification function, imported and warmed up (see the module docstring)."""
    if name == "ours":
        from rewards import math as rmath
        from rewards._sympy_worker import prestart

        prestart(wait=True)
        rmath.is_equivalent("\\frac{1}{2}", "0.5")
        return lambda pred, gold: rmath.is_equivalent(pred, gold)
    import logging

    logging.disable(logging.WARNING)
    from math_verify import parse, verify

    verify(parse("$\\frac{1}{2}$"), parse("0.5"))

    def mv(pred: str, gold: str) -> bool:
        try:
            return bool(verify(parse(gold), parse(pred)))
        except Exception:  # noqa: BLE001 - a crash is a wrong verdict
            return False

    return mv


def worker(name: str, anchors: bool) -> dict:
    """Run one verifier over every case in this (fresh) process."""
    cases = load_cases(anchors)
    fn = _verifier(name)
    verdicts, slowest = [], (0.0, -1)
    start = time.perf_counter()
    for i, c in enumerate(cases):
        t0 = time.perf_counter()
        verdicts.append(bool(fn(c["pred"], c["gold"])))
        slowest = max(slowest, (time.perf_counter() - t0, i))
    elapsed = time.perf_counter() - start
    return {"verdicts": verdicts, "elapsed": elapsed, "slowest_s": slowest[0], "slowest_case": slowest[1]}


def _run_fresh(name: str, anchors: bool) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name] + (["--anchors"] if anchors else [])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _table(cases: list[dict], results: dict[str, dict]) -> tuple[list[str], bool]:
    sources = list(dict.fromkeys(c["source"] for c in cases))
    lines = ["| source | cases | ours | math-verify |", "|---|---:|---:|---:|"]
    ok = True
    for src in sources + ["all"]:
        idx = [i for i, c in enumerate(cases) if src in ("all", c["source"])]
        acc = {v: sum(results[v]["verdicts"][i] == cases[i]["expected"] for i in idx) for v in VERIFIERS}
        ok &= src == "all" or acc["ours"] >= acc["math-verify"]
        lines.append(f"| {src} | {len(idx)} | {acc['ours']}/{len(idx)} = {acc['ours'] / len(idx):.1%} | "
                     f"{acc['math-verify']}/{len(idx)} = {acc['math-verify'] / len(idx):.1%} |")
    lines += ["", "| verifier | verifications/s (cold, fresh process) | wall s | slowest check |", "|---|---:|---:|---|"]
    for v in VERIFIERS:
        r = results[v]
        case = cases[r["slowest_case"]]
        lines.append(f"| {v} | {len(cases) / r['elapsed']:,.0f} | {r['elapsed']:.2f} | {r['slowest_s'] * 1000:.0f} ms "
                     f"({case['source']}: gold {case['gold'][:30]!r}) |")
    speedup = results["math-verify"]["elapsed"] / results["ours"]["elapsed"]
    lines.append(f"\nspeed-up: {speedup:.1f}x")
    return lines, ok and speedup >= 3 and results["ours"]["slowest_s"] < 1.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--anchors", action="store_true", help="add the MATH-500 / GSM8K sanity sets")
    ap.add_argument("--json", default=None, help="write the per-case verdicts to this file")
    ap.add_argument("--show-wrong", action="store_true", help="print every wrong verdict")
    ap.add_argument("--worker", choices=VERIFIERS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.anchors)))
        return 0
    cases = load_cases(args.anchors)
    results = {v: _run_fresh(v, args.anchors) for v in VERIFIERS}
    lines, ok = _table(cases, results)
    print("\n".join(lines))
    if args.show_wrong:
        for v in VERIFIERS:
            for c, verdict in zip(cases, results[v]["verdicts"]):
                if verdict != c["expected"]:
                    print(f"  {v} wrong [{c['source']}]: gold={c['gold'][-60:]!r} pred={c['pred'][-80:]!r}")
    if args.json:
        Path(args.json).write_text(json.dumps({"cases": cases, "results": results}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
