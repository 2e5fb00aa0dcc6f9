"""τ²-bench as envgym envs: every task of τ²'s airline, retail, telecom and mock domains (docs/TAU2.md)."""
