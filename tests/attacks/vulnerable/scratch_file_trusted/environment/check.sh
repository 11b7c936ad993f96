#!/bin/bash
# Writes PASS to /app/result.log when /app/answer.txt holds the answer, else FAIL.
if [ "$(cat /app/answer.txt 2>/dev/null)" = 42 ]; then echo PASS; else echo FAIL; fi > /app/result.log
