"""A read-only, in-memory view of a retail database, for the host-side task drawer."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from envgym.envs.retail_orders import data as db


@dataclass(frozen=True)
class ProductRow:
    sku: str
    category: str
    brand: str
    price: int
    rating: float
    weight_g: int
    final_sale: bool


@dataclass(frozen=True)
class LineRow:
    order_id: str
    sku: str
    category: str
    refund: float  # after the category's restocking fee
    delivered: str | None


@dataclass(frozen=True)
class CustomerRow:
    name: str
    tier: str
    region: str
    discount_pct: int


@dataclass(frozen=True)
class World:
    customers: tuple[CustomerRow, ...]
    products: dict[str, ProductRow]  # by sku
    by_category: dict[str, tuple[ProductRow, ...]]
    stock: dict[tuple[str, str], int]  # (sku, region) -> quantity
    purchased: dict[str, frozenset[str]]  # customer -> skus ever ordered
    lines: dict[str, tuple[LineRow, ...]]  # customer -> delivered order lines
    windows: dict[str, int]  # category -> return window days
    # customer -> every (order_id, sku) of their orders, any status; and each line's refund
    owned_lines: dict[str, tuple[tuple[str, str], ...]]
    refunds: dict[tuple[str, str], float]

    def returnable(self, customer: str, as_of: str, exclude: str | None = None) -> list[LineRow]:
        """Lines the return rules allow (delivered, inside the window, not final sale)."""
        today = date.fromisoformat(as_of)
        out = []
        for line in self.lines[customer]:
            if (
                line.delivered is None
                or self.products[line.sku].final_sale
                or line.category == exclude
            ):
                continue
            age = (today - date.fromisoformat(line.delivered)).days
            if 0 <= age <= self.windows[line.category]:
                out.append(line)
        return out


def load_world(path: Path) -> World:
    engine = create_engine(f"sqlite:///{Path(path)}")
    try:
        with Session(engine) as s:
            tiers = {t.name: t.discount_pct for t in s.scalars(select(db.Tier))}
            policies = {p.category: p for p in s.scalars(select(db.Policy))}
            products = {
                p.sku: ProductRow(
                    p.sku, p.category, p.brand, p.price, p.rating, p.weight_g, p.final_sale
                )
                for p in s.scalars(select(db.Product).order_by(db.Product.sku))
            }
            customers = {
                c.id: CustomerRow(c.name, c.tier, c.region, tiers[c.tier])
                for c in s.scalars(select(db.Customer).order_by(db.Customer.id))
            }
            stock = {(r.sku, r.region): r.quantity for r in s.scalars(select(db.Stock))}
            orders = {o.order_id: o for o in s.scalars(select(db.Order))}
            purchased: dict[str, set[str]] = defaultdict(set)
            lines: dict[str, list[LineRow]] = defaultdict(list)
            owned: dict[str, list[tuple[str, str]]] = defaultdict(list)
            refunds: dict[tuple[str, str], float] = {}
            for line in s.scalars(
                select(db.OrderLine).order_by(db.OrderLine.order_id, db.OrderLine.sku)
            ):
                order = orders[line.order_id]
                who = customers[order.customer_id].name
                purchased[who].add(line.sku)
                owned[who].append((line.order_id, line.sku))
                category = products[line.sku].category
                fee = policies[category].restocking_fee_pct
                refund = round(line.unit_price * line.quantity * (100 - fee) / 100, 2)
                refunds[(line.order_id, line.sku)] = refund
                if order.status == "delivered":
                    lines[who].append(
                        LineRow(line.order_id, line.sku, category, refund, order.delivered_date)
                    )
    finally:
        engine.dispose()
    by_category: dict[str, list[ProductRow]] = defaultdict(list)
    for p in products.values():
        by_category[p.category].append(p)
    names = [c.name for c in customers.values()]
    return World(
        customers=tuple(customers.values()),
        products=products,
        by_category={k: tuple(v) for k, v in sorted(by_category.items())},
        stock=stock,
        purchased={n: frozenset(purchased[n]) for n in names},
        lines={n: tuple(lines[n]) for n in names},
        windows={c: p.window_days for c, p in policies.items()},
        owned_lines={n: tuple(owned[n]) for n in names},
        refunds=refunds,
    )
