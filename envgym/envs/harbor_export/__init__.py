"""envgym tasks out as Harbor task directories (docs/HARBOR.md, "Export").

`families.export_target` picks the exporter; `bundle_task` writes a general-agent bundle's tasks
with their tools as the `envgym-tool` command line (`task_cli.py`, shipped into the container);
`quoting` is the one way values are written into TOML and shell text (shared with the SWE export).
"""
