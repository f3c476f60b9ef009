"""Adaptive seeds on metric=auc with several splits: one decision per comparison and dataset.

A seed's AUC in the report (its AUC column) is the first pooling layer's AUC over the nodes of
all its test graphs together, stored on every split's row of the seed. Deciding it per split
decided one comparison once per split from the same numbers, listed the same decision per
split in adaptive.json and the report, and split alpha over the copies. Values below are known
by construction (synthetic records), not recomputed with the code under test.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from ablate.runner.plan import adaptive as ad
from ablate.runner.plan.adaptive_rounds import Rounds
from analysis import reference
from analysis.synthetic import trial_record, write_trials

A, B = "GIN unsup", "GIN sup"
SPLITS = ("test_orig", "test_large", "test_largec")
OPTS = ad.AdaptiveSeeds(start=10, step=2, max=14, metric="auc",
                        split=("test_largec", "test_orig"))


def _plan() -> ad.PlanRows:
    row_of = {f"{v}{s}": row for v, row in (("a", A), ("b", B)) for s in range(14)}
    return ad.PlanRows(row_of, [(B, A, "supervision")], {A: ["colors"], B: ["colors"]},
                       {(A, "colors"), (B, "colors")})


def _store(root, pooled: bool = True) -> None:
    """Seeds 0-13 of both rows on COLORS, every test split. Pooled AUC (the same on each split
    of a seed): A 0.05, B 0.95 (+90 points). The per-split attn_auc_l0 differs by split
    (ORIG: A 0.06, B 0.94; LARGE/LARGE-C: 0.30 for both); `pooled=False`: a store written
    before the pooled column (NaN), where the report shows ORIG's attn_auc_l0."""
    rows = []
    for v, (pool, orig) in (("a", (0.05, 0.06)), ("b", (0.95, 0.94))):
        for s in range(14):
            for sp in SPLITS:
                rows.append(trial_record(
                    trial_id=f"{v}{s}", seed=s, seeds=str(s), split=sp, dataset="colors",
                    backbone="gin", supervision="unsup" if v == "a" else "sup",
                    attn_auc_pooled_l0=pool if pooled else np.nan,
                    attn_auc_l0=orig if sp == "test_orig" else 0.3))
    write_trials(root, "ad", rows)


def test_the_names_mirror_the_reports():
    assert ad.AUC_DECIDED == reference.AUC_COLUMN and ad.AUC_ROW_SPLIT == reference.AUC_SPLIT


def test_one_decision_per_comparison_and_dataset_whatever_the_splits():
    dec = ad.initial_decisions(OPTS, _plan())
    assert list(dec) == [(B, A, "colors", "auc")]
    acc = ad.AdaptiveSeeds(start=10, step=2, max=14, split=("test_largec", "test_orig"))
    assert sorted(ad.initial_decisions(acc, _plan())) == [  # accuracy: one per split, distinct
        (B, A, "colors", "test_largec"), (B, A, "colors", "test_orig")]
    assert ad.sequence_alpha(OPTS, len(dec)) == 0.05  # not halved over two copies


@pytest.mark.parametrize("pooled, want", [(True, 0.9), (False, 0.88)])
def test_the_values_are_the_auc_column_one_per_seed(tmp_path, pooled, want):
    """One value per (row, seed), the report's: the pooled AUC, else ORIG's attn_auc_l0 (never
    LARGE-C's 0.30, the first split listed)."""
    _store(tmp_path / "r", pooled)
    values = ad.store_values(OPTS, _plan(), tmp_path / "r", "ad")
    assert len(values) == 2 * 14 and set(values["split"]) == {"auc"}
    by = values.pivot(index="seed", columns="row", values="value")
    assert (by[B] - by[A]).to_numpy() == pytest.approx(np.full(14, want))
    assert by[A].to_numpy() == pytest.approx(np.full(14, 0.05 if pooled else 0.06))


def test_the_decisions_file_and_the_report_list_it_once(tmp_path):
    """Decided after round 1 (90 points at alpha 0.05, one comparison: the betting sequence's
    capital reaches (1 + 0.75 * 0.9)^10 = 174 > 2 / alpha = 40), written once to
    adaptive.json, shown once in the adaptive table and as the AUC column's marker."""
    from analysis.report import write_report

    _store(tmp_path / "r")
    plan = _plan()
    trials = []
    from types import SimpleNamespace

    for tid in plan.row_of:
        s = int(tid[1:])
        trials.append(SimpleNamespace(trial_id=tid, config=SimpleNamespace(
            seeds=(s,), dataset="colors", pool_layers=(1,))))
    rounds = Rounds(OPTS, trials, plan, ad.initial_decisions(OPTS, plan), [])
    values = ad.store_values(OPTS, plan, tmp_path / "r", "ad")
    rounds.decide(1, values)
    assert [(d.split, d.decision, d.round, d.seeds) for d in rounds.decisions.values()] == [
        ("auc", "greater", 1, 10)]
    rounds.write(tmp_path / "r" / "ad" / ad.DECISIONS_FILE)
    doc = json.loads((tmp_path / "r" / "ad" / ad.DECISIONS_FILE).read_text())
    assert len(doc["comparisons"]) == 1 and doc["alpha_per_comparison"] == 0.05
    write_report(tmp_path / "r", tmp_path / "out", figures=False)
    md = (tmp_path / "out" / "tables" / "ad__adaptive.md").read_text()
    lines = [x for x in md.splitlines() if x.startswith(f"| {B} | {A} |")]
    assert len(lines) == 1 and "COLORS / AUC (all test graphs)" in lines[0]
    assert "higher than its baseline" in lines[0]
    assert "split over the study's 1 comparisons" in md
    main = (tmp_path / "out" / "tables" / "ad__main.md").read_text()
    row = next(x for x in main.splitlines() if x.startswith(f"| {B} "))
    assert row.count("↑") == 1  # on the AUC column only
