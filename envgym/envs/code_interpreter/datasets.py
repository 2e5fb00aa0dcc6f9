"""Generated datasets for data-science tasks: two CSV files and one SQLite database.

Deterministic in the seed; plain ``random`` so the files are identical on every machine.
The SQLite database is built with SQLAlchemy (the project's database layer) on the host.
"""

from __future__ import annotations

import csv
import random
from datetime import date, timedelta
from pathlib import Path

from sqlalchemy import (
    Column,
    Date,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Table,
    create_engine,
    insert,
)

REGIONS = ("North", "South", "East", "West")
PRODUCTS = {"Widget": 12.5, "Gadget": 29.0, "Doohickey": 7.25, "Gizmo": 54.0, "Sprocket": 3.8}
CITIES = ("Oslo", "Lima", "Perth", "Tunis")
DEPARTMENTS = ("Engineering", "Sales", "Support", "Finance", "Research")
FIRST = (
    "Ada",
    "Bo",
    "Cy",
    "Dee",
    "Eli",
    "Fay",
    "Gus",
    "Hal",
    "Ivy",
    "Jo",
    "Kai",
    "Lu",
    "Max",
    "Nia",
    "Oz",
)
LAST = ("Park", "Reyes", "Smith", "Tanaka", "Okafor", "Novak", "Ito", "Silva", "Berg", "Khan")


def write_sales(path: Path, rng: random.Random, rows: int = 240) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(
            ["order_id", "date", "region", "product", "units", "unit_price", "customer_type"]
        )
        for i in range(rows):
            day = date(2024, 1, 1) + timedelta(days=rng.randrange(366))
            product = rng.choice(list(PRODUCTS))
            price = round(PRODUCTS[product] * rng.uniform(0.85, 1.15), 2)
            out.writerow([1000 + i, day.isoformat(), rng.choice(REGIONS), product, rng.randint(1, 20),
                          f"{price:.2f}", rng.choice(("new", "returning"))])  # fmt: skip


def write_weather(path: Path, rng: random.Random) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow(["date", "city", "temp_c", "precip_mm"])
        for offset, city in enumerate(CITIES):
            base = 8.0 + 6 * offset
            for d in range(120):
                day = date(2023, 3, 1) + timedelta(days=d)
                rain = round(rng.expovariate(0.4), 1) if rng.random() < 0.35 else 0.0
                out.writerow(
                    [
                        day.isoformat(),
                        city,
                        f"{base + rng.gauss(0, 4) - 0.3 * rain:.1f}",
                        f"{rain:.1f}",
                    ]
                )


def write_staff(path: Path, rng: random.Random, employees: int = 60) -> None:
    engine = create_engine(f"sqlite:///{path}")
    meta = MetaData()
    departments = Table("departments", meta, Column("id", Integer, primary_key=True),
                        Column("name", String, nullable=False), Column("budget", Float, nullable=False))  # fmt: skip
    staff = Table(
        "employees", meta,
        Column("id", Integer, primary_key=True), Column("name", String, nullable=False),
        Column("department_id", Integer, ForeignKey("departments.id"), nullable=False),
        Column("salary", Integer, nullable=False), Column("hire_date", Date, nullable=False),
        Column("manager_id", Integer, ForeignKey("employees.id"), nullable=True),
    )  # fmt: skip
    meta.create_all(engine)
    with engine.begin() as conn:
        conn.execute(insert(departments), [
            {"id": i + 1, "name": n, "budget": float(rng.randrange(400_000, 1_500_000, 10_000))}
            for i, n in enumerate(DEPARTMENTS)
        ])  # fmt: skip
        rows = []
        for i in range(employees):
            rows.append({
                "id": i + 1,
                "name": f"{rng.choice(FIRST)} {rng.choice(LAST)}",
                "department_id": rng.randint(1, len(DEPARTMENTS)),
                "salary": rng.randrange(42_000, 160_000, 500),
                "hire_date": date(2012, 1, 1) + timedelta(days=rng.randrange(12 * 365)),
                "manager_id": rng.randint(1, i) if i > 4 else None,
            })  # fmt: skip
        conn.execute(insert(staff), rows)
    engine.dispose()


def write_datasets(state: Path, seed: int) -> list[str]:
    """Write every dataset into ``state``; returns the file names."""
    state.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"code-interpreter-data-{seed}")
    write_sales(state / "sales.csv", rng)
    write_weather(state / "weather.csv", rng)
    write_staff(state / "staff.sqlite", rng)
    return ["sales.csv", "weather.csv", "staff.sqlite"]
