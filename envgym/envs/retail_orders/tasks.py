"""Seeded retail tasks, graded 1 (easy) … 5 (hard); every parameter lands in ``metadata``.

Odd difficulties are *baskets* (one product per category under stock, rating, brand, weight
and budget rules: a product search over k categories), even ones are *returns* (order lines
whose refund lands in a range: a subset sum over the lines the return policy allows).  Budgets
and refund ranges are set from the enumerated solution space, so only a small, known share of
candidates meets them (never none).  Level 5 baskets span all eight categories (more
combinations than the exhaustive baseline's bound) with the budget at the cheapest valid
basket, and are kept only when greedy + local repair fails them
(envgym.envs.procedural_kit.baselines).
"""

from __future__ import annotations

import itertools
import math
import random
from datetime import date, timedelta
from typing import Any

from envgym.envs.procedural_kit.baselines import EXHAUSTIVE_BOUND
from envgym.envs.procedural_kit.task_line import TaskNames
from envgym.envs.retail_orders.world import CustomerRow, World

TASK_NAMES = TaskNames("retail", solution="solve_retail", verifier="verify_retail")
# difficulty -> (categories, rating floor?, distinct brands?, weight cap?, exclude purchased?, budget quantile)
BASKET = {
    1: (2, False, False, False, False, 0.5),
    3: (3, True, True, True, False, 0.3),
    5: (8, True, True, True, True, 0.0),
}
# difficulty -> the quantile of the valid baskets' weights the weight cap sits at: lower at the
# top level, where together with the cheapest-basket budget it leaves one-swap repair stuck
WEIGHT_QUANTILE = {3: 0.5, 5: 0.125}
# difficulty -> (one line per order?, exclude a category?, range width as a share of its floor)
RETURNS = {2: (False, False, 0.1), 4: (True, True, 0.01)}
MAX_COMBOS = 200_000
# Levels whose tasks defeat the stronger baselines (envgym.envs.procedural_kit.baselines): beyond
# the exhaustive search's bound here, and rejected by the kit when greedy + repair solves them.
TOP_LEVELS = (5,)


def draw_task(
    world: World, rng: random.Random, difficulty: int, index: int
) -> dict[str, Any] | None:
    """One task of ``difficulty``, or None when this draw has no solution."""
    meta = (
        _basket(world, rng, difficulty)
        if difficulty in BASKET
        else _returns(world, rng, difficulty)
    )
    if meta is None:
        return None
    meta["declared_rules"] = declared_rules(meta)
    return TASK_NAMES.line(index, difficulty, render_prompt(meta), meta)


def declared_rules(meta: dict[str, Any]) -> list[str]:
    """The check names this task's constraints call for, written from the recipe (not from the
    verifier): ``envgym check`` fails a verifier that does not report every one of them."""
    if meta["kind"] == "basket":
        optional = [
            ("min_rating", meta["min_rating"] is not None),
            ("distinct_brands", meta["distinct_brands"]),
            ("max_weight", meta["max_weight_g"] is not None),
            ("not_purchased_before", meta["exclude_purchased"]),
        ]
        core = ["customer", "sku_exists", "category_order", "in_stock"]
        money = ["total_correct", "budget"]
    else:
        optional = [
            ("excluded_category", bool(meta["exclude_category"])),
            ("one_per_order", meta["one_per_order"]),
        ]
        core = [
            "customer",
            "line_exists",
            "no_duplicates",
            "delivered",
            "return_window",
            "not_final_sale",
        ]
        money = ["refund_total_correct", "refund_range"]
    return ["valid_json", *core, *(name for name, on in optional if on), *money]


def basket_total(prices: list[int], discount_pct: int) -> float:
    return round(sum(prices) * (100 - discount_pct) / 100, 2)


def _basket(world: World, rng: random.Random, difficulty: int) -> dict[str, Any] | None:
    k, floor, distinct, weight, fresh, quantile = BASKET[difficulty]
    customer = rng.choice(world.customers)
    categories = rng.sample(sorted(world.by_category), k)
    min_rating = rng.choice([3.5, 3.8, 4.0]) if floor else None
    pools = [
        [
            p
            for p in world.by_category[c]
            if world.stock.get((p.sku, customer.region), 0) > 0
            and (min_rating is None or p.rating >= min_rating)
            and not (fresh and p.sku in world.purchased[customer.name])
        ]
        for c in categories
    ]
    size = math.prod(len(p) for p in pools)
    if any(not pool for pool in pools) or size > MAX_COMBOS:
        return None
    if difficulty in TOP_LEVELS and size <= EXHAUSTIVE_BOUND:
        return None  # the top level is beyond the exhaustive baseline's bound by definition
    combos = [
        c for c in itertools.product(*pools) if not distinct or len({p.brand for p in c}) == k
    ]
    max_weight = None
    if weight and combos:
        weights = sorted(sum(p.weight_g for p in c) for c in combos)
        cap = weights[int(WEIGHT_QUANTILE[difficulty] * len(weights))]
        max_weight = 100 * math.ceil(cap / 100)
        combos = [c for c in combos if sum(p.weight_g for p in c) <= max_weight]
    if len(combos) < 3:
        return None
    totals = sorted(basket_total([p.price for p in c], customer.discount_pct) for c in combos)
    budget = math.ceil(totals[int(quantile * (len(totals) - 1))])
    return {
        "kind": "basket",
        "customer": customer.name,
        "categories": categories,
        "budget": budget,
        "min_rating": min_rating,
        "distinct_brands": distinct,
        "max_weight_g": max_weight,
        "exclude_purchased": fresh,
    }


def _returns(world: World, rng: random.Random, difficulty: int) -> dict[str, Any] | None:
    one_per_order, exclude, width = RETURNS[difficulty]
    customer: CustomerRow = rng.choice(world.customers)
    delivered = sorted({line.delivered for line in world.lines[customer.name] if line.delivered})
    if not delivered:
        return None
    as_of = (
        date.fromisoformat(rng.choice(delivered)) + timedelta(days=rng.randint(1, 10))
    ).isoformat()
    excluded = None
    if exclude:  # a category the customer could otherwise return from, so the rule binds
        seen = sorted({line.category for line in world.returnable(customer.name, as_of)})
        excluded = rng.choice(seen) if seen else None
    lines = world.returnable(customer.name, as_of, excluded)
    if not 3 + difficulty <= len(lines) <= 16:  # enough lines that the subset sum is a search
        return None
    sums = sorted(
        round(sum(line.refund for line in subset), 2)
        for n in range(2, len(lines) + 1)
        for subset in itertools.combinations(lines, n)
        if not one_per_order or len({line.order_id for line in subset}) == n
    )
    if not sums:
        return None
    low = math.floor(sums[int(rng.uniform(0.3, 0.7) * (len(sums) - 1))])
    high = round(low * (1 + width) + 1, 2)
    return {
        "kind": "returns",
        "customer": customer.name,
        "as_of": as_of,
        "refund_min": low,
        "refund_max": high,
        "one_per_order": one_per_order,
        "exclude_category": excluded,
    }


def render_prompt(meta: dict[str, Any]) -> str:
    who = meta["customer"]
    if meta["kind"] == "basket":
        rules = [
            f"exactly one product from each of these categories, in this order: {', '.join(meta['categories'])}",
            "every product in stock at the warehouse of my region",
            f"the total after my membership-tier discount (rounded to cents) at most ${meta['budget']}",
        ]
        if meta["min_rating"] is not None:
            rules.append(f"every product rated at least {meta['min_rating']}")
        if meta["distinct_brands"]:
            rules.append("no two products from the same brand")
        if meta["max_weight_g"] is not None:
            rules.append(f"a combined shipping weight of at most {meta['max_weight_g']} g")
        if meta["exclude_purchased"]:
            rules.append("nothing I have ordered before (any order, any status)")
        fmt = (
            '{"customer": "<my name>", "skus": ["<sku for each category, same order>"], '
            '"total": <discounted total, a number>}'
        )
        ask = f"I'm {who}, a customer of this store, and I want to buy a small set of products."
    else:
        rules = [
            f"the refund total between ${meta['refund_min']} and ${meta['refund_max']} (inclusive)",
            "only whole order lines (all units of a line) from my delivered orders",
            f"each line still inside its category's return window on {meta['as_of']} "
            "(days since delivery at most the window)",
            "no final-sale products",
            "each line refunds unit price x quantity minus the category's restocking fee, in cents",
        ]
        if meta["one_per_order"]:
            rules.append("at most one line from any one order")
        if meta["exclude_category"]:
            rules.append(f"nothing from the {meta['exclude_category']} category")
        fmt = (
            '{"customer": "<my name>", "returns": [{"order_id": "...", "sku": "..."}], '
            '"refund_total": <sum of the line refunds, a number>}'
        )
        ask = f"I'm {who}. Today is {meta['as_of']} and I'd like to return some things I bought."
    bullet = "\n".join(f"- {r}" for r in rules)
    return (
        f"{ask} Requirements:\n{bullet}\nLook everything up with the tools, then call "
        f"submit_result with answer_text set to JSON of the form {fmt}."
    )
