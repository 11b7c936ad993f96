#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/answer 2>/dev/null)" = 'SECRET-7f3a9c' ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
