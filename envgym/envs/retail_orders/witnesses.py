"""Witness candidates for retail tasks (envgym.envs.procedural_kit.witness runs them through the
verifier).

Built from the task's constraints over the database: for a basket, the gold basket with one
(then two) products swapped for other products of the same category, each priced correctly,
so a swap breaks stock, rating, brand, weight, history or budget — whichever the verifier says
alone; for returns, the gold lines with one line of the customer's history added or swapped in
(any status), with the refund total claimed correctly.  Plus one format/identity break per rule
of the first stage and a wrong total.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

from envgym.envs.retail_orders.tasks import basket_total
from envgym.envs.retail_orders.world import World

Pair = tuple[dict[str, Any], str]
MAX_PAIR_SWAPS = 400  # two-product swaps tried when one swap isolates no budget break


def candidates(world: World, task: dict[str, Any], gold: dict[str, Any]) -> Iterator[Pair]:
    meta, answer = task["metadata"], json.loads(gold["answer_text"])
    other = next(c.name for c in world.customers if c.name != meta["customer"])
    yield _sub({**answer, "customer": other}), f"the answer names {other}, not the task's customer"
    if meta["kind"] == "basket":
        yield from _basket(world, meta, answer)
    else:
        yield from _returns(world, meta, answer)


def _sub(answer: dict[str, Any]) -> dict[str, Any]:
    return {"answer_text": json.dumps(answer)}


def _basket(world: World, meta: dict[str, Any], answer: dict[str, Any]) -> Iterator[Pair]:
    skus: list[str] = answer["skus"]
    discount = next(c.discount_pct for c in world.customers if c.name == meta["customer"])

    def priced(new: list[str]) -> dict[str, Any]:
        return _sub(
            {
                **answer,
                "skus": new,
                "total": basket_total(
                    [world.products[s].price for s in new if s in world.products], discount
                ),
            }
        )

    yield priced(["NOPE-0000", *skus[1:]]), "the first SKU names no product"
    yield priced(skus[::-1]), "the products are listed in the reverse category order"
    yield _sub({**answer, "total": round(answer["total"] + 1, 2)}), "the claimed total is $1 off"
    for i, sku in enumerate(skus):
        for p in world.by_category[world.products[sku].category]:
            if p.sku != sku:
                yield (
                    priced(skus[:i] + [p.sku] + skus[i + 1 :]),
                    f"product {i + 1} swapped for {p.sku}",
                )
    pairs = itertools.combinations(range(len(skus)), 2)
    swaps = (
        (i, j, a.sku, b.sku)
        for i, j in pairs
        for a in world.by_category[world.products[skus[i]].category]
        for b in world.by_category[world.products[skus[j]].category]
    )
    for i, j, a, b in itertools.islice(swaps, MAX_PAIR_SWAPS):
        new = list(skus)
        new[i], new[j] = a, b
        yield priced(new), f"products {i + 1} and {j + 1} swapped for {a} and {b}"


def _returns(world: World, meta: dict[str, Any], answer: dict[str, Any]) -> Iterator[Pair]:
    picks: list[dict[str, str]] = answer["returns"]

    def priced(new: list[dict[str, str]]) -> dict[str, Any]:
        total = round(sum(world.refunds.get((p["order_id"], p["sku"]), 0.0) for p in new), 2)
        return _sub({**answer, "returns": new, "refund_total": total})

    yield (
        priced([{"order_id": "ORD-0", "sku": picks[0]["sku"]}, *picks[1:]]),
        "the first line names no order",
    )
    yield priced(picks + picks[:1]), "the first line is listed twice"
    yield (
        _sub({**answer, "refund_total": round(answer["refund_total"] + 1, 2)}),
        "the claimed refund is $1 off",
    )
    if len(picks) > 1:
        yield priced(picks[1:]), "one line fewer: the refund drops out of the range"
    chosen = {(p["order_id"], p["sku"]) for p in picks}
    for order_id, sku in world.owned_lines[meta["customer"]]:
        if (order_id, sku) in chosen:
            continue
        line = {"order_id": order_id, "sku": sku}
        yield priced(picks + [line]), f"{order_id}/{sku} added"
        for i in range(len(picks)):
            yield (
                priced(picks[:i] + [line] + picks[i + 1 :]),
                f"line {i + 1} swapped for {order_id}/{sku}",
            )


Probe = tuple[dict[str, Any], str, str]
MAX_BOUNDARY_PROBES = 60  # per boundary: the nearest ones first


def conditions(world: World, task: dict[str, Any], gold: dict[str, Any]) -> Iterator[Probe]:
    """Per-condition and per-boundary probes
    (envgym.envs.procedural_kit.witness.condition_witnesses).

    A claimed total a cent off (a tolerance loosened from half a cent to five cents still
    rejects $1 off, the only total witness before); for baskets, the single swaps that break
    the rating floor, the weight cap or the budget by the least (a threshold moved a little, or
    ``>`` turned into ``>=``, lets those through); for returns, the line sets whose refund
    lands nearest outside the range.
    """
    meta, answer = task["metadata"], json.loads(gold["answer_text"])
    money = "total" if meta["kind"] == "basket" else "refund_total"
    for cents in (0.01, -0.01):
        yield (
            _sub({**answer, money: round(answer[money] + cents, 2)}),
            f"{money} {cents:+} off",
            f"{money}_correct:{cents:+}",
        )
    if meta["kind"] == "basket":
        yield from _basket_boundaries(world, meta, answer)
    else:
        yield from _refund_boundaries(world, meta, answer)


def _basket_boundaries(
    world: World, meta: dict[str, Any], answer: dict[str, Any]
) -> Iterator[Probe]:
    skus: list[str] = answer["skus"]
    discount = next(c.discount_pct for c in world.customers if c.name == meta["customer"])
    swaps = [
        skus[:i] + [p.sku] + skus[i + 1 :]
        for i, sku in enumerate(skus)
        for p in world.by_category[world.products[sku].category]
        if p.sku != sku
    ]

    def priced(new: list[str]) -> dict[str, Any]:
        return _sub(
            {
                **answer,
                "skus": new,
                "total": basket_total([world.products[s].price for s in new], discount),
            }
        )

    measures = {
        "budget": lambda new: (
            basket_total([world.products[s].price for s in new], discount) - meta["budget"]
        )
    }
    if meta["min_rating"] is not None:
        measures["min_rating"] = lambda new: (
            meta["min_rating"] - min(world.products[s].rating for s in new)
        )
    if meta["max_weight_g"] is not None:
        measures["max_weight"] = lambda new: (
            sum(world.products[s].weight_g for s in new) - meta["max_weight_g"]
        )
    for rule, excess in measures.items():
        outside = sorted((excess(new), new) for new in swaps if excess(new) > 0)
        for amount, new in outside[:MAX_BOUNDARY_PROBES]:
            yield priced(new), f"{rule} broken by {amount:g}", f"{rule}:nearest"


def _refund_boundaries(
    world: World, meta: dict[str, Any], answer: dict[str, Any]
) -> Iterator[Probe]:
    picks: list[dict[str, str]] = answer["returns"]
    chosen = {(p["order_id"], p["sku"]) for p in picks}
    lines = [
        {"order_id": o, "sku": s}
        for o, s in world.owned_lines[meta["customer"]]
        if (o, s) not in chosen
    ]
    options = [picks[:i] + picks[i + 1 :] for i in range(len(picks))] + [picks + [x] for x in lines]
    options += [picks[:i] + [x] + picks[i + 1 :] for i in range(len(picks)) for x in lines]

    def refund(new: list[dict[str, str]]) -> float:
        return round(sum(world.refunds.get((p["order_id"], p["sku"]), 0.0) for p in new), 2)

    for side, distance in (
        ("over", lambda t: t - meta["refund_max"]),
        ("under", lambda t: meta["refund_min"] - t),
    ):
        outside = sorted(
            (distance(refund(new)), i)
            for i, new in enumerate(options)
            if new and distance(refund(new)) > 0
        )
        for amount, i in outside[:MAX_BOUNDARY_PROBES]:
            new = options[i]
            yield (
                _sub({**answer, "returns": new, "refund_total": refund(new)}),
                f"refund {amount:g} {side} the range",
                f"refund_range:{side}",
            )
