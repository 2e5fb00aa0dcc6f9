"""The core's own ``envgym`` commands (``eval``, ``compare``, ``serve-mcp``): each module defines
``register(app: typer.Typer) -> None`` and imports nothing outside the core.

``envgym.cli`` finds them, like the commands in ``apps/``, through the ``envgym.commands``
entry-point group in pyproject.toml.
"""
