#!/bin/bash
# Verifier: the script runs as a command (executable, with a python shebang) and greets the right name.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
fail() { echo "$1"; exit 0; }
f=/app/bin/hello.py
[ -x "$f" ] || fail "$f is not executable"
head -n1 "$f" | grep -Eq '^#!.*python' || fail "$f has no python shebang on its first line"
cd /tmp || exit 0
[ "$(timeout 10 "$f" Grace 2>&1)" = "Hello, Grace!" ] || fail "wrong greeting with an argument"
[ "$(timeout 10 "$f" 2>&1)" = "Hello, world!" ] || fail "wrong greeting without an argument"
[ "$(timeout 10 "$f" 'Jo Ann' 2>&1)" = "Hello, Jo Ann!" ] || fail "wrong greeting for a name with a space"
echo 1 > /logs/verifier/reward.txt
