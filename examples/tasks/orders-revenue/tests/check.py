import sys

EXPECTED = ["customer,orders,revenue", "globex,2,78.02", "acme,2,37.30", "hooli,1,20.49", "umbrella,1,0.00"]
try:
    got = [line.strip() for line in open("/app/revenue.csv").read().splitlines() if line.strip()]
except OSError as e:
    sys.exit(str(e))
if got != EXPECTED:
    sys.exit(f"expected {EXPECTED}, got {got}")
print("ok")
