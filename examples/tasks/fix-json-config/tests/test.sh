#!/bin/bash
# Verifier: /app/config/app.json must be strict JSON holding exactly the expected settings.
mkdir -p /logs/verifier
if python3 /tests/check.py; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
