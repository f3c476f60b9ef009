"""What a newcomer reads beside the report's numbers: why a counting task reads 0.0 ± 0.0,
what n counts in the tables and in the figure legends (the same thing: runs per dataset),
and where the paper and the authors' script are (a citation and a link, not SPEC)."""

from __future__ import annotations

import re

import pandas as pd

from analysis import figure_style
from analysis.report import write_report
from analysis.synthetic import trial_record, write_trials


def _short_run(root) -> None:
    """A short smoke-like run: 2 seeds of each variant on COLORS and TRIANGLES; the attention
    rows never count a triangle exactly (accuracy 0 on every TRIANGLES split)."""
    rows = []
    for ds, splits in (("colors", ("val", "test_orig", "test_large", "test_largec")),
                       ("triangles", ("val", "test_orig", "test_large"))):
        for pool in ("", "1"):
            for seed in (0, 1):
                for split in splits:
                    zero = ds == "triangles" and pool == "1" and split != "val"
                    rows.append(trial_record(trial_id=f"{ds}{pool or 'g'}", seed=seed, split=split,
                                             dataset=ds, pool_layers=pool,
                                             accuracy=0.0 if zero else 0.1 + 0.05 * seed,
                                             attn_auc_l0=0.6 + 0.1 * seed))
    write_trials(root, "short", rows)


def test_a_short_run_explains_zero_counts_n_and_cites_the_paper(tmp_path):
    _short_run(tmp_path / "res")
    write_report(tmp_path / "res", tmp_path / "out", n_boot=100)
    md = (tmp_path / "out" / "report.md").read_text()
    main = (tmp_path / "out" / "tables" / "short__main.md").read_text()
    # TRIANGLES 0.0 ± 0.0: explained beside the table, naming the cells
    assert "0.0 ± 0.0" in main
    note = next(line for line in main.splitlines() if "is an accuracy, not a failure" in line)
    assert "TRIANGLES counts triangles" in note and "rounded to the nearest integer" in note
    assert "ChebyGIN unsup on TRIANGLES (ORIG, LARGE)" in note
    assert "COLORS" not in note.split("Cells at")[1]  # COLORS is not at zero here
    # n: 2 in the table (per dataset), 2 per dataset in the figure legends, not 4
    assert re.search(r"\| ChebyGIN global pool \| 2 \|", main)
    svgs = "".join(p.read_text() for p in (tmp_path / "out" / "figures").glob("*.svg"))
    assert "(n = 2 runs per dataset)" in svgs and "(n = 4 runs)" not in svgs  # legends
    assert "runs (one seed of one trial) per dataset, as n in the tables" in md
    # the sources by name and link, never the project's own SPEC
    assert "arXiv:1905.02850" in md and "Knyazev, Taylor & Amer" in md
    assert "SPEC" not in md and "SPEC" not in main


def test_no_zero_note_when_no_cell_is_zero(tmp_path):
    rows = [trial_record(trial_id="t", seed=s, split=sp, dataset="triangles", accuracy=0.3)
            for s in (0, 1) for sp in ("val", "test_orig", "test_large")]
    write_trials(tmp_path / "res", "fine", rows)
    write_report(tmp_path / "res", tmp_path / "out", figures=False, n_boot=100)
    assert "not a failure" not in (tmp_path / "out" / "tables" / "fine__main.md").read_text()


def test_run_counts_are_per_dataset_as_in_the_tables():
    df = pd.DataFrame({"trial_id": ["a", "a", "b", "b", "c", "c", "c"],
                       "seed": [0, 1, 0, 1, 0, 1, 2],
                       "dataset": ["colors", "colors", "triangles", "triangles",
                                   "colors", "colors", "colors"],
                       "variant": ["v", "v", "v", "v", "w", "w", "w"]})
    assert figure_style.run_counts(df, "variant") == {"v": "n = 2 runs per dataset",
                                                      "w": "n = 3 (COLORS) runs"}
    one = df[df["dataset"] == "colors"]
    assert figure_style.run_counts(one, "variant") == {"v": "n = 2 runs", "w": "n = 3 runs"}
