#!/bin/bash
# Verifier: /app/revenue.csv equals the expected table (line endings and a final newline aside).
mkdir -p /logs/verifier
if python3 /tests/check.py; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
