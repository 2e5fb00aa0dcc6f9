"""What the LLM synthesis agent is told at each stage (DeepSeek-V3.2 §3.2.3's workflow).

Short on purpose: small models lose long instructions.  Every stage names the exact blocks the
reply must contain; the agent reads nothing else.
"""

from __future__ import annotations

SYSTEM = """You build training environments for tool-using AI agents, in a sandbox.
Tools: bash (runs commands in your workspace; python3 and sqlite3 are installed; no internet),
write_file, read_file, list_files, and search (looks up reference notes).
Category: {category}.
Answer with fenced code blocks exactly as each request asks."""

DATA = """Step 1 - data. Create a small SQLite database file db.sqlite in the workspace with realistic
data for the category "{category}": 2 to 4 tables, 10 to 60 rows in total, with names, numbers and
dates that tasks can ask about. Use the search tool for facts if useful.
Reply with one block:
```python data
import sqlite3
con = sqlite3.connect("db.sqlite")
# CREATE TABLE ... ; INSERT ... ; con.commit()
```"""

TOOLS = """Step 2 - tools. The database has these tables (with sample rows):
{schema}
Write tools.py: plain Python functions an agent calls to read this data. Every parameter has a
type hint (str, int, float, bool, list, dict), every function has a docstring with an Args:
section, and reads the database with `from envgym.runtime import sqlite` and
`sqlite().execute(sql, params)` (rows are sqlite3.Row). Include
`def submit_result(answer_text: str) -> str` that returns "submitted".
Reply with one block:
```python tools
from envgym.runtime import sqlite

def get_item(name: str) -> dict:
    \"\"\"Look an item up by name.

    Args:
        name: The item's exact name.
    \"\"\"
    row = sqlite().execute("SELECT * FROM items WHERE name = ?", (name,)).fetchone()
    return dict(row) if row else {{}}
```"""

TASK = """Step 3 - a simple task. The tools are:
{tools}
Propose one simple task a user could ask that these tools can answer, with:
- a solution function `solve(tools, task)` that ONLY calls tools (tools.get_x(...)) and computes
  (no imports except json/math/itertools/collections, no open(), no sqlite) and ends with
  tools.submit_result(answer_text=...);
- a verifier `verify(submission, task)` that reads the database with
  `from envgym.runtime import sqlite`, checks submission["answer_text"] against every requirement and
  returns {{"checks": [{{"name": "...", "passed": True/False, "detail": "..."}}]}}, one check per rule.
The metadata must not contain the answer: the solution finds it with the tools, the verifier checks
it against the database.
Reply with these blocks:
```json task
{{"prompt": "the user's request", "metadata": {{"any": "parameters the solution and verifier read"}}}}
```
```python solution
def solve(tools, task):
    ...
```
```python verifier
from envgym.runtime import sqlite

def verify(submission, task):
    ...
```{witnesses}"""

HARDER = """Step 4 - harder (level {level}). Make the task harder to solve but still easy to check:
add one or two constraints (a budget, a ranking, a combination, a date window, an exclusion).
Update the solution and the verifier. If the tools cannot answer the harder task, add tools:
then also send the whole new tools.py as a ```python tools``` block.
Reply with the blocks ```json task```, ```python solution```, ```python verifier```
(and ```python tools``` only if you changed the tools).{witnesses}"""

# The per-rule witness contract (docs/CHECK.md): a witness violates exactly one verifier check.
# Inserted as a format argument, so its braces are literal.
WITNESSES = """
Also send, for EVERY check name your verifier reports, one wrong submission that fails exactly
that check and passes all the others:
```json witnesses
[{"rule": "<check name>", "submission": {"answer_text": "..."}, "note": "why only this rule fails"}]
```"""

FEEDBACK = """That did not work yet:
{problems}
Fix it and reply with the complete corrected blocks again."""

ANSWER_NOW = "Stop calling tools now and reply with the requested code blocks."
