#!/bin/bash
mkdir -p /logs/verifier
if a=$(cat /app/beacon 2>/dev/null); sleep 1; b=$(cat /app/beacon 2>/dev/null); [ -n "$a" ] && [ "$a" != "$b" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
