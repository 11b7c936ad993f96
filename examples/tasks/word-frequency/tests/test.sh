#!/bin/bash
# Verifier: /app/top_words.txt equals the expected ten lines (spacing aside).
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
[ -f /app/top_words.txt ] || { echo "no /app/top_words.txt"; exit 0; }
if diff <(awk 'NF { print $1, $2 }' /app/top_words.txt) /tests/expected.txt; then
    echo 1 > /logs/verifier/reward.txt
fi
