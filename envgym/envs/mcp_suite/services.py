"""The MCP suite's services and the category each one's registered env serves.

``registration.py`` (the ``mcp-suite-<service>-v0`` ids) and ``check.py`` (which reads an id
back to its category) both import this, so neither imports the other for it.
"""

# The category each service's env serves (tasks/<service>/<category>/).
CATEGORIES = {"filesystem": "project_notes", "git": "service_repo", "sqlite": "shop"}
