"""Verifier for retail tasks: every rule in ``task["metadata"]``, checked against the database.

Check names: valid_json; for baskets customer, sku_exists, category_order | in_stock,
min_rating, distinct_brands, max_weight, not_purchased_before | total_correct, budget; for
returns customer, line_exists, no_duplicates | delivered, return_window, not_final_sale,
excluded_category, one_per_order | refund_total_correct, refund_range.

Only the rules the task sets are reported (no min_rating check without a rating floor), and
the checks are reported in stages (``|`` above): a stage is reported only when every earlier
stage passed.  A submission that fails a stage is rejected either way; staging makes each rule
fail on its own for some submission (every rule has a per-rule witness), e.g. a
basket with an out-of-stock item reports in_stock, not also a budget it was never priced for.
An answer that does not parse reports valid_json alone.
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any

from envgym.runtime import sqlite


def verify_retail(submission: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    meta = task.get("metadata") or {}
    basket = meta.get("kind") == "basket"
    answer, problem = _read(
        submission,
        ("customer", "skus", "total") if basket else ("customer", "returns", "refund_total"),
    )
    if answer is None:
        return {"checks": [_check("valid_json", [problem])]}
    who = _customer(meta["customer"])
    out = _basket(answer, meta, who) if basket else _returns(answer, meta, who)
    if answer["customer"] != meta["customer"] or who is None:
        out["customer"] = [
            f"the answer is for {answer['customer']!r}, the task for {meta['customer']!r}"
        ]
    checks = [_check("valid_json", [])]
    for stage in _stages(meta, basket):
        checks += [_check(n, out.get(n, [])) for n in stage]
        if any(n in out for n in stage):
            break  # later stages judge a submission this one already rejects
    return {"checks": checks}


def _stages(meta: dict, basket: bool) -> list[list[str]]:
    if basket:
        rules = ["in_stock"] + [
            name
            for name, on in (
                ("min_rating", meta.get("min_rating") is not None),
                ("distinct_brands", meta.get("distinct_brands")),
                ("max_weight", meta.get("max_weight_g") is not None),
                ("not_purchased_before", meta.get("exclude_purchased")),
            )
            if on
        ]
        return [["customer", "sku_exists", "category_order"], rules, ["total_correct", "budget"]]
    rules = ["delivered", "return_window", "not_final_sale"] + [
        name
        for name, on in (
            ("excluded_category", meta.get("exclude_category")),
            ("one_per_order", meta.get("one_per_order")),
        )
        if on
    ]
    return [
        ["customer", "line_exists", "no_duplicates"],
        rules,
        ["refund_total_correct", "refund_range"],
    ]


def _check(name: str, problems: list[str]) -> dict[str, Any]:
    return {"name": name, "passed": not problems, "detail": "; ".join(problems[:3])}


def _read(submission: dict[str, Any], fields: tuple[str, ...]) -> tuple[dict | None, str]:
    text = submission.get("answer_text")
    if not isinstance(text, str) or not text.strip():
        return None, "answer_text is missing or empty"
    try:
        answer = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"answer_text is not JSON: {exc.msg}"
    except RecursionError:  # nesting deeper than the parser's stack: not an answer
        return None, "answer_text is nested too deeply"
    if not isinstance(answer, dict):
        return None, "answer_text must be a JSON object"
    missing = [f for f in fields if f not in answer]
    if missing:
        return None, f"missing fields: {', '.join(missing)}"
    return answer, ""


def _customer(name: str) -> dict | None:
    row = (
        sqlite()
        .execute("SELECT id, tier, region FROM customers WHERE name = ?", (name,))
        .fetchone()
    )
    return dict(row) if row else None


def _number(value: Any) -> float | None:
    """A finite JSON number as float; None for anything else (bools, 10**400, inf)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if abs(number) != float("inf") and number == number else None


def _basket(answer: dict, meta: dict, who: dict | None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    skus = answer["skus"]
    if not isinstance(skus, list) or not all(isinstance(s, str) for s in skus):
        return {"sku_exists": ["skus must be a list of SKU strings"]}
    rows = {}
    for sku in skus:
        row = sqlite().execute("SELECT * FROM products WHERE sku = ?", (sku,)).fetchone()
        if row is None:
            out.setdefault("sku_exists", []).append(f"no product {sku!r}")
        else:
            rows[sku] = dict(row)
    if out or who is None:
        return out or {"sku_exists": ["not checked: unknown customer"]}
    cats = meta["categories"]
    if [rows[s]["category"] for s in skus] != cats:
        out["category_order"] = [f"categories {[rows[s]['category'] for s in skus]} != {cats}"]
    for sku in skus:
        stock = (
            sqlite()
            .execute(
                "SELECT quantity FROM stock WHERE sku = ? AND region = ?", (sku, who["region"])
            )
            .fetchone()
        )
        if stock is None or stock[0] < 1:
            out.setdefault("in_stock", []).append(
                f"{sku} is out of stock in the {who['region']} warehouse"
            )
        if meta.get("min_rating") is not None and rows[sku]["rating"] < meta["min_rating"]:
            out.setdefault("min_rating", []).append(f"{sku} is rated {rows[sku]['rating']}")
    if meta.get("distinct_brands") and len({rows[s]["brand"] for s in skus}) < len(skus):
        out["distinct_brands"] = ["two products share a brand"]
    weight = sum(rows[s]["weight_g"] for s in skus)
    if meta.get("max_weight_g") is not None and weight > meta["max_weight_g"]:
        out["max_weight"] = [f"{weight} g > {meta['max_weight_g']} g"]
    if meta.get("exclude_purchased"):
        owned = {
            r[0]
            for r in sqlite().execute(
                "SELECT l.sku FROM order_lines l JOIN orders o ON o.order_id = l.order_id WHERE o.customer_id = ?",
                (who["id"],),
            )
        }
        if owned & set(skus):
            out["not_purchased_before"] = [f"already ordered: {sorted(owned & set(skus))}"]
    if len(set(skus)) < len(skus):
        out.setdefault("sku_exists", []).append("a SKU is listed twice")
    discount = (
        sqlite()
        .execute("SELECT discount_pct FROM tiers WHERE name = ?", (who["tier"],))
        .fetchone()[0]
    )
    expected = round(sum(rows[s]["price"] for s in skus) * (100 - discount) / 100, 2)
    total = _number(answer["total"])
    if total is None or abs(total - expected) > 0.005:
        out["total_correct"] = [
            f"total {answer['total']!r} != {expected} (after the {discount}% discount)"
        ]
    if expected > meta["budget"]:
        out["budget"] = [f"{expected} > budget {meta['budget']}"]
    return out


def _returns(answer: dict, meta: dict, who: dict | None) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    picks = answer["returns"]
    if (
        not isinstance(picks, list)
        or not picks
        or not all(
            isinstance(p, dict)
            and isinstance(p.get("order_id"), str)
            and isinstance(p.get("sku"), str)
            for p in picks
        )
    ):
        return {"line_exists": ["returns must be a non-empty list of {order_id, sku} objects"]}
    if who is None:
        return {"line_exists": ["not checked: unknown customer"]}
    total = 0.0
    as_of = _dt.date.fromisoformat(meta["as_of"])
    for p in picks:
        row = (
            sqlite()
            .execute(
                "SELECT l.quantity, l.unit_price, o.status, o.delivered_date, o.customer_id, pr.category, "
                "pr.final_sale, rp.window_days, rp.restocking_fee_pct FROM order_lines l "
                "JOIN orders o ON o.order_id = l.order_id JOIN products pr ON pr.sku = l.sku "
                "JOIN return_policies rp ON rp.category = pr.category WHERE l.order_id = ? AND l.sku = ?",
                (p["order_id"], p["sku"]),
            )
            .fetchone()
        )
        where = f"{p['order_id']}/{p['sku']}"
        if row is None or row["customer_id"] != who["id"]:
            out.setdefault("line_exists", []).append(
                f"{where} is not a line of the customer's orders"
            )
            continue
        if row["status"] != "delivered":
            out.setdefault("delivered", []).append(f"{where} was not delivered")
        else:
            age = (as_of - _dt.date.fromisoformat(row["delivered_date"])).days
            if not 0 <= age <= row["window_days"]:
                out.setdefault("return_window", []).append(
                    f"{where}: {age} days > {row['window_days']}"
                )
        if row["final_sale"]:
            out.setdefault("not_final_sale", []).append(f"{where} is final sale")
        if row["category"] == meta.get("exclude_category"):
            out.setdefault("excluded_category", []).append(f"{where} is {row['category']}")
        total += round(
            row["unit_price"] * row["quantity"] * (100 - row["restocking_fee_pct"]) / 100, 2
        )
    keys = [(p["order_id"], p["sku"]) for p in picks]
    if len(set(keys)) < len(keys):
        out["no_duplicates"] = ["a line is listed twice"]
    if meta.get("one_per_order") and len({o for o, _ in keys}) < len(keys):
        out["one_per_order"] = ["two lines come from the same order"]
    if "line_exists" in out:
        return out
    total = round(total, 2)
    claimed = _number(answer["refund_total"])
    if claimed is None or abs(claimed - total) > 0.005:
        out["refund_total_correct"] = [f"refund_total {answer['refund_total']!r} != {total}"]
    if not meta["refund_min"] <= total <= meta["refund_max"]:
        out["refund_range"] = [f"{total} outside [{meta['refund_min']}, {meta['refund_max']}]"]
    return out
