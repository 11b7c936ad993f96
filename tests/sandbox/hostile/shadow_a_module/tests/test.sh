#!/bin/bash
mkdir -p /logs/verifier
cd /app
python3 /tests/check.py
