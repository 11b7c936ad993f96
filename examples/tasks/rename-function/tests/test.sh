#!/bin/bash
# Verifier: no calc_total left (calc_total_label kept), compute_total works, the program's output unchanged.
# The program runs in its own process with /app on the path, as the task asks.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "$1"; exit 0; }
[ -z "$(grep -rwn calc_total /app/shop --include='*.py')" ] || fail "calc_total is still used"
grep -q "def calc_total_label" /app/shop/pricing.py || fail "calc_total_label was renamed"
grep -q "def compute_total" /app/shop/pricing.py || fail "no compute_total in pricing.py"
out=$(cd /tmp && PYTHONPATH=/app timeout 20 python3 -m shop.main 2>&1) || fail "shop.main failed: $out"
[ "$out" = "$(cat /tests/expected_output.txt)" ] || fail "the output changed: $out"
got=$(cd /tmp && PYTHONPATH=/app timeout 20 python3 -c 'from shop.pricing import compute_total as f; print(f([100.0], discount=0.25))')
[ "$got" = "90.0" ] || fail "compute_total([100.0], discount=0.25) gave $got"
echo 1 > /logs/verifier/reward.txt
