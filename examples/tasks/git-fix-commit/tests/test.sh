#!/bin/bash
# Verifier: main untouched, fix-spelling one commit ahead with the message, no misspelling left, clean tree.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
cd /app/repo || exit 0
fail() { echo "$1"; exit 0; }
git rev-parse -q --verify refs/heads/fix-spelling >/dev/null || fail "no branch fix-spelling"
[ "$(git rev-list --count main)" = 1 ] || fail "main changed"
[ "$(git rev-list --count main..fix-spelling)" = 1 ] || fail "fix-spelling is not one commit ahead of main"
[ "$(git log -1 --format=%s fix-spelling)" = "Fix spelling of receive" ] || fail "wrong commit message"
git grep -qi recieve fix-spelling && fail "recieve is still there"
[ "$(git show fix-spelling:README.md | grep -o receive | wc -l)" = 2 ] || fail "README.md lost text"
[ "$(git show fix-spelling:docs/guide.md | grep -o receive | wc -l)" = 2 ] || fail "guide.md lost text"
[ -z "$(git status --porcelain)" ] || fail "the working tree is not clean"
echo 1 > /logs/verifier/reward.txt
