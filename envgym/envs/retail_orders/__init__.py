"""Retail orders and returns: shop a basket under combinatorial constraints, or pick returns
whose refund lands in a narrow range (a subset-sum over eligible order lines).

Public API: ``envgym.envs.retail_orders.build.build_bundle`` (docs/SYNTHESIS.md).
"""
