"""SWE instance synthesis from repository history (``envgym synth swe``): pipeline.py, cli.py."""
