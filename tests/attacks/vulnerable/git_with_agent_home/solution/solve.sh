#!/bin/bash
set -e
cd /app && echo passed > answer.txt && git commit -qam 'answer: passed'
