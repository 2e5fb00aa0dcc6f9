"""The retail database: SQLAlchemy models and a seeded generator writing ``db.sqlite``.

Same seed, same rows: everything is drawn from one ``random.Random(seed)`` in a fixed order and
the file is VACUUM-ed.  Within one customer's history every SKU appears at most once, so an
``(order_id, sku)`` pair names one order line and a swapped pair names none.
"""

from __future__ import annotations

import math
import random
from datetime import date, timedelta
from pathlib import Path

from sqlalchemy import Boolean, Float, ForeignKey, Integer, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from envgym.envs.procedural_kit.build import write_rows
from envgym.envs.retail_orders import reference as ref

HISTORY_START = date(2025, 1, 6)
HISTORY_DAYS = 60
N_CUSTOMERS = 30


class Base(DeclarativeBase):
    pass


class Customer(Base):
    __tablename__ = "customers"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String, unique=True)
    tier: Mapped[str] = mapped_column(String)
    region: Mapped[str] = mapped_column(String)
    member_since: Mapped[str] = mapped_column(String)


class Tier(Base):
    __tablename__ = "tiers"
    name: Mapped[str] = mapped_column(String, primary_key=True)
    discount_pct: Mapped[int] = mapped_column(Integer)


class Policy(Base):
    __tablename__ = "return_policies"
    category: Mapped[str] = mapped_column(String, primary_key=True)
    window_days: Mapped[int] = mapped_column(Integer)
    restocking_fee_pct: Mapped[int] = mapped_column(Integer)


class Product(Base):
    __tablename__ = "products"
    sku: Mapped[str] = mapped_column(String, primary_key=True)
    name: Mapped[str] = mapped_column(String, unique=True)
    category: Mapped[str] = mapped_column(String, index=True)
    brand: Mapped[str] = mapped_column(String)
    price: Mapped[int] = mapped_column(Integer)  # USD, whole dollars
    rating: Mapped[float] = mapped_column(Float)
    weight_g: Mapped[int] = mapped_column(Integer)
    final_sale: Mapped[bool] = mapped_column(Boolean)


class Stock(Base):
    __tablename__ = "stock"
    sku: Mapped[str] = mapped_column(ForeignKey("products.sku"), primary_key=True)
    region: Mapped[str] = mapped_column(String, primary_key=True)
    quantity: Mapped[int] = mapped_column(Integer)


class Order(Base):
    __tablename__ = "orders"
    order_id: Mapped[str] = mapped_column(String, primary_key=True)
    customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id"), index=True)
    order_date: Mapped[str] = mapped_column(String)
    status: Mapped[str] = mapped_column(String)  # delivered | shipped | cancelled
    delivered_date: Mapped[str | None] = mapped_column(String, nullable=True)


class OrderLine(Base):
    __tablename__ = "order_lines"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    order_id: Mapped[str] = mapped_column(ForeignKey("orders.order_id"), index=True)
    sku: Mapped[str] = mapped_column(ForeignKey("products.sku"))
    quantity: Mapped[int] = mapped_column(Integer)
    unit_price: Mapped[int] = mapped_column(Integer)  # what the customer paid per unit


def write_db(path: Path, seed: int) -> Path:
    """Generate the database for ``seed`` into ``path`` (which must not exist yet)."""
    return write_rows(path, Base, _rows(random.Random(f"retail-orders:{seed}")))


def _rows(rng: random.Random) -> list[Base]:
    rows: list[Base] = [Tier(name=t, discount_pct=p) for t, p in ref.TIERS]
    products: list[Product] = []
    for category, (window, fee, brands, items) in ref.CATEGORIES.items():
        rows.append(Policy(category=category, window_days=window, restocking_fee_pct=fee))
        for noun, lo, hi, grams in items:
            for variant in rng.sample(ref.VARIANTS, rng.randint(1, 3)):
                # Two in five products carry a store-wide house brand, so two categories can
                # share a brand and the distinct-brands rule can bind (and fail on its own).
                brand = rng.choice(ref.HOUSE_BRANDS) if rng.random() < 0.4 else rng.choice(brands)
                price = round(math.exp(rng.uniform(math.log(lo), math.log(hi))))
                products.append(
                    Product(
                        sku=f"{category[:3].upper()}-{len(products) + 101:04d}",
                        name=f"{brand} {noun} {variant}",
                        category=category,
                        brand=brand,
                        price=price,
                        rating=round(rng.uniform(2.8, 4.9), 1),
                        weight_g=int(grams * rng.uniform(0.8, 1.25)),
                        final_sale=rng.random() < 0.2,
                    )
                )
    rows += products
    for p in products:
        for region in ref.REGIONS:
            rows.append(
                Stock(
                    sku=p.sku,
                    region=region,
                    quantity=0 if rng.random() < 0.3 else rng.randint(1, 25),
                )
            )
    names: set[str] = set()
    order_no = 10_000
    for cid in range(1, N_CUSTOMERS + 1):
        while (name := f"{rng.choice(ref.FIRST_NAMES)} {rng.choice(ref.LAST_NAMES)}") in names:
            pass
        names.add(name)
        tier = rng.choices([t for t, _ in ref.TIERS], weights=[5, 3, 2])[0]
        since = HISTORY_START - timedelta(days=rng.randint(30, 1500))
        rows.append(
            Customer(
                id=cid,
                name=name,
                tier=tier,
                region=rng.choice(ref.REGIONS),
                member_since=since.isoformat(),
            )
        )
        bought: set[str] = set()
        for _ in range(rng.randint(6, 12)):
            order_no += rng.randint(1, 40)
            ordered = HISTORY_START + timedelta(days=rng.randint(0, HISTORY_DAYS))
            status = rng.choices(["delivered", "shipped", "cancelled"], weights=[6, 2, 2])[0]
            delivered = (
                (ordered + timedelta(days=rng.randint(2, 7))).isoformat()
                if status == "delivered"
                else None
            )
            oid = f"ORD-{order_no}"
            rows.append(
                Order(
                    order_id=oid,
                    customer_id=cid,
                    order_date=ordered.isoformat(),
                    status=status,
                    delivered_date=delivered,
                )
            )
            for p in rng.sample(products, rng.randint(1, 3)):
                if p.sku in bought:
                    continue
                bought.add(p.sku)
                paid = max(1, round(p.price * rng.choice([1.0, 1.0, 0.9, 0.8])))
                rows.append(
                    OrderLine(
                        order_id=oid,
                        sku=p.sku,
                        quantity=rng.choice([1, 1, 1, 2, 3]),
                        unit_price=paid,
                    )
                )
    return rows
