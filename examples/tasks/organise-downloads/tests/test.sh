#!/bin/bash
# Verifier: every file where the manifest says, with its contents; no file left at the top level.
mkdir -p /logs/verifier
if python3 /tests/check.py; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
