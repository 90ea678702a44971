from inventory.core import Item, restock, total_value

__all__ = ["Item", "restock", "total_value"]
