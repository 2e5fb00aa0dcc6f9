"""Gold solutions for retail tasks: they see the store only through the tools.

Baskets: the cheapest basket that meets every rule (ties broken by SKUs), found by enumerating
the per-category candidates the tools return.  Returns: the fewest order lines whose refunds
land in the range (ties broken by order id and SKU), by enumerating subsets of eligible lines.
"""

from __future__ import annotations

import itertools
import json


def solve_retail(tools, task: dict) -> None:
    meta = task["metadata"]
    answer = _basket(tools, meta) if meta["kind"] == "basket" else _returns(tools, meta)
    if answer is None:
        raise RuntimeError(f"no answer satisfies task {task.get('id')!r}")
    tools.submit_result(answer_text=json.dumps(answer))


def _customer_context(tools, meta: dict) -> tuple:
    """The customer, their tier discount and (when the task excludes them) the SKUs they bought."""
    customer = tools.get_customer(name=meta["customer"])
    discount = tools.get_tier_discount(tier=customer["tier"])
    owned = set()
    if meta["exclude_purchased"]:
        for order in tools.list_orders(customer=meta["customer"]):
            owned.update(line["sku"] for line in tools.get_order_lines(order_id=order["order_id"]))
    return customer, discount, owned


def _basket(tools, meta: dict) -> dict | None:
    customer, discount, owned = _customer_context(tools, meta)
    pools = []
    for category in meta["categories"]:
        pool = []
        for p in tools.list_products(category=category, min_rating=meta["min_rating"]):
            if p["sku"] in owned or tools.get_stock(sku=p["sku"], region=customer["region"]) < 1:
                continue
            if meta["max_weight_g"] is not None:
                p = dict(p, weight_g=tools.get_product(sku=p["sku"])["weight_g"])
            pool.append(p)
        pools.append(pool)
    best = None
    for combo in itertools.product(*pools):
        if meta["distinct_brands"] and len({p["brand"] for p in combo}) < len(combo):
            continue
        if (
            meta["max_weight_g"] is not None
            and sum(p["weight_g"] for p in combo) > meta["max_weight_g"]
        ):
            continue
        key = (sum(p["price"] for p in combo), [p["sku"] for p in combo])
        if best is None or key < best[0]:
            best = (key, combo)
    if best is None:
        return None
    total = round(best[0][0] * (100 - discount) / 100, 2)
    if total > meta["budget"]:
        return None
    return {"customer": meta["customer"], "skus": best[0][1], "total": total}


def _returns(tools, meta: dict) -> dict | None:
    policies, lines = {}, []
    for order in tools.list_orders(customer=meta["customer"]):
        if order["status"] != "delivered":
            continue
        age = tools.days_between(start_date=order["delivered_date"], end_date=meta["as_of"])
        for line in tools.get_order_lines(order_id=order["order_id"]):
            product = tools.get_product(sku=line["sku"])
            category = product["category"]
            if product["final_sale"] or category == meta["exclude_category"]:
                continue
            if category not in policies:
                policies[category] = tools.get_return_policy(category=category)
            policy = policies[category]
            if not 0 <= age <= policy["window_days"]:
                continue
            refund = round(
                line["unit_price"] * line["quantity"] * (100 - policy["restocking_fee_pct"]) / 100,
                2,
            )
            lines.append((order["order_id"], line["sku"], refund))
    lines.sort()
    for n in range(1, len(lines) + 1):
        for subset in itertools.combinations(lines, n):
            if meta["one_per_order"] and len({o for o, _, _ in subset}) < n:
                continue
            total = round(sum(r for _, _, r in subset), 2)
            if meta["refund_min"] <= total <= meta["refund_max"]:
                return {
                    "customer": meta["customer"],
                    "returns": [{"order_id": o, "sku": s} for o, s, _ in subset],
                    "refund_total": total,
                }
    return None


def greedy_retail(tools, task: dict) -> None:
    """Greedy baseline (no search): baskets take the cheapest product per category that meets
    the per-product rules, ignoring the rules that tie products together (brands, weight);
    returns take eligible lines largest refund first while the total stays under the maximum."""
    meta = task["metadata"]
    answer = (
        _greedy_basket(tools, meta) if meta["kind"] == "basket" else _greedy_returns(tools, meta)
    )
    tools.submit_result(answer_text=json.dumps(answer))


def _greedy_basket(tools, meta: dict) -> dict:
    customer, discount, owned = _customer_context(tools, meta)
    skus, prices = [], []
    for category in meta["categories"]:
        for p in tools.list_products(
            category=category, min_rating=meta["min_rating"]
        ):  # cheapest first
            if (
                p["sku"] not in owned
                and tools.get_stock(sku=p["sku"], region=customer["region"]) > 0
            ):
                skus.append(p["sku"])
                prices.append(p["price"])
                break
    return {
        "customer": meta["customer"],
        "skus": skus,
        "total": round(sum(prices) * (100 - discount) / 100, 2),
    }


def _greedy_returns(tools, meta: dict) -> dict:
    lines = []
    for order in tools.list_orders(customer=meta["customer"]):
        if order["status"] != "delivered":
            continue
        age = tools.days_between(start_date=order["delivered_date"], end_date=meta["as_of"])
        for line in tools.get_order_lines(order_id=order["order_id"]):
            product = tools.get_product(sku=line["sku"])
            policy = tools.get_return_policy(category=product["category"])
            if product["final_sale"] or product["category"] == meta["exclude_category"]:
                continue
            if 0 <= age <= policy["window_days"]:
                refund = round(
                    line["unit_price"]
                    * line["quantity"]
                    * (100 - policy["restocking_fee_pct"])
                    / 100,
                    2,
                )
                lines.append((refund, order["order_id"], line["sku"]))
    picked, total, orders = [], 0.0, set()
    for refund, order_id, sku in sorted(lines, reverse=True):
        if total + refund <= meta["refund_max"] and not (
            meta["one_per_order"] and order_id in orders
        ):
            picked.append({"order_id": order_id, "sku": sku})
            total = round(total + refund, 2)
            orders.add(order_id)
    return {"customer": meta["customer"], "returns": picked, "refund_total": total}
