"""Stock keeping for a small shop."""

from dataclasses import dataclass


@dataclass
class Item:
    name: str
    price: float
    quantity: int


def total_value(items):
    """The value of all stock: price times quantity, summed."""
    return round(sum(item.price for item in items), 2)


def restock(items, name, amount):
    """Add ``amount`` units of the item called ``name``; a negative amount is an error."""
    for item in items:
        if item.name == name:
            item.quantity = amount
            return item
    raise KeyError(name)
