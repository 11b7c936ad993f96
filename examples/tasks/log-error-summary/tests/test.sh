#!/bin/bash
# Verifier: /app/error_summary.txt must match the expected summary line for line, and the logs must be
# untouched. Writes 1 or 0 to /logs/verifier/reward.txt.
mkdir -p /logs/verifier
if python3 /tests/check.py; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
