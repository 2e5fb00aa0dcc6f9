"""Shipment logistics: route several shipments through a hub network under deadlines, hazmat
and mode rules, shared lane capacities and a tight total budget.

Public API: ``envgym.envs.shipment_logistics.build.build_bundle`` (docs/SYNTHESIS.md).
"""
