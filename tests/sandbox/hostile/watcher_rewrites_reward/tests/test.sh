#!/bin/bash
mkdir -p /logs/verifier
sleep 1
[ -f /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
