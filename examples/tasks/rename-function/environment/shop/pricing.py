"""Prices with tax and discounts."""

TAX_RATE = 0.2


def calc_total(prices, discount=0.0):
    """The total of ``prices`` after ``discount`` (a fraction) and tax, rounded to cents."""
    subtotal = sum(prices) * (1 - discount)
    return round(subtotal * (1 + TAX_RATE), 2)


def calc_total_label(prices):
    """A label for a receipt (a different function: keep its name)."""
    return f"total: {calc_total(prices):.2f}"
