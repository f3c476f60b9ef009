"""The beyond-the-paper record's differences: per fold first, then the corrected resampled t
interval of k-fold cross-validation (Nadeau & Bengio 2003), checked against hand values."""

from __future__ import annotations

from pathlib import Path

import pytest
from _bench import benchmark

ROOT = Path(__file__).resolve().parents[1]


def _summary():
    return benchmark("tu_beyond_summary")


def test_the_interval_is_over_folds_with_the_overlap_correction():
    mod = _summary()
    # folds 0-2, 2 seeds each: differences (1, 3), (0, 2), (4, 2) -> fold means 2, 1, 3
    row = {(0, 0): 11.0, (0, 1): 13.0, (1, 0): 10.0, (1, 1): 12.0, (2, 0): 14.0, (2, 1): 12.0}
    base = dict.fromkeys(row, 10.0)
    d = mod.fold_difference(sorted(row), row, base, folds=10)
    # mean 2, s 1 over 3 folds: half = t(0.975, 2) * sqrt(1/3 + 1/9) = 4.302653 * 2/3
    assert d["mean"] == pytest.approx(2.0)
    assert d["hi"] - d["mean"] == pytest.approx(4.302653 * 2 / 3, rel=1e-6)
    assert d["mean"] - d["lo"] == pytest.approx(d["hi"] - d["mean"])
    assert (d["folds"], d["pairs"]) == (3, 6)
    # treating the 6 runs as independent pairs would give the narrower +-2.0 interval
    assert d["hi"] - d["mean"] > 2.5


def test_one_fold_gives_no_interval():
    mod = _summary()
    row = {(0, 0): 1.0, (0, 1): 2.0}
    assert mod.fold_difference(sorted(row), row, dict.fromkeys(row, 0.0), folds=10) is None


def _frame(runs: list[tuple]):
    """A read_trials-like frame: (row, fold, seed, accuracy, data_params extra) per run."""
    import json

    import pandas as pd

    recs = []
    for row, fold, seed, acc, extra in runs:
        recs.append({"status": "ok", "split": "test_orig", "dataset": "tu:X", "backbone": "gin",
                     "pool_layers": "" if row == "global" else "2",
                     "supervision": "unsup" if row == "global" else row, "seed": seed,
                     "accuracy": acc, "data_params": json.dumps({"protocol": "cv", "fold": fold,
                                                                 **extra})})
    return pd.DataFrame(recs)


def test_summary_reads_k_from_the_records_and_keeps_partitions_apart():
    """k from data_params (5 here, not a hard-coded 10); with a split per seed, fold 0 of
    seed 0 and fold 0 of seed 1 are different test sets: 4 units, not 2 folds."""
    mod = _summary()
    runs = []
    for fold in (0, 1):
        for seed in (0, 1):
            extra = {"folds": 5, "split_seed": seed}
            runs += [("global", fold, seed, 0.5, extra),
                     ("weak", fold, seed, 0.5 + 0.01 * (1 + fold + 2 * seed), extra)]
    row = mod.summarise(_frame(runs))["rows"][0]
    assert row["k"] == 5
    d = row["diffs"]["weak"]
    assert (d["folds"], d["pairs"]) == (4, 4)
    assert d["mean"] == pytest.approx(2.5)


def test_summary_refuses_a_store_that_is_not_cross_validated():
    mod = _summary()
    df = _frame([("global", 0, 0, 0.5, {"folds": 10})])
    df["data_params"] = "{}"
    with pytest.raises(SystemExit, match="not folds"):
        mod.summarise(df)


def test_the_tables_note_divides_by_the_folds_paired_not_the_cvs_k(tmp_path, monkeypatch):
    """A row paired over 4 folds of a 10-fold CV has variance (1/4 + 1/9) s² (`fold_difference`):
    the note's first term is the folds paired (m, in brackets), k only in 1/(k - 1)."""
    import json

    tables = benchmark("tables_open")
    cell = {"mean": 80.0, "std": 1.0, "n": 8, "folds": 4}
    doc = {"rows": [{"dataset": "tu:X", "backbone": "gin", "k": 10, "cells": {"global": cell},
                     "diffs": {"weak": {"mean": -1.0, "lo": -2.0, "hi": 0.0, "pairs": 8,
                                        "folds": 4}}}],
           "done": 8, "planned": 24, "command": "c", "commits": "commits x", "machine": "m"}
    (tmp_path / tables.BEYOND).parent.mkdir(parents=True)
    (tmp_path / tables.BEYOND).write_text(json.dumps(doc))
    monkeypatch.setattr(tables, "RESULTS", tmp_path)
    text = tables.tu_beyond()
    assert "(4 folds)" in text
    assert "(1/m + 1/(k - 1)) s², not s²/m" in text and "k = 10" in text
    assert "1/k +" not in text
