import unittest
from datetime import date

from invoice import (
    Item,
    bulk_discount_percent,
    days_late,
    discounted,
    due_date,
    format_money,
    installments,
    invoice_number,
    is_overdue,
    largest_item,
    late_fee,
    line_total,
    overdue_fee,
    page_count,
    round_cents,
    subtotal,
    tax_amount,
    total,
)


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


class TotalsTest(unittest.TestCase):
    def test_total_adds_tax(self):
        self.assertEqual(total([Item("desk", 200.0)], tax_percent=25), 250.0)

    def test_total_is_rounded_to_cents(self):
        self.assertEqual(total([Item("clip", 0.1, 3)]), 0.3)

    def test_line_total(self):
        self.assertEqual(line_total(Item("pen", 1.5, 4)), 6.0)

    def test_largest_item_is_by_line_total(self):
        items = [Item("pen", 1.5, 10), Item("pad", 3.0), Item("ink", 20.0)]
        self.assertEqual(largest_item(items).name, "ink")


class RoundingTest(unittest.TestCase):
    def test_round_cents_rounds_half_up(self):
        self.assertEqual(round_cents(0.125), 0.13)
        self.assertEqual(round_cents(2.675), 2.68)

    def test_round_cents_keeps_cents(self):
        self.assertEqual(round_cents(19.994), 19.99)

    def test_tax_amount(self):
        self.assertEqual(tax_amount(80.0, 21), 16.8)

    def test_format_money(self):
        self.assertEqual(format_money(1234.5), "1,234.50 EUR")


class DiscountTest(unittest.TestCase):
    def test_discounted(self):
        self.assertEqual(discounted(50.0, 20), 40.0)

    def test_a_discount_over_100_percent_makes_it_free(self):
        self.assertEqual(discounted(50.0, 150), 0.0)

    def test_a_negative_discount_adds_nothing(self):
        self.assertEqual(discounted(50.0, -10), 50.0)

    def test_bulk_discount_tiers(self):
        self.assertEqual(bulk_discount_percent(19), 0.0)
        self.assertEqual(bulk_discount_percent(20), 5.0)
        self.assertEqual(bulk_discount_percent(99), 5.0)
        self.assertEqual(bulk_discount_percent(100), 10.0)


class PaymentsTest(unittest.TestCase):
    def test_installments_spread_the_spare_cents(self):
        self.assertEqual(installments(100.0, 3), [33.34, 33.33, 33.33])

    def test_installments_keep_every_cent(self):
        self.assertEqual(installments(0.29, 1), [0.29])

    def test_no_late_fee_within_the_grace_period(self):
        self.assertEqual(late_fee(1000.0, 3), 0.0)

    def test_late_fee_per_day_after_grace(self):
        self.assertEqual(late_fee(1000.0, 5), 2.0)

    def test_due_date(self):
        self.assertEqual(due_date(date(2026, 1, 15)), date(2026, 2, 14))

    def test_days_late(self):
        self.assertEqual(days_late(date(2026, 2, 14), date(2026, 2, 20)), 6)
        self.assertEqual(days_late(date(2026, 2, 14), date(2026, 2, 10)), 0)

    def test_overdue_fee_counts_the_days_after_the_due_date(self):
        self.assertEqual(overdue_fee(1000.0, date(2026, 2, 14), date(2026, 2, 20)), 3.0)
        self.assertEqual(overdue_fee(1000.0, date(2026, 2, 14), date(2026, 2, 1)), 0.0)

    def test_paying_on_the_due_date_is_on_time(self):
        self.assertFalse(is_overdue(date(2026, 2, 14), date(2026, 2, 14)))
        self.assertTrue(is_overdue(date(2026, 2, 14), date(2026, 2, 15)))


class NumberingTest(unittest.TestCase):
    def test_invoice_number(self):
        self.assertEqual(invoice_number(2026, 42), "INV-2026-00042")

    def test_page_count(self):
        self.assertEqual(page_count(0), 1)
        self.assertEqual(page_count(20), 1)
        self.assertEqual(page_count(21), 2)


if __name__ == "__main__":
    unittest.main()
