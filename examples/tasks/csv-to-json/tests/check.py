import json
import math
import sys

EMPLOYEES = [
    {"id": 7, "name": "Okafor, Chidi", "department": "Engineering", "salary": 98000, "start_date": "2019-04-01"},
    {"id": 3, "name": "Maria Lopez", "department": "Sales", "salary": 61000.5, "start_date": "2021-11-15"},
    {"id": 12, "name": "Sam O'Neil", "department": "Engineering", "salary": 105500, "start_date": "2016-02-29"},
    {"id": 5, "name": "Nguyen, An", "department": "Support", "salary": 48250, "start_date": "2023-01-09"},
    {"id": 9, "name": "Priya Raman", "department": "Sales", "salary": 72000, "start_date": "2018-07-23"},
    {"id": 21, "name": "Tomás Ibáñez", "department": "Support", "salary": 51000, "start_date": "2020-05-18"},
]
TOTALS = {"Engineering": 203500, "Sales": 133000.5, "Support": 99250}


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"{path}: {e}")


def same(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(a, b, rel_tol=0, abs_tol=1e-6)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


employees = load("/app/data/employees.json")
if not same(employees, EMPLOYEES) or not all(type(e.get("id")) is int for e in employees):
    sys.exit(f"employees.json: expected {EMPLOYEES}, got {employees}")
totals = load("/app/data/salary_by_department.json")
if not same(totals, TOTALS):
    sys.exit(f"salary_by_department.json: expected {TOTALS}, got {totals}")
print("ok")
