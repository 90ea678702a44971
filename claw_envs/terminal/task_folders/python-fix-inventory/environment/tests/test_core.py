import pytest
from inventory import Item, restock, total_value


def stock():
    return [Item("pen", 1.5, 10), Item("book", 12.0, 2)]


def test_total_value():
    assert total_value(stock()) == 39.0


def test_restock_adds():
    items = stock()
    assert restock(items, "pen", 5).quantity == 15


def test_restock_refuses_negative():
    with pytest.raises(ValueError):
        restock(stock(), "pen", -1)
