#!/bin/bash
# Verifier: the visible tests unchanged, and they and the hidden tests pass (run_tests.py runs them in a
# child as the testee and judges its report; the agent's code never runs in a process of the grader's).
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
if [ "$(sha256sum /app/test_stock.py 2>/dev/null | cut -d' ' -f1)" != "$(cat /tests/test_stock.sha256)" ]; then
    echo "test_stock.py was changed"
    exit 0
fi
python3 -I /tests/run_tests.py && echo 1 > /logs/verifier/reward.txt
exit 0
