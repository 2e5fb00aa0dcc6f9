"""The top room: ``envgym`` commands that drive the library rooms (synthesis, SWE instances,
SFT, GRPO training, MoE upcycling) and the README demo.

Each command module has ``register(app: typer.Typer)`` and is declared in pyproject.toml's
``envgym.commands`` entry-point group; ``envgym/cli.py`` loads that group and names no command,
so the core imports nothing from here (docs/ARCHITECTURE.md, Rooms).
"""
