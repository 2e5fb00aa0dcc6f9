"""Source templates of the trip-planning bundle's code files.

``tools.py``, ``solution.py`` and ``verifier.py`` are copied verbatim into every bundle.  They
run inside sandboxes, so they import only the standard library and ``envgym.runtime`` — never
anything from ``envgym.envs.trip_planning``.
"""
