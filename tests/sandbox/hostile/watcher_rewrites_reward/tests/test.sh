#!/bin/bash
mkdir -p /logs/verifier
sleep 1
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt  # it exists from the start, empty
