"""Retail tasks as searches for the shared baselines (envgym.envs.procedural_kit.baselines).

Built from the task's metadata and the store (the tools' data), never the gold.  Baskets: a
product per category from those meeting the per-product rules (stock, rating, not bought
before), cheapest first; greedy takes the cheapest of each, as solution.py's greedy does.
Returns: each returnable line in or out; greedy takes lines largest refund first while the
total stays under the maximum (and one line per order where asked), as solution.py's does.
"""

from __future__ import annotations

from typing import Any

from envgym.envs.procedural_kit.baselines import EXHAUSTIVE_BOUND, Choice, Search, attempts
from envgym.envs.retail_orders.tasks import basket_total
from envgym.envs.retail_orders.world import World


def baselines(
    world: World, meta: dict[str, Any], bound: int = EXHAUSTIVE_BOUND
) -> dict[str, dict[str, Any] | str | None]:
    """Each baseline's answer (see envgym.envs.procedural_kit.baselines.attempts)."""
    if meta["kind"] == "basket":
        search = basket_search(world, meta)
        start = tuple(pool[0] for pool in search.pools) if search else None
        return attempts(search, start, bound=bound)
    search = returns_search(world, meta)
    return attempts(search, greedy_returns(search, meta), pairs=True, bound=bound)


def basket_search(world: World, meta: dict[str, Any]) -> Search | None:
    customer = next(c for c in world.customers if c.name == meta["customer"])
    owned = world.purchased[customer.name] if meta["exclude_purchased"] else frozenset()
    pools = [
        sorted(
            (
                p
                for p in world.by_category[category]
                if world.stock.get((p.sku, customer.region), 0) > 0
                and p.sku not in owned
                and (meta["min_rating"] is None or p.rating >= meta["min_rating"])
            ),
            key=lambda p: (p.price, p.sku),
        )
        for category in meta["categories"]
    ]
    if any(not pool for pool in pools):
        return None

    def total(combo: Choice) -> float:
        return basket_total([p.price for p in combo], customer.discount_pct)

    def penalty(combo: Choice) -> float:
        out = max(0.0, total(combo) - meta["budget"]) / meta["budget"]
        if meta["distinct_brands"]:
            out += len(combo) - len({p.brand for p in combo})
        if meta["max_weight_g"] is not None:
            cap = meta["max_weight_g"]
            out += max(0, sum(p.weight_g for p in combo) - cap) / cap
        return out

    def answer(combo: Choice) -> dict[str, Any]:
        return {"customer": customer.name, "skus": [p.sku for p in combo], "total": total(combo)}

    return Search(pools, penalty, answer)


def returns_search(world: World, meta: dict[str, Any]) -> Search:
    """One slot per returnable line (largest refund first), each in (True) or out (False)."""
    lines = sorted(
        world.returnable(meta["customer"], meta["as_of"], meta["exclude_category"]),
        key=lambda line: (line.refund, line.order_id, line.sku),
        reverse=True,
    )

    def picked(choice: Choice) -> list[Any]:
        return [line for line, keep in zip(lines, choice) if keep]

    def penalty(choice: Choice) -> float:
        chosen = picked(choice)
        refund = round(sum(line.refund for line in chosen), 2)
        low, high = meta["refund_min"], meta["refund_max"]
        out = (max(0.0, low - refund) + max(0.0, refund - high)) / high
        if meta["one_per_order"]:
            out += len(chosen) - len({line.order_id for line in chosen})
        return out + (1 if not chosen else 0)

    def answer(choice: Choice) -> dict[str, Any]:
        chosen = picked(choice)
        return {
            "customer": meta["customer"],
            "returns": [{"order_id": line.order_id, "sku": line.sku} for line in chosen],
            "refund_total": round(sum(line.refund for line in chosen), 2),
        }

    return Search([(False, True)] * len(lines), penalty, answer)


def greedy_returns(search: Search, meta: dict[str, Any]) -> Choice:
    """Largest refund first while the total stays at most the maximum (one line per order
    where asked); read off the search's own line order, which is largest first."""
    choice = [False] * len(search.pools)
    for i in range(len(choice)):
        trial = choice[:i] + [True] + choice[i + 1 :]
        answer = search.answer(tuple(trial))
        orders = [r["order_id"] for r in answer["returns"]]
        if answer["refund_total"] <= meta["refund_max"] and not (
            meta["one_per_order"] and len(set(orders)) < len(orders)
        ):
            choice = trial
    return tuple(choice)
