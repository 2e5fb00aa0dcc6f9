"""The trip-planning family: DeepSeek-V3.2 §3.2.3's synthesized trip-planning environment.

Public API (docs/TRIP_PLANNING.md): ``envgym.envs.trip_planning.build.build_bundle`` and
``envgym.envs.trip_planning.build.default_bundle_dir``.  Nothing is imported here so that
entry-point discovery stays cheap.
"""
