from shop import pricing


def daily_report(carts):
    lines = [f"cart {i}: {pricing.calc_total(c.prices):.2f}" for i, c in enumerate(carts, 1)]
    lines.append(f"all: {pricing.calc_total([p for c in carts for p in c.prices]):.2f}")
    return "\n".join(lines)
