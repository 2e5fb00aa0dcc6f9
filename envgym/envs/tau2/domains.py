"""τ²-bench's domains as envgym serves them: one list, which ``registration.py`` (the ids) and
``tasks.py`` (the bundles) both import, so neither imports the other for it.  ``session.py`` keeps
its own copy: it runs in ``.venv-tau2``, where envgym is not installed."""

DOMAINS = ("airline", "retail", "telecom", "mock")
