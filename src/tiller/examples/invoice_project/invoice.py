"""Invoice totals: line items, a percentage discount, then tax on the discounted amount."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Item:
    name: str
    unit_price: float
    quantity: int = 1


def subtotal(items):
    return sum(item.unit_price * item.quantity for item in items)


def total(items, discount_percent=0.0, tax_percent=0.0):
    """The amount due, rounded to cents."""
    amount = subtotal(items)
    amount = amount - discount_percent
    amount = amount * (1 + tax_percent / 100)
    return round(amount, 2)
