"""Invoice totals: line items, a percentage discount, then tax on the discounted amount;
and what an invoice needs around them: rounding to cents, installments, late fees, due
dates, numbering and pagination."""

import decimal
from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class Item:
    name: str
    unit_price: float
    quantity: int = 1


def line_total(item):
    return item.unit_price * item.quantity


def subtotal(items):
    return sum(item.unit_price * item.quantity for item in items)


def total(items, discount_percent=0.0, tax_percent=0.0):
    """The amount due, rounded to cents."""
    amount = subtotal(items)
    amount = amount - discount_percent
    amount = amount * (1 + tax_percent / 100)
    return round(amount, 2)


def round_cents(amount):
    """Rounded half up to cents (0.125 -> 0.13), as invoices are; `round` rounds to even."""
    cents = decimal.Decimal(str(amount)).quantize(
        decimal.Decimal("0.01"), rounding=decimal.ROUND_HALF_UP
    )
    return float(cents)


def clamp_percent(percent):
    """A percentage held to 0..100."""
    return min(max(percent, 0.0), 100.0)


def discounted(amount, discount_percent):
    """`amount` less a discount: never more than the amount, never below zero."""
    percent = clamp_percent(discount_percent)
    return amount * (1 - percent / 100)


def tax_amount(amount, tax_percent):
    return round_cents(amount * tax_percent / 100)


def bulk_discount_percent(quantity):
    """The volume discount: 10% from 100 units, 5% from 20, none below."""
    if quantity >= 100:
        return 10.0
    if quantity >= 20:
        return 5.0
    return 0.0


def installments(amount, count):
    """`amount` split into `count` payments in cents; the first ones carry the spare cents."""
    cents = round(amount * 100)
    share, spare = divmod(cents, count)
    return [(share + (1 if i < spare else 0)) / 100 for i in range(count)]


def late_fee(amount, days, daily_percent=0.1, grace_days=3):
    """Interest for each of the `days` late past the grace period; nothing within it."""
    charged = max(0, days - grace_days)
    return round_cents(amount * daily_percent / 100 * charged)


def due_date(issued, terms_days=30):
    return issued + timedelta(days=terms_days)


def days_late(due, paid):
    """Whole days between the due date and the payment; 0 when paid on time."""
    return max(0, (paid - due).days)


def overdue_fee(amount, due, paid):
    """The late fee of a payment made on `paid` for an invoice due on `due`."""
    return late_fee(amount, days_late(due, paid))


def is_overdue(due, today):
    """Overdue from the day after the due date: paying on the due date is on time."""
    return today > due


def invoice_number(year, sequence):
    """`INV-2026-00042`: the year, then the sequence number padded to five digits."""
    return f"INV-{year}-{sequence:05d}"


def page_count(lines, per_page=20):
    """The pages an invoice's lines fill: a partly filled page is a page, and there is
    always one."""
    return max(1, -(-lines // per_page))


def largest_item(items):
    return max(items, key=line_total)


def format_money(amount, currency="EUR"):
    return f"{amount:,.2f} {currency}"
