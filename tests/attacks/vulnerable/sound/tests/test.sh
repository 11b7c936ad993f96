#!/bin/bash
# Sound: compares a file with the shell's own builtins; runs nothing the agent left.
mkdir -p /logs/verifier
read -r got < /app/out.txt 2>/dev/null
if [ "$got" = "42" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
