"""Hand-written readings in docs/ against the records they read (the generated tables beside
them are checked by `python benchmarks/tables.py --check`; these sentences are not)."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _text(doc: str) -> str:
    return " ".join((ROOT / "docs" / doc).read_text().split())


def test_beyond_md_says_which_sets_clear_the_fold_level_interval():
    """Every set complete (10 folds a difference); ENZYMES and NCI1 are the sets whose
    differences exclude 0, and the NCI1 bullet quotes its four differences as the record has
    them."""
    doc = json.loads((RESULTS / "cpu-2026-12-02-tu-beyond" / "summary.json").read_text())
    assert all(d["folds"] == 10 for r in doc["rows"] for d in r["diffs"].values())
    clear = {r["dataset"] for r in doc["rows"] for d in r["diffs"].values()
             if d["lo"] > 0 or d["hi"] < 0}
    assert clear == {"tu:ENZYMES", "tu:NCI1"}
    text = _text("beyond.md")
    assert "ENZYMES (6 classes) and NCI1 are the sets where differences clear" in text
    nci1 = {r["backbone"]: r["diffs"] for r in doc["rows"] if r["dataset"] == "tu:NCI1"}
    for backbone in ("chebygin", "dense_gin"):  # the NCI1 bullet's four differences
        for row in ("weak", "unsup"):
            d = nci1[backbone][row]
            assert re.search(rf"{-d['mean']:.1f} (points )?below", text), (backbone, row)
            assert f"({d['lo']:.1f} to {d['hi']:+.1f})" in text or \
                f"({d['lo']:.1f} to {d['hi']:.1f})" in text, (backbone, row)


def test_fidelity_md_reads_the_one_run_seeds_as_their_records_say():
    """Seeds 0-2 of the authors' global row as one run against their replayed-chunk runs at
    epoch 30: TEST moved by -0.09, 0.00, +0.18 (seed order 1, 0, 2 as the sentence reads),
    NOISY and NOISY-C by 0.06 to 2.55 points."""
    def curve(folder: str, resume: str | None) -> dict[int, list[float]]:
        recs = [json.loads(x) for x in (RESULTS / folder / "records.jsonl").read_text()
                .splitlines() if x.strip()]
        return {r["seed"]: r["curve"]["30"] for r in recs if r["side"] == "authors"
                and r["row"] == "global" and r.get("resume") == resume}

    one = curve("cpu-2026-12-02-mnist-fullsize-exact", "exact")
    replayed = curve("cpu-2026-11-27-mnist-fullsize", None)
    assert sorted(one) == [0, 1, 2]
    test = sorted(round(one[s][0] - replayed[s][0], 2) for s in one)
    noisy = [abs(one[s][i] - replayed[s][i]) for s in one for i in (1, 2)]
    assert test == [-0.09, 0.0, 0.18]
    assert (round(min(noisy), 2), round(max(noisy), 2)) == (0.06, 2.55)
    text = _text("fidelity.md")
    assert ("their seeds moved TEST by −0.09, 0.00 and +0.18 against their replayed runs "
            "(97.15 / 97.30 / 97.23 against 97.24 / 97.30 / 97.05) and the noisy splits by "
            "0.06 to 2.55 points") in text
    assert "97.15 / 97.30 / 97.23" == " / ".join(f"{one[s][0]:.2f}" for s in (1, 0, 2))
    assert "97.24 / 97.30 / 97.05" == " / ".join(f"{replayed[s][0]:.2f}" for s in (1, 0, 2))
