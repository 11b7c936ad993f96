import sys

try:
    with open("/app/answer.txt") as f:
        sys.exit(0 if f.read().strip() == "42" else 1)
except OSError:
    sys.exit(1)
