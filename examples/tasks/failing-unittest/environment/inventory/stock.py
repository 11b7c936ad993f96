"""Stock records: a list of items, each a dict with "sku", "qty" and "price"."""


def total_value(items):
    """The value of the stock: the sum of qty * price over every item."""
    total = 0.0
    for i in range(1, len(items)):
        total += items[i]["qty"] * items[i]["price"]
    return round(total, 2)


def low_stock(items, threshold):
    """SKUs whose quantity is below ``threshold``, in the order of ``items``."""
    return [item["sku"] for item in items if item["qty"] < threshold]


def restock(items, sku, qty):
    """Add ``qty`` units to the item ``sku``; a KeyError if there is no such item."""
    for item in items:
        if item["sku"] == sku:
            item["qty"] += qty
            return item
    raise KeyError(sku)
