"""Tests the agent never sees: the same library on other inputs."""
import unittest

from inventory.stock import low_stock, total_value


class HiddenStockTest(unittest.TestCase):
    def test_empty(self):
        self.assertEqual(total_value([]), 0)

    def test_many(self):
        items = [{"sku": str(i), "qty": i, "price": 0.5} for i in range(1, 11)]
        self.assertEqual(total_value(items), 27.5)

    def test_low_stock_keeps_order(self):
        items = [{"sku": "z", "qty": 1, "price": 1}, {"sku": "a", "qty": 0, "price": 1}]
        self.assertEqual(low_stock(items, 2), ["z", "a"])


if __name__ == "__main__":
    unittest.main()
