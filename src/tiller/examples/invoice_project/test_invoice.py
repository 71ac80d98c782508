import unittest

from invoice import Item, subtotal, total


class InvoiceTest(unittest.TestCase):
    def test_subtotal(self):
        items = [Item("pen", 1.5, 4), Item("pad", 3.0)]
        self.assertEqual(subtotal(items), 9.0)

    def test_total_without_discount_or_tax(self):
        self.assertEqual(total([Item("pen", 2.0, 5)]), 10.0)

    def test_discount_is_a_percentage(self):
        self.assertEqual(total([Item("desk", 200.0)], discount_percent=10), 180.0)

    def test_tax_applies_after_discount(self):
        self.assertEqual(total([Item("desk", 200.0)], discount_percent=10, tax_percent=25), 225.0)


if __name__ == "__main__":
    unittest.main()
