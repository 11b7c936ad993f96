#!/bin/bash
mkdir -p /logs/verifier
if [ "$(stat -c %s /app/fill 2>/dev/null || echo 0)" -gt 100000000 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
