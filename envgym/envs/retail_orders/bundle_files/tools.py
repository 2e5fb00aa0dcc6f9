"""Retail tools over the bundle's ``db.sqlite``: customers, catalog, stock, orders, policies.

Every lookup takes exact identifiers (customer names, SKUs, order ids, category names) as the
listing tools return them.  Money is in whole US dollars unless a tool says otherwise.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from envgym.runtime import sqlite


def get_customer(name: str) -> dict[str, Any]:
    """Look a customer up by full name.

    Args:
        name: The customer's full name, e.g. "Ada Berg".

    Returns:
        name, tier (standard | silver | gold), region (the warehouse that serves them), member_since.
    """
    row = (
        sqlite()
        .execute("SELECT name, tier, region, member_since FROM customers WHERE name = ?", (name,))
        .fetchone()
    )
    if row is None:
        raise KeyError(f"no customer named {name!r}")
    return dict(row)


def get_tier_discount(tier: str) -> int:
    """The discount a membership tier gets on new purchases, in percent.

    Args:
        tier: standard, silver or gold.
    """
    row = sqlite().execute("SELECT discount_pct FROM tiers WHERE name = ?", (tier,)).fetchone()
    if row is None:
        raise KeyError(f"no tier {tier!r}; tiers are standard, silver, gold")
    return row[0]


def list_categories() -> list[str]:
    """All product categories, alphabetically."""
    return [
        r[0] for r in sqlite().execute("SELECT DISTINCT category FROM products ORDER BY category")
    ]


def list_products(category: str, min_rating: float | None = None) -> list[dict[str, Any]]:
    """Products of one category, cheapest first.

    Args:
        category: A category name from list_categories.
        min_rating: Only products rated at least this (out of 5).

    Returns:
        One entry per product: sku, name, brand, price (USD) and rating.
    """
    _category(category)
    rows = sqlite().execute(
        "SELECT sku, name, brand, price, rating FROM products WHERE category = ? AND rating >= ? "
        "ORDER BY price, sku",
        (category, -1.0 if min_rating is None else min_rating),
    )
    return [dict(r) for r in rows]


def get_product(sku: str) -> dict[str, Any]:
    """Everything about one product.

    Args:
        sku: The product's SKU, e.g. "ELE-0104".

    Returns:
        sku, name, category, brand, price (USD), rating, weight_g (shipping weight in grams) and
        final_sale (final-sale products cannot be returned).
    """
    row = (
        sqlite()
        .execute(
            "SELECT sku, name, category, brand, price, rating, weight_g, final_sale "
            "FROM products WHERE sku = ?",
            (sku,),
        )
        .fetchone()
    )
    if row is None:
        raise KeyError(f"no product with sku {sku!r}")
    out = dict(row)
    out["final_sale"] = bool(out["final_sale"])
    return out


def get_stock(sku: str, region: str) -> int:
    """Units of a product on hand at one regional warehouse.

    Args:
        sku: The product's SKU.
        region: north, south, east or west.
    """
    row = (
        sqlite()
        .execute("SELECT quantity FROM stock WHERE sku = ? AND region = ?", (sku, region))
        .fetchone()
    )
    if row is None:
        raise KeyError(f"no stock record for {sku!r} in region {region!r}")
    return row[0]


def list_orders(customer: str) -> list[dict[str, Any]]:
    """A customer's orders, oldest first.

    Args:
        customer: The customer's full name.

    Returns:
        order_id, order_date, status (delivered | shipped | cancelled) and delivered_date (or null).
    """
    row = sqlite().execute("SELECT id FROM customers WHERE name = ?", (customer,)).fetchone()
    if row is None:
        raise KeyError(f"no customer named {customer!r}")
    rows = sqlite().execute(
        "SELECT order_id, order_date, status, delivered_date FROM orders "
        "WHERE customer_id = ? ORDER BY order_date, order_id",
        (row[0],),
    )
    return [dict(r) for r in rows]


def get_order_lines(order_id: str) -> list[dict[str, Any]]:
    """The lines of one order.

    Args:
        order_id: An order id from list_orders, e.g. "ORD-10234".

    Returns:
        One entry per line: sku, quantity and unit_price (USD actually paid per unit).
    """
    if sqlite().execute("SELECT 1 FROM orders WHERE order_id = ?", (order_id,)).fetchone() is None:
        raise KeyError(f"no order {order_id!r}")
    rows = sqlite().execute(
        "SELECT sku, quantity, unit_price FROM order_lines WHERE order_id = ? ORDER BY sku",
        (order_id,),
    )
    return [dict(r) for r in rows]


def get_return_policy(category: str) -> dict[str, int]:
    """The return policy of a category.

    Args:
        category: A category name from list_categories.

    Returns:
        window_days (a line can be returned while the days since delivery are at most this) and
        restocking_fee_pct (deducted from the refund, in percent).
    """
    _category(category)
    row = (
        sqlite()
        .execute(
            "SELECT window_days, restocking_fee_pct FROM return_policies WHERE category = ?",
            (category,),
        )
        .fetchone()
    )
    return dict(row)


def days_between(start_date: str, end_date: str) -> int:
    """Whole days from start_date to end_date (negative when end_date is earlier).

    Args:
        start_date: YYYY-MM-DD.
        end_date: YYYY-MM-DD.
    """
    return (_dt.date.fromisoformat(end_date) - _dt.date.fromisoformat(start_date)).days


def submit_result(answer_text: str) -> str:
    """Submit the final answer; this ends the task.

    Args:
        answer_text: The answer as JSON text, in the format the task asks for.
    """
    return "submitted"


def _category(category: str) -> None:
    if (
        sqlite()
        .execute("SELECT 1 FROM products WHERE category = ? LIMIT 1", (category,))
        .fetchone()
        is None
    ):
        raise KeyError(f"no category {category!r}; see list_categories()")
