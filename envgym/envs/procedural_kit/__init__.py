"""Shared machinery of the procedural families (retail orders, meeting scheduling, shipment
logistics, trip planning): write a bundle from a state writer, code templates and a task drawer,
keeping only tasks whose gold solution passes and whose verifier rejects every single-field
corruption.

``build`` (the strict-task loop, ``UnsolvableTask``, the cached default bundle), ``task_line``
(``TaskNames``: the one shape of a tasks.jsonl line), ``witness`` (per-rule and per-condition
witness search), ``baselines`` (greedy + repair, exhaustive, the top-level re-draw test
``stronger_solves``) and ``local`` (``LocalBundle``: a trusted bundle's code run in this
process).  Families import the kit; the kit imports no family.
"""
