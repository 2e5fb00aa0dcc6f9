"""Synthesis agents: from a task category to validated ``<environment, tools, task, verifier>``
bundles, filtered by pass@k (DeepSeek-V3.2 §3.2.3).  docs/SYNTHESIS.md is the guide.

Agents: ``procedural`` (seeded generators, ``categories``) and ``llm_agent`` (any policy, in a
sandboxed ``workbench`` with a ``search`` tool).  Every bundle goes through ``validate``
(envgym check + ``solution_rules`` + ``isolation`` + ``tool_probe``) and ``dedup``; ``pipeline``
runs jobs resumably, recording through ``recorder`` (``journal`` + envgym.store); ``passk``
and ``filter_run`` keep pass@k > 0 with early stopping; ``slip_policy`` is a cheap policy with
known pass rates for measuring the filter.  Nothing is imported here: importing the package
stays cheap.
"""
