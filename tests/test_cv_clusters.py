"""The test fold as the unit of a k-fold cross-validated study beyond the paired test: the
robust aggregates' bootstrap intervals draw whole folds (a cluster bootstrap: a fold's seeds
share its test graphs), the overview's completeness check looks at (partition, fold, seed)
units, and the per-seed strips label a far run with its fold. Stores that are not
cross-validated give what they gave before (numbers pinned from the run-level code)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis import robust
from analysis.overview import rows_missing_seeds
from analysis.variants import Comparison

GLOBAL, UNSUP = "ChebyGIN global pool", "ChebyGIN unsup"
COMPS = {UNSUP: [Comparison(GLOBAL, "pool_layers", "1", "none")]}
K, SEEDS = 10, 5
FOLD = [12.0, -9.0, 4.0, -15.0, 7.0, 0.0, -4.0, 10.0, -11.0, 6.0]  # fold effects (points)
SIGN = [1, 1, -1, 1, -1, 1, 1, -1, 1, 1]  # the row wins on all a fold's seeds, or loses on all


def _accuracy(row: str, f: int, s: int) -> float:
    """The fold dominates: its effect spans 27 points, a seed moves a run by 0.01 x s."""
    base = 70.0 + FOLD[f] + 0.01 * s
    return base + (SIGN[f] * (1 + 0.01 * s) if row == UNSUP else 0.0)


def _params(f: int, split_seed: int | None = None) -> str:
    own = {} if split_seed is None else {"split_seed": split_seed}
    return json.dumps({"fold": f, "folds": K, "protocol": "cv", **own})


def _frame(cv: bool = True, split_per_seed: bool = False) -> pd.DataFrame:
    """2 rows x K folds x SEEDS seeds (a trial per fold, as the runner writes them); `cv`
    False: the same values as K x SEEDS seeds of one trial, with no fold."""
    recs = []
    for row in (GLOBAL, UNSUP):
        for f in range(K):
            for s in range(SEEDS):
                recs.append({"row": row, "variant": row, "dataset": "tu:MUTAG",
                             "trial_id": f"{row}-{f}" if cv else row,
                             "seed": s if cv else f * SEEDS + s, "split": "test_orig",
                             "accuracy": _accuracy(row, f, s) / 100,
                             "data_params": _params(f, s if split_per_seed else None)
                             if cv else "{}"})
    return pd.DataFrame(recs)


def _lines(df: pd.DataFrame) -> pd.DataFrame:
    return robust.robust_cells(df, COMPS, [GLOBAL, UNSUP], n_resamples=2000)


def _width(x: pd.Series, what: str) -> float:
    return x[f"{what}_hi"] - x[f"{what}_lo"]


def test_cv_intervals_resample_whole_folds():
    """Seeds within a fold nearly equal, folds far apart: 50 runs are about 10 independent
    values, and the interval that draws whole folds is about sqrt(5) times the one that draws
    runs. (Before, the IQM interval was stratified by trial, here by fold, and so nearly a
    point; the P(improvement) interval drew the 50 pairs one by one.)"""
    cv = _lines(_frame())
    runs = _lines(_frame(cv=False))  # the same values, resampled run by run
    assert cv["clusters"].tolist() == [K, K] and cv["strata"].tolist() == [1, 1]
    for i in range(2):
        assert cv.loc[i, "iqm"] == pytest.approx(runs.loc[i, "iqm"])
        assert cv.loc[i, "iqm_lo"] <= cv.loc[i, "iqm"] <= cv.loc[i, "iqm_hi"]
        assert _width(cv.loc[i], "iqm") > 1.8 * _width(runs.loc[i], "iqm")
    x, y = cv.iloc[1], runs.iloc[1]
    assert x["n_pairs"] == y["n_pairs"] == K * SEEDS
    assert x["p_improve"] == y["p_improve"] == pytest.approx(0.7)
    assert _width(x, "p_improve") > 1.8 * _width(y, "p_improve")
    # the run-level interval of the CV cell's values, as it was computed: far narrower
    v = _frame()
    v = 100 * v.loc[v["row"] == UNSUP, "accuracy"].to_numpy()
    lo, hi = robust.iqm_interval(v, n_resamples=2000)
    assert _width(x, "iqm") > 1.8 * (hi - lo)
    note = " ".join(robust.robust_table(cv).notes)
    assert "cluster bootstraps" in note and "somewhat too narrow" in note
    # a partition per seed (split_seed: seed): each (partition, fold) unit holds one run
    assert _lines(_frame(split_per_seed=True))["clusters"].tolist() == [K * SEEDS] * 2


def test_without_cv_the_intervals_are_as_before():
    """Numbers of the run-level code (before the cluster bootstrap), to the last digit; no
    `clusters` column and no note on folds."""
    lines = _lines(_frame(cv=False))
    assert "clusters" not in lines.columns
    assert lines.columns.tolist() == robust.ROBUST_COLUMNS
    assert lines["strata"].tolist() == [1, 1]
    assert lines["iqm_lo"].tolist() == PINNED["iqm_lo"]
    assert lines["iqm_hi"].tolist() == PINNED["iqm_hi"]
    assert lines.loc[1, ["p_improve_lo", "p_improve_hi"]].tolist() == PINNED["p_improve"]
    assert not any("cross-validation both" in n for n in robust.robust_table(lines).notes)


PINNED = {"iqm_lo": [67.17414423076923, 67.76296153846154],  # from the code before
          "iqm_hi": [74.32501923076923, 74.24924999999999], "p_improve": [0.58, 0.82]}


def test_the_cluster_bootstrap_of_single_runs_is_the_run_bootstrap():
    """One run per cluster draws what the run-level bootstrap draws (same seed); fewer than
    MIN_RUNS clusters give no interval, however many runs they hold."""
    v = np.array([88.0, 90, 91, 92, 89, 93, 90.5, 10, 85, 87])
    assert robust.cluster_iqm_interval(v, range(v.size)) == pytest.approx(
        robust.iqm_interval(v), rel=1e-12)
    x, y = [3, 3, 3, 3, 3, 1, 4], [1, 3, 5, 3, 2, 0, 3]
    assert robust.improvement_interval(x, y, clusters=range(7)) == pytest.approx(
        robust.improvement_interval(x, y), rel=1e-12)
    four = np.repeat(np.arange(4), 5)  # 20 runs in 4 folds
    assert all(math.isnan(b) for b in robust.cluster_iqm_interval(np.arange(20.0), four))
    assert all(math.isnan(b) for b in robust.improvement_interval(
        np.arange(20.0), np.r_[np.zeros(10), np.full(10, 30.0)], clusters=four))
    with pytest.raises(ValueError, match="one cluster per value"):
        robust.cluster_iqm_interval(v, range(3))


def _ok(drop: list[tuple[str, int, int]] = (), cv: bool = True,
        split_per_seed: bool = False) -> pd.DataFrame:
    """2 rows x 5 folds x 2 seeds (the report's `ok` rows), less the (row, fold, seed) runs in
    `drop`; `cv` False: seeds 0 and 1 of one trial per row."""
    recs = [{"row": row, "dataset": "tu:MUTAG", "trial_id": f"{row}-{f}", "seed": s,
             "split": "test_orig", "status": "ok",
             "data_params": _params(f, s if split_per_seed else None) if cv else "{}"}
            for row in (GLOBAL, UNSUP) for f in range(5 if cv else 1) for s in range(2)
            if (row, f, s) not in drop]
    df = pd.DataFrame(recs)
    return df.assign(data_params=df["data_params"].str.replace('"folds": 10', '"folds": 5'))


def test_a_row_missing_one_fold_of_a_seed_is_flagged():
    """Seed 1 ran on the row's other folds, so a check by seed saw nothing missing."""
    got = rows_missing_seeds(_ok([(UNSUP, 3, 1)]))
    assert got == [f"{UNSUP} on tu:MUTAG: 9 of 10 (fold, seed) runs (missing fold 3 seed 1)"]
    assert rows_missing_seeds(_ok()) == []
    # a seed missing from every fold is named once; a partition per seed is not named
    got = rows_missing_seeds(_ok([(GLOBAL, f, 1) for f in range(5)], split_per_seed=True))
    assert got == [f"{GLOBAL} on tu:MUTAG: 5 of 10 (fold, seed) runs (missing seed 1 (all "
                   "its 5 folds))"]
    got = rows_missing_seeds(_ok([(GLOBAL, 0, 1), (GLOBAL, 2, 1)], split_per_seed=True))
    assert got == [f"{GLOBAL} on tu:MUTAG: 8 of 10 (fold, seed) runs (missing fold 0 seed 1, "
                   "fold 2 seed 1)"]


def test_adaptive_rows_are_checked_by_fold_too():
    expected = {(GLOBAL, "tu:MUTAG"): 3, (UNSUP, "tu:MUTAG"): 2}
    got = rows_missing_seeds(_ok([(UNSUP, 4, 0)]), expected)
    assert got == [f"{GLOBAL} on tu:MUTAG: 10 of the 10 (fold, seed) runs of the 3 seeds its "
                   "adaptive rounds called for (missing seed 2 (no run))",
                   f"{UNSUP} on tu:MUTAG: 9 of the 10 (fold, seed) runs of the 2 seeds its "
                   "adaptive rounds called for (missing fold 4 seed 0)"]


def test_without_cv_the_seed_check_is_as_before():
    assert rows_missing_seeds(_ok([(UNSUP, 0, 1)], cv=False)) == [
        f"{UNSUP}: 1 of 2 seeds (missing 1)"]
    no_params = _ok([(UNSUP, 0, 1)], cv=False).drop(columns="data_params")
    assert rows_missing_seeds(no_params) == [f"{UNSUP}: 1 of 2 seeds (missing 1)"]
    assert rows_missing_seeds(_ok([(UNSUP, 0, 1)], cv=False), {(GLOBAL, "tu:MUTAG"): 2}, 2) \
        == [f"{UNSUP} on tu:MUTAG: 1 of the 2 seeds its adaptive rounds called for (missing 1)"]


def test_a_far_run_is_labelled_with_its_fold():
    from analysis.figure_seeds import run_label

    assert run_label(7) == "s7"
    assert run_label(1, 3.0) == "s1 f3"
    assert run_label(1, 3.0, "1") == "s1 f3"  # the seed's own partition (split_seed: seed)
    assert run_label(1, 3.0, "0") == "s1 f3 p0"


def test_the_strip_figure_names_the_far_runs_fold(tmp_path):
    from analysis.figure_seeds import seed_strips

    df = _frame()
    gone = (df["row"] == UNSUP) & (df["trial_id"] == f"{UNSUP}-5") & (df["seed"] == 1)
    df.loc[gone, "accuracy"] = 0.05  # fold 5 seed 1 collapsed; every fold has seed 1
    [fig] = seed_strips(df, tmp_path, "cv", [GLOBAL, UNSUP])
    assert fig.info["far"] == [{"row": UNSUP, "column": "test_orig", "seed": 1, "fold": 5,
                                "value": pytest.approx(5.0)}]
    assert f"{UNSUP} ORIG seed 1 fold 5: 5.0" in fig.caption
    assert "in red with its seed and fold" in fig.caption
