"""What an adaptive-seed study's decisions file means for the rest of its report (issue 54).

The runner stores each comparison's decision in `adaptive.json` beside the study's results
(`read_decisions`). On such a study the seeds of a row depend on what the sequence saw, so a
fixed-n test run afterwards on the seeds it happened to get does not hold its level (optional
stopping). The report therefore takes its up/down markers from the stored decisions
(`apply_decisions`: a `sequence` column on the cell lines, read by `cells.significant`), and
counts a row as short of seeds only against the seeds its rounds called for
(`expected_seeds`), not against the rows that went on.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from analysis.reference import AUC_COLUMN
from analysis.sequences import looks

# ablate.runner.plan.adaptive.DECISIONS_FILE (analysis imports nothing from ablate; a test
# keeps the two equal)
DECISIONS_FILE = "adaptive.json"
DECIDED = ("greater", "less", "equivalent")  # decisions a marker shows
NOT_DECIDED = ""  # a cell line no comparison of the sequence covers


def read_decisions(study_dir: str | Path) -> dict | None:
    """The decisions file of a study folder, or None when the study is not adaptive (or the
    file cannot be read as a JSON object)."""
    path = Path(study_dir) / DECISIONS_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and "comparisons" in doc else None


def decision_column(doc: dict, split: str) -> str:
    """The table column a decision is about: its split for accuracy, the AUC column for
    metric=auc (the pooled attention AUC of the seed, the same on every split)."""
    return AUC_COLUMN if doc["options"].get("metric") == "auc" else split


def cell_decisions(doc: dict) -> dict[tuple[str, str, str, str], str]:
    """(row, baseline, dataset, column) -> the sequence's decision, for every comparison."""
    return {(c["row"], c["baseline"], c["dataset"], decision_column(doc, c["split"])):
            c["decision"] for c in doc["comparisons"]}


def apply_decisions(cells: pd.DataFrame, doc: dict) -> pd.DataFrame:
    """`cells` (`cells.cell_stats`) with a `sequence` column: the stored decision of the line's
    comparison on its dataset and column, or NOT_DECIDED where the sequence decided nothing
    (another split or column, or a line without a baseline)."""
    known = cell_decisions(doc)
    out = cells.copy()
    out["sequence"] = [known.get((r, b, d, c), NOT_DECIDED) for r, b, d, c in zip(
        out["row"], out["baseline"], out["dataset"], out["column"])]
    return out


def last_round(doc: dict) -> int:
    """The last round the decisions file holds (0: none ended yet)."""
    return int(doc.get("round") or 0)


def expected_seeds(doc: dict) -> dict[tuple[str, str], int]:
    """(row, dataset) -> the seeds its rounds called for: round 1's for every pair, and for
    the rows of a comparison the seeds up to the round that decided it, or that found no seeds
    up to max could (`stopped`), or up to the last round while it is open. A pair the file
    does not name gets round 1's (`default_seeds`)."""
    opts = doc["options"]
    at = [int(n) for n in looks(opts["start"], opts["step"], opts["max"])]
    done = last_round(doc)
    out: dict[tuple[str, str], int] = {}
    for c in doc["comparisons"]:
        decided = c["decision"] != "open" and int(c.get("round") or 0) > 0
        stopped = int(c.get("stopped") or 0) if c["decision"] == "open" else 0
        r = min(int(c["round"]), done) if decided else min(stopped, done) if stopped else done
        r = max(1, r)  # before round 1 ended: round 1's seeds
        for row in (c["row"], c["baseline"]):
            key = (row, c["dataset"])
            out[key] = max(out.get(key, 0), at[r - 1])
    for x in doc.get("left_out", []):
        for row in (x["row"], x["baseline"]):
            out.setdefault((row, x["dataset"]), at[0])
    return out


def default_seeds(doc: dict) -> int:
    """Round 1's seeds: what every (row, dataset) pair of the study trains."""
    return int(doc["options"]["start"])
