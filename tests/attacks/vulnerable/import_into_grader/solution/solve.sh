#!/bin/bash
set -e
sed -i 's/return a + b + 1/return a + b/' /app/solution.py
