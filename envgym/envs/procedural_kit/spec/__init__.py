"""The declarative environment spec and its compiler: any category described as entities,
relations, tools and task templates becomes a bundle that passes ``envgym check``
(docs/ENV_SPEC.md).

``model`` (dataclasses, ``SpecError``), ``validate`` (``load_spec``: bounds, the JSON Schema
``schema.json``), ``semantics`` (cross-reference checks),
``state`` (rows and db.sqlite), ``compose`` (a level's conditions drawn from an anchor row),
``plant`` (near-miss rows, one per condition), ``prompt`` (the task in words), ``settle`` (gold,
strictness and witnesses on rows in memory), ``compile`` (the bundle) and ``bundle_files/`` (the
fixed tools.py, solution.py and verifier.py every compiled bundle carries verbatim).
"""
