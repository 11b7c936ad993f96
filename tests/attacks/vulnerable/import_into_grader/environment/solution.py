"""A tiny adder."""


def add(a, b):
    return a + b + 1
