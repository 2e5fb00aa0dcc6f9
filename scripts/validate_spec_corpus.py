"""Validate the domain corpus at scale: for every note and seed, write a spec, load it, compile a
small bundle (the compiler proves every task on the written files) and collect the distinct tool
signatures (name + argument names and JSON types, as ``envgym.tool_schema`` describes them).

    nice -n 19 python scripts/validate_spec_corpus.py --seeds 0 1 2 --tasks 5 --out report.jsonl
    nice -n 19 python scripts/validate_spec_corpus.py --check-sample 10   # + envgym check

One JSON line per (domain, seed) goes to ``--out`` as it finishes (a partial run still counts);
the summary is printed at the end.  Failures are reported with their reason, never skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envgym.envs.procedural_kit.local import LocalBundle  # noqa: E402
from envgym.envs.procedural_kit.spec.compile import compile_spec  # noqa: E402
from envgym.envs.procedural_kit.spec.validate import load_spec  # noqa: E402
from envgym.envs.procedural_kit.spec.writer import write_spec  # noqa: E402
from envgym.synth_agents.domain_corpus import notes  # noqa: E402
from envgym.tool_schema import function_schema  # noqa: E402


def _strip(schema: Any) -> Any:
    """A parameter schema without prose: two tools differ only by what an agent can pass."""
    if isinstance(schema, dict):
        return {k: _strip(v) for k, v in sorted(schema.items()) if k != "description"}
    if isinstance(schema, list):
        return [_strip(v) for v in schema]
    return schema


def signatures(root: Path) -> list[str]:
    """One stable string per tool of the bundle at ``root``: its name and typed arguments."""
    out = []
    for name, fn in sorted(LocalBundle(root).tool_functions.items()):
        spec = function_schema(fn)
        params = _strip(spec.parameters)
        out.append(name + json.dumps(params, sort_keys=True))
    return out


def run_one(note: Any, seed: int, tasks: int, work: Path) -> dict[str, Any]:
    row: dict[str, Any] = {"domain": note.domain, "seed": seed}
    try:
        spec_obj = write_spec(note, seed)
        spec = load_spec(spec_obj)
        row["spec_valid"] = True
    except Exception as exc:  # reported, not hidden: the corpus is the thing under test
        return {**row, "spec_valid": False, "error": f"{type(exc).__name__}: {exc}"[:400]}
    root = work / f"{note.slug}-seed{seed}"
    try:
        compile_spec(spec, root, seed=seed, n_tasks=tasks)
        row["compiled"] = True
        row["signatures"] = signatures(root)
    except Exception as exc:
        row.update(compiled=False, error=f"{type(exc).__name__}: {exc}"[:400])
    return row


def check(root: Path) -> tuple[bool, str]:
    cmd = [sys.executable, "-m", "envgym.cli", "check", str(root)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
    return proc.returncode == 0, " | ".join(tail)[:400]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--tasks", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("spec_corpus_report.jsonl"))
    ap.add_argument("--domains", nargs="*", help="only these domains (default: all)")
    ap.add_argument("--check-sample", type=int, default=0, help="envgym check on N random bundles")
    args = ap.parse_args()
    chosen = [n for n in notes() if not args.domains or n.domain in args.domains]
    work = Path(tempfile.mkdtemp(prefix="spec-corpus-"))
    rows = []
    with open(args.out, "a", encoding="utf-8") as fh:
        if args.check_sample:
            for note in random.Random(0).sample(chosen, min(args.check_sample, len(chosen))):
                row = run_one(note, 0, args.tasks, work)
                if row.get("compiled"):
                    row["check_passed"], row["check_tail"] = check(work / f"{note.slug}-seed0")
                row.pop("signatures", None)
                fh.write(json.dumps(row) + "\n")
                fh.flush()
                print(json.dumps(row), flush=True)
            return 0
        for note in chosen:
            for seed in args.seeds:
                row = run_one(note, seed, args.tasks, work)
                rows.append(row)
                fh.write(json.dumps(row) + "\n")
                fh.flush()
    summarize(rows)
    return 0


def summarize(rows: list[dict[str, Any]]) -> None:
    sigs = {s for r in rows for s in r.get("signatures", ())}
    print(f"domains: {len({r['domain'] for r in rows})}")
    print(f"specs written: {len(rows)}, valid: {sum(bool(r.get('spec_valid')) for r in rows)}")
    print(f"bundles compiled: {sum(bool(r.get('compiled')) for r in rows)}")
    print(f"distinct tool signatures: {len(sigs)}")
    digest = hashlib.sha256("\n".join(sorted(sigs)).encode()).hexdigest()[:12]
    print(f"signature set digest: {digest}")
    for r in rows:
        if r.get("error"):
            print(f"FAIL {r['domain']} seed {r['seed']}: {r['error']}")


if __name__ == "__main__":
    raise SystemExit(main())
