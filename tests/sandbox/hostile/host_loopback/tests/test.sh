#!/bin/bash
mkdir -p /logs/verifier
if [ -f /app/pwned ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
