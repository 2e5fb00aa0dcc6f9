"""SWE environments from issue–PR pairs: see docs/SWE.md."""
