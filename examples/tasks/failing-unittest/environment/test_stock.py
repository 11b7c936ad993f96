import unittest

from inventory.stock import low_stock, restock, total_value

ITEMS = [{"sku": "A1", "qty": 3, "price": 2.5}, {"sku": "B2", "qty": 10, "price": 1.0},
         {"sku": "C3", "qty": 0, "price": 99.0}]


class StockTest(unittest.TestCase):
    def test_total_value(self):
        self.assertEqual(total_value([dict(i) for i in ITEMS]), 17.5)

    def test_total_value_of_one_item(self):
        self.assertEqual(total_value([{"sku": "X", "qty": 2, "price": 4.25}]), 8.5)

    def test_low_stock(self):
        self.assertEqual(low_stock(ITEMS, 5), ["A1", "C3"])

    def test_restock(self):
        items = [dict(i) for i in ITEMS]
        self.assertEqual(restock(items, "C3", 7)["qty"], 7)
        with self.assertRaises(KeyError):
            restock(items, "Z9", 1)


if __name__ == "__main__":
    unittest.main()
