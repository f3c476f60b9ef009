"""One-axis comparisons depend on the records, not on the order they come in.

In study=smoke a row's `pool_layers` is its dataset recipe's (1 on COLORS, 1,2 on
TRIANGLES), so `pool_layers` is no row axis but differs within a row. `comparisons` once
took each row's axis values from its first record: which records came first (the order of
the rows, of the result files, of the planned trials) decided which rows looked alike, and
26 of 30 shuffles of smoke's trials gave 26 different sets of baselines. The expected
comparisons below are written out by hand from the study file.
"""

from __future__ import annotations

import random

import pandas as pd
import pytest

from ablate.config import axes
from ablate.runner.plan import adaptive as ad
from ablate.runner.study.expand import build_study
from analysis.load import load_study
from analysis.synthetic import trial_record, write_trials
from analysis.variants import add_data_axes, add_rows, add_variant, comparisons, row_axes
from result_store import reader

# (row, baseline, axis, value, base value) of study=smoke, in each row's comparison order
SMOKE = {
    "GIN global pool": [],
    "ChebyGIN global pool": [("GIN global pool", "backbone", "chebygin", "gin")],
    "GIN unsup": [("GIN global pool", "pool_layers", "1 / 1,2", "none")],
    "ChebyGIN unsup": [("ChebyGIN global pool", "pool_layers", "1 / 1,2", "none"),
                       ("GIN unsup", "backbone", "chebygin", "gin")],
    "GIN unsup top-k": [("GIN unsup", "selection", "topk", "threshold")],
    "ChebyGIN unsup top-k": [("ChebyGIN unsup", "selection", "topk", "threshold"),
                             ("GIN unsup top-k", "backbone", "chebygin", "gin")],
    "GIN sup": [("GIN unsup", "supervision", "sup", "unsup")],
    "ChebyGIN sup": [("ChebyGIN unsup", "supervision", "sup", "unsup"),
                     ("GIN sup", "backbone", "chebygin", "gin")],
}


def _plain(comps: dict) -> dict:
    return {r: [(c.baseline, c.axis, c.value, c.base_value) for c in cs]
            for r, cs in comps.items()}


def _labelled(df: pd.DataFrame) -> tuple[pd.DataFrame, object]:
    df = add_data_axes(add_variant(df))
    ax = row_axes(df)
    return add_rows(df, ax), ax


@pytest.fixture(scope="module")
def smoke():
    study, _ = build_study("smoke")
    return study


def _records(trials) -> list[dict]:
    """Store rows of the trials: every seed, two test splits each."""
    keep = set(trial_record())
    return [trial_record(**{k: v for k, v in axes(t.config).items() if k in keep},
                         trial_id=t.trial_id, seed=s, split=sp, accuracy=0.5)
            for t in trials for s in t.config.seeds for sp in ("test_orig", "test_large")]


def test_smoke_rows_differ_in_pool_layers_by_dataset(smoke):
    """The premise: a row's pool_layers is not one value (no row axis, yet not constant)."""
    df, ax = _labelled(pd.DataFrame(_records(smoke.trials)))
    assert "pool_layers" not in ax.split_by
    per_row = df[df["row"] == "GIN unsup"].groupby("dataset")["pool_layers"].unique()
    assert {d: list(v) for d, v in per_row.items()} == {"colors": ["1"], "triangles": ["1,2"]}


@pytest.mark.parametrize("seed", range(8))
def test_comparisons_do_not_depend_on_the_order_of_the_rows(smoke, seed):
    recs = _records(smoke.trials)
    random.Random(seed).shuffle(recs)
    df, ax = _labelled(pd.DataFrame(recs))
    assert _plain(comparisons(df, ax)) == SMOKE
    back, ax2 = _labelled(pd.DataFrame(recs[::-1]))
    assert _plain(comparisons(back, ax2)) == SMOKE


@pytest.mark.parametrize("seed", range(3))
def test_the_plan_and_the_report_pair_the_same_rows_whatever_the_file_order(
        smoke, tmp_path, monkeypatch, seed):
    """The runner's adaptive plan (from the trials, in any order) and the report (from the
    store, whose files are named by trial id and listed in any glob order) agree."""
    trials = list(smoke.trials)
    random.Random(seed).shuffle(trials)
    assert sorted(ad.plan_rows(trials).comparisons) == sorted(
        (r, c[0], c[1]) for r, cs in SMOKE.items() for c in cs)
    # the same records under file names in another order: trial ids renamed by a shuffle
    names = [f"t{i:02d}" for i in range(len(trials))]
    recs = _records(trials)
    rename = dict(zip((t.trial_id for t in trials), names))
    write_trials(tmp_path / "r", "smoke", [{**r, "trial_id": rename[r["trial_id"]]}
                                          for r in recs])
    real = reader.result_files
    for flip in (False, True):  # the glob's order, as listed and reversed
        monkeypatch.setattr(reader, "result_files",
                            lambda folder, flip=flip: real(folder)[::-1] if flip else real(folder))
        ok = load_study("smoke", tmp_path / "r" / "smoke").ok
        df, ax = _labelled(ok)
        assert _plain(comparisons(df, ax)) == SMOKE
