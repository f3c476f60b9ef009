"""Figures that cannot go stale: every generated table of the docs is what `benchmarks/tables.py`
makes of the JSON in `benchmarks/results/` (issue 36)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _tables():
    spec = importlib.util.spec_from_file_location("tables", ROOT / "benchmarks" / "tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_generated_table_in_the_docs_matches_the_results_on_disk():
    tables = _tables()
    assert tables.stale() == [], "run python benchmarks/tables.py and commit the docs"


def test_the_docs_hold_the_generated_tables():
    text = {p.name: p.read_text() for p in tables_docs()}
    for name, doc in (("studies", "README.md"), ("memory", "performance.md"), ("scale", "performance.md"),
                      ("gpu_steps", "performance.md"), ("gpu_recipes", "performance.md"),
                      ("tu_fidelity", "fidelity.md"), ("mnist_reference", "fidelity.md"),
                      ("mnist_fullsize", "fidelity.md"), ("tu_published", "fidelity.md"),
                      ("adaptive_sim", "performance.md"), ("adaptive_study", "performance.md")):
        assert f"<!-- generated:{name} -->" in text[doc], (name, doc)


def tables_docs() -> list[Path]:
    return _tables().DOCS


def test_a_hand_edited_number_is_found_and_regenerated(tmp_path, monkeypatch):
    tables = _tables()
    results = tmp_path / "results"
    (results / "cpu-2026-11-26-scale").mkdir(parents=True)
    row = {"trials": 1000, "wall_s": 60.9, "first_started_s": 9.0, "first_stored_s": 10.3,
           "overhead_ms": 31.7, "steady_overhead_ms": 19.3, "peak_rss_mb": 453.0, "store_mb": 13.3,
           "store_files": 2003}
    for name in ("real", "instant"):
        (results / "cpu-2026-11-26-scale" / f"{name}.json").write_text(json.dumps({"rows": [row]}))
    monkeypatch.setattr(tables, "RESULTS", results)
    doc = tmp_path / "doc.md"
    fresh = tables.render("# x\n\n<!-- generated:scale -->\n<!-- /generated:scale -->\n")
    assert "| 1,000 | 9.0 s | 10.3 s | 60.9 s |" in fresh
    doc.write_text(fresh.replace("60.9 s", "50.0 s"))  # a number typed over by hand
    assert tables.stale([doc]) == [f"{doc}: scale"]
    assert tables.render(doc.read_text()) == fresh


def test_a_missing_source_says_not_measured(tmp_path, monkeypatch):
    tables = _tables()
    monkeypatch.setattr(tables, "RESULTS", tmp_path)
    out = tables.render("<!-- generated:gpu_steps -->\n<!-- /generated:gpu_steps -->\n")
    assert "Not measured" in out and "|" not in out.split("-->", 1)[1].split("<!--")[0].replace("`", "")


def test_the_fullsize_reading_is_computed_from_the_seeds():
    """Issue 41's statement (does either code reach the paper's 92.3 ± 0.4; what the seed spread
    means for rows compared with few seeds) comes from the records, not typed by hand."""
    tables = _tables()

    def rec(noisy):
        return {"curve": {"30": [95.0, noisy, 90.0]}}

    sides = {"authors": [rec(92.0), rec(92.6), rec(92.3)], "ours": [rec(80.0), rec(84.0)]}
    text = tables._fullsize_reading("sup", sides)
    # authors: mean 92.30, sd 0.30, t(2) interval [91.6, 93.0]; all three within 92.3 ± 0.4
    assert "authors 92.30 [91.6, 93.0] over 3 seeds (seed std 0.30)" in text
    assert "inside the interval: yes; 3 of 3 seeds within 92.3 ± 0.4" in text
    # ours: mean 82.0, sd 2.83, t(1) interval [56.6, 107.4]: wide, so it cannot exclude 92.3
    assert "ours 82.00 [56.6, 107.4] over 2 seeds" in text and "0 of 2 seeds within" in text
    # pooled sd sqrt((2*0.09 + 1*8)/3) = 1.65; 3 seeds a side: t(4) 2.776 * 1.65 * sqrt(2/3)
    assert "moves by 1.7 points" in text and "about 3.7 with 3;" in text
    one = tables._fullsize_reading("global", {"authors": [rec(74.0)], "ours": []})
    assert "80 ± 12" in one and "one seed finished" in one and "no seed finished" in one
    assert "moves by" not in one


def test_tu_costs_leave_out_runs_that_shared_the_machine(tmp_path, monkeypatch):
    """The README's cost per seed on one core: a run beside other work (a note, or a load
    above the machine's cores) is not one."""
    tables = _tables()
    (tmp_path / "cpu-2026-11-27-tu-fidelity").mkdir()
    recs = [{"side": "ours", "row": "proteins_weak", "seconds": s, "machine": "x86_64, 2 cores", **extra}
            for s, extra in ((6.0, {}), (8.0, {"load_1min": 1.5}), (20.0, {"load_1min": 4.5}),
                             (22.0, {"machine_note": "other work shared the cores"}))]
    recs.append({"side": "authors", "row": "proteins_weak", "seconds": 90.0, "machine": "x86_64, 2 cores"})
    (tmp_path / tables.TU_RECORDS).write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    monkeypatch.setattr(tables, "RESULTS", tmp_path)
    assert tables._tu_seconds() == {"proteins_weak": 7.0}
