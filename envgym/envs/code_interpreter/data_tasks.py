"""Data-science tasks over the generated datasets (datasets.py).

Each template has a reference program (standard library: csv, sqlite3, statistics) that prints
the answer; the answer stored in the task is what that program printed over the generated
files, so it is computed, never written by hand.  Agents may of course use pandas.
"""

from __future__ import annotations

import contextlib
import random
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.envs.code_interpreter.datasets import (
    CITIES,
    DEPARTMENTS,
    PRODUCTS,
    REGIONS,
    write_datasets,
)
from envgym.envs.code_interpreter.reasoning import bundle_module

P = dict[str, Any]
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
           "October", "November", "December")  # fmt: skip
_SALES = "import csv\nrows = list(csv.DictReader(open('sales.csv')))\n"
_WEATHER = (
    "import csv\nrows = [r for r in csv.DictReader(open('weather.csv')) if r['city'] == {city!r}]\n"
)
_STAFF = "import sqlite3\ndb = sqlite3.connect('staff.sqlite')\n"


@dataclass(frozen=True)
class Template:
    name: str
    difficulty: int
    files: tuple[str, ...]
    kind: str  # answer kind (see the verifier)
    decimals: int | None  # the prompt asks for rounding to this many decimals
    prompt: str  # str.format over the parameters
    code: str  # str.format over the parameters
    params: Callable[[random.Random], P]


def _round(decimals: int | None) -> str:
    return "" if decimals is None else f" Round to {decimals} decimal places."


TEMPLATES = (
    Template("orders-in-region", 1, ("sales.csv",), "number", None,
             "How many orders in sales.csv come from the {region} region?",
             _SALES + "print(sum(r['region'] == {region!r} for r in rows))",
             lambda r: {"region": r.choice(REGIONS)}),
    Template("rainy-days", 1, ("weather.csv",), "number", None,
             "In weather.csv, on how many days did it rain (precip_mm > 0) in {city}?",
             _WEATHER + "print(sum(float(r['precip_mm']) > 0 for r in rows))",
             lambda r: {"city": r.choice(CITIES)}),
    Template("product-month-revenue", 2, ("sales.csv",), "number", 2,
             "What was the total revenue (units × unit_price) of {product} orders in {month_name} 2024, "
             "according to sales.csv?",
             _SALES + "print(round(sum(int(r['units']) * float(r['unit_price']) for r in rows "
             "if r['product'] == {product!r} and r['date'][5:7] == '{month:02d}'), 2))",
             lambda r: {"product": r.choice(list(PRODUCTS)), **_month(r)}),
    Template("department-mean-salary", 2, ("staff.sqlite",), "number", 2,
             "What is the average salary of the employees of the {dept} department in the SQLite database "
             "staff.sqlite?",
             _STAFF + "(value,) = db.execute('SELECT AVG(salary) FROM employees e JOIN departments d "
             "ON d.id = e.department_id WHERE d.name = ?', ({dept!r},)).fetchone()\nprint(round(value, 2))",
             lambda r: {"dept": r.choice(DEPARTMENTS)}),
    Template("top-region-quarter", 3, ("sales.csv",), "text_ci", None,
             "Which region had the highest total revenue (units × unit_price) in Q{quarter} 2024 in sales.csv? "
             "Answer with the region's name.",
             _SALES + "totals = {{}}\nfor r in rows:\n    if (int(r['date'][5:7]) - 1) // 3 + 1 == {quarter}:\n"
             "        totals[r['region']] = totals.get(r['region'], 0) + int(r['units']) * float(r['unit_price'])\n"
             "print(max(totals, key=totals.get))",
             lambda r: {"quarter": r.randint(1, 4)}),
    Template("city-month-mean-temperature", 3, ("weather.csv",), "number", 2,
             "What was the mean temperature (temp_c) in {city} in {month_name} 2023, according to weather.csv?",
             _WEATHER + "import statistics\nprint(round(statistics.mean(float(r['temp_c']) for r in rows "
             "if r['date'][5:7] == '{month:02d}'), 2))",
             lambda r: {"city": r.choice(CITIES), **_month(r, (3, 4, 5, 6))}),
    Template("payroll-over-budget", 4, ("staff.sqlite",), "text_ci", None,
             "In staff.sqlite, which department has the highest ratio of total employee salary to its budget? "
             "Answer with the department's name.",
             _STAFF + "print(db.execute('SELECT d.name FROM departments d JOIN employees e ON e.department_id = d.id "
             "GROUP BY d.id ORDER BY SUM(e.salary) / d.budget DESC LIMIT 1').fetchone()[0])",
             lambda r: {}),
    Template("out-earning-managers", 4, ("staff.sqlite",), "number", None,
             "In staff.sqlite, how many employees hired in {year} or later earn more than their manager "
             "(employees.manager_id)?",
             _STAFF + "print(db.execute(\"SELECT COUNT(*) FROM employees e JOIN employees m ON m.id = e.manager_id "
             "WHERE e.salary > m.salary AND e.hire_date >= '{year}-01-01'\").fetchone()[0])",
             lambda r: {"year": r.randint(2014, 2020)}),
    Template("longest-dry-spell", 5, ("weather.csv",), "number", None,
             "In weather.csv, what is the longest run of consecutive days without rain (precip_mm equal to 0) "
             "in {city}?",
             _WEATHER + "best = run = 0\nfor r in sorted(rows, key=lambda r: r['date']):\n"
             "    run = run + 1 if float(r['precip_mm']) == 0 else 0\n    best = max(best, run)\nprint(best)",
             lambda r: {"city": r.choice(CITIES)}),
    Template("temperature-rain-correlation", 5, ("weather.csv",), "number", 3,
             "What is the Pearson correlation between temp_c and precip_mm for {city} in weather.csv?",
             _WEATHER + "import statistics\nprint(round(statistics.correlation([float(r['temp_c']) for r in rows], "
             "[float(r['precip_mm']) for r in rows]), 3))",
             lambda r: {"city": r.choice(CITIES)}),
    Template("median-monthly-revenue", 5, ("sales.csv",), "number", 2,
             "For the {region} region, compute the total revenue (units × unit_price) of each month of 2024 in "
             "sales.csv. What is the median of these 12 monthly totals?",
             _SALES + "import statistics\nmonths = [0.0] * 12\nfor r in rows:\n    if r['region'] == {region!r}:\n"
             "        months[int(r['date'][5:7]) - 1] += int(r['units']) * float(r['unit_price'])\n"
             "print(round(statistics.median(months), 2))",
             lambda r: {"region": r.choice(REGIONS)}),
)  # fmt: skip


def _month(rng: random.Random, choices: Sequence[int] = tuple(range(1, 13))) -> P:
    month = rng.choice(list(choices))
    return {"month": month, "month_name": _MONTHS[month - 1]}


def generate(
    state: Path,
    *,
    seed: int | None = None,
    per_template: int = 2,
    difficulties: Sequence[int] = (1, 2, 3, 4, 5),
) -> list[dict[str, Any]]:
    """Write the datasets into ``state`` and return the tasks (tasks.jsonl lines).  ``seed``
    None draws a secret one (the agent sees the data files, never how they were drawn)."""
    if seed is None:
        seed = secrets.randbits(63)
    write_datasets(state, seed)
    tools, verifier = bundle_module("tools"), bundle_module("verifier")
    rng = random.Random(f"code-interpreter-data-tasks-{seed}")
    tasks: list[dict[str, Any]] = []
    for template in TEMPLATES:
        if template.difficulty not in difficulties:
            continue
        seen: set[str] = set()
        for _ in range(per_template * 4):
            if len(seen) >= per_template:
                break
            params = template.params(rng)
            prompt = template.prompt.format(**params) + _round(template.decimals)
            if prompt in seen:
                continue
            seen.add(prompt)
            code = template.code.format(**params)
            with contextlib.chdir(state):
                answer = tools.python(code).strip()
            meta: dict[str, Any] = {"family": "data", "generator": template.name, "answer_kind": template.kind,
                                    "answer": answer, "reference_code": code, "files": list(template.files)}  # fmt: skip
            if template.decimals is not None:
                meta["abs_tol"] = 0.5 * 10**-template.decimals + 1e-6
            task = {
                "id": f"data-{template.name}-{len(seen) - 1}",
                "prompt": prompt + " The data files are in the current working directory.",
                "solution": "solve_with_code",
                "verifier": "verify_answer",
                "difficulty": template.difficulty,
                "submit_tool": "submit_answer",
                "system_prompt": None,
                "metadata": meta,
            }
            report = verifier.verify_answer({"answer": answer}, task)
            if not all(c["passed"] for c in report["checks"]):
                raise RuntimeError(
                    f"reference answer of {task['id']} ({answer[:200]!r}) fails the verifier: {report}"
                )
            tasks.append(task)
    return tasks
