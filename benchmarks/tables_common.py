"""What every generated table of `benchmarks/tables.py` reads with: the results folder, the
records under it and the source line under a table (file, commit, tree state, machine, date).

The table modules (`tables`, `tables_mnist`, `tables_memory`) read `RESULTS` through this
module at call time, so a test points them all at its own folder with one monkeypatch.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def load(rel: str) -> dict | None:
    p = RESULTS / rel
    return json.loads(p.read_text()) if p.exists() else None


def lines(rel: str) -> list[dict]:
    p = RESULTS / rel
    return [json.loads(s) for s in p.read_text().splitlines() if s.strip()] if p.exists() else []


def tree(sha: str | None, dirty) -> str:
    if not sha:
        return "commit not recorded"
    if dirty is None:
        return f"commit {sha}, tree state not recorded (the run predates the flag)"
    return f"commit {sha}, {'modified' if dirty else 'clean'} tree"


def source(rel: str, machine: dict | None = None, sha: str | None = None, dirty=None,
            extra: str = "") -> str:
    m = machine or {}
    sha = sha or m.get("git_sha")
    dirty = dirty if dirty is not None else m.get("git_dirty")
    where = ", ".join(str(x) for x in (m.get("gpu"), m.get("driver") and f"driver {m['driver']}",
                                       m.get("cpus") and f"{m['cpus']} CPUs",
                                       m.get("torch") and f"torch {m['torch']}") if x)
    date = (m.get("date") or "")[:10]
    parts = [f"`benchmarks/results/{rel}`", tree(sha, dirty)] + [x for x in (where, date, extra) if x]
    return "Source: " + "; ".join(parts) + "."


def commits(recs: list[dict]) -> str:
    """The commits a set of JSON records were made at, * marking a modified tree: each record's
    own and, where its chunks name theirs (runs resumed over several sessions), every chunk's."""
    shas = sorted({x["git_sha"][:7] + ("*" if x.get("git_dirty") else "")
                   for r in recs for x in (r, *(c for c in r.get("chunks") or []
                                                if isinstance(c, dict)))
                   if x.get("git_sha")})
    return f"commits {', '.join(shas)}, * = modified tree" if shas else "commit not recorded"


def missing(rel: str) -> str:
    return f"Not measured: `benchmarks/results/{rel}` is not in this checkout.\n"
