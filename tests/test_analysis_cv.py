"""The paired test of a k-fold cross-validated study (`data.protocol: cv`): the fold is the
unit (per fold the mean over its seeds), and the test is the corrected resampled t-test of
Nadeau & Bengio (2003). Expected values are worked out by hand (the t distribution with 4
degrees of freedom has a closed-form CDF), not recomputed with the code under test.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from analysis import robust, stats
from analysis.cells import cell_stats
from analysis.report import write_report
from analysis.synthetic import trial_record, write_trials
from analysis.variants import Comparison, cv_folds, cv_partitions

D = [1.0, 2.0, 3.0, 4.0, 5.0]  # per-fold differences row - baseline (points)
X = [3.0, -2.0, 1.0, 4.0, -1.0]  # seed 0 is X higher than the fold's difference, seed 1 lower
K = 5  # 5-fold CV: n_test / n_train = 1/4
# mean 3, s^2 = 2.5 over k = 5 folds: var = (1/5 + 1/4) * 2.5 = 1.125, t = 3 / sqrt(1.125) =
# 2 sqrt(2) with 4 degrees of freedom. For 4 df, P(|T| <= t) = (3/2) u (1 - u^2 / 3) with
# u = t / sqrt(4 + t^2) = sqrt(2/3): (3/2) sqrt(2/3) (7/9), so p = 1 - (7/12) sqrt(8/3).
P_HAND = 1 - 7 / 12 * math.sqrt(8 / 3)  # 0.047421
# the plain paired t over the folds (variance s^2 / k = 0.5): t = 3 sqrt(2), u = 3 / sqrt(11),
# p = 1 - (3/2) (3 / sqrt(11)) (8/11) = 1 - 36 / (11 sqrt(11))
P_PLAIN = 1 - 36 / (11 * math.sqrt(11))  # 0.013235
T975_4 = 2.7764451051977987  # t_{4, 0.975} (tables: 2.776)
HALF_HAND = T975_4 * math.sqrt(1.125)  # 2.944864
GLOBAL, UNSUP = "ChebyGIN global pool", "ChebyGIN unsup"


def _accuracy(row: str, fold: int, seed: int) -> float:
    """Baseline 50% + 2 per fold + 1 per seed; the row D[fold] higher on average over its two
    seeds, seed 0 by D + X, seed 1 by D - X."""
    base = 50.0 + 2 * fold + seed
    if row == GLOBAL:
        return base
    return base + D[fold] + (X[fold] if seed == 0 else -X[fold])


def _params(fold: int | None, folds: int = K, split_seed: int | None = None) -> str:
    if fold is None:
        return "{}"
    own = {} if split_seed is None else {"split_seed": split_seed}
    return json.dumps({"fold": fold, "folds": folds, "protocol": "cv", **own})


def _frame(folds: int = K, seeds: int = 2, cv: bool = True,
           split_per_seed: bool = False) -> pd.DataFrame:
    """The frame `cell_stats` reads: 2 rows x `folds` folds x `seeds` seeds, test_orig;
    `split_per_seed`: every seed its own partition (`data.split_seed: seed`)."""
    recs = []
    for row in (GLOBAL, UNSUP):
        for f in range(folds):
            for s in range(seeds):
                recs.append({"row": row, "variant": row, "dataset": "tu:MUTAG",
                             "trial_id": f"{row}-{f}" + (f"-{s}" if split_per_seed else ""),
                             "seed": s if cv else 2 * f + s,
                             "split": "test_orig", "accuracy": _accuracy(row, f, s) / 100,
                             "data_params": _params(f if cv else None,
                                                    split_seed=s if split_per_seed else None)})
    return pd.DataFrame(recs)


COMPS = {UNSUP: [Comparison(GLOBAL, "pool_layers", "1", "none")]}


def _line(cells: pd.DataFrame) -> pd.Series:
    (i,) = np.flatnonzero(cells["baseline"].notna().to_numpy())
    return cells.iloc[i]


def test_corrected_t_by_hand():
    p, lo, hi = stats.corrected_t(D, folds=K)
    assert p == pytest.approx(P_HAND, rel=1e-9)
    assert (lo, hi) == pytest.approx((3 - HALF_HAND, 3 + HALF_HAND), rel=1e-9)
    # without the overlap term (K -> infinity) it is the plain paired t, 3.6 times smaller
    assert stats.corrected_t(D, folds=10**12)[0] == pytest.approx(P_PLAIN, rel=1e-6)
    # p < 0.05 exactly when the CI excludes 0 (both from the same t)
    p9, lo9, hi9 = stats.corrected_t(np.array(D) - 0.1, folds=K)
    assert (p9 < 0.05) == (lo9 > 0)
    # 10-fold CV corrects less: variance (1/5 + 1/9) s^2
    half10 = stats.corrected_t(D, folds=10)
    assert half10[2] - 3 == pytest.approx(T975_4 * math.sqrt((1 / 5 + 1 / 9) * 2.5), rel=1e-9)


def test_corrected_t_edge_cases():
    assert all(math.isnan(v) for v in stats.corrected_t([1.0], folds=10))
    assert stats.corrected_t([0.0, 0.0, 0.0], folds=10) == (1.0, 0.0, 0.0)
    assert stats.corrected_t([2.0, 2.0, 2.0], folds=10) == (0.0, 2.0, 2.0)
    with pytest.raises(ValueError, match="folds"):
        stats.corrected_t(D, folds=1)
    pr = stats.paired_folds([3.0, 4.0, math.nan], [1.0, 1.0, 1.0], folds=10)
    assert pr.n == 2 and pr.test == stats.CORRECTED_T and pr.delta == pytest.approx(2.5)


def test_cv_folds_of_data_params():
    fold, k = cv_folds(pd.Series([_params(3, 10), "{}", "", "not json",
                                  json.dumps({"fold": 1, "folds": 5, "protocol": "inductive"}),
                                  _params(3, 10)]))
    np.testing.assert_array_equal(fold, [3, np.nan, np.nan, np.nan, np.nan, 3])
    np.testing.assert_array_equal(k, [10, np.nan, np.nan, np.nan, np.nan, 10])


def test_a_cv_record_at_the_default_folds_is_a_fold_of_the_generators_default_k():
    """A study file with `data: {protocol: cv}` stores no `folds`: the record is still a fold
    (of the generators' default k), so the report pairs folds instead of falling back to the
    sign-flip test by seed."""
    import inspect

    from ablate.data import pyg_user, resolve_params
    from analysis.variants import CV_DEFAULT_FOLDS

    assert resolve_params("tu:MUTAG", {"protocol": "cv"})["folds"] == CV_DEFAULT_FOLDS
    assert inspect.signature(pyg_user.pyg_dataset).parameters["folds"].default == CV_DEFAULT_FOLDS
    fold, k = cv_folds(pd.Series([json.dumps({"fold": 4, "protocol": "cv"})]))
    assert fold.tolist() == [4] and k.tolist() == [CV_DEFAULT_FOLDS]


def test_cv_comparison_pairs_folds_with_the_corrected_t():
    """2 rows x 5 folds x 2 seeds: 5 pairs (folds), not 2 (seeds) or 10 (runs); the seeds'
    +-X cancel within each fold, so the test sees exactly D."""
    cells = cell_stats(_frame(), COMPS, [GLOBAL, UNSUP], n_boot=200)
    x = _line(cells)
    assert x["test"] == stats.CORRECTED_T and x["n_pairs"] == K and x["folds"] == K
    assert x["seeds"] == 2
    assert x["delta"] == pytest.approx(3.0)
    assert x["p"] == pytest.approx(P_HAND, rel=1e-9)
    assert (x["delta_lo"], x["delta_hi"]) == pytest.approx((3 - HALF_HAND, 3 + HALF_HAND),
                                                           rel=1e-9)
    assert x["p_holm"] == pytest.approx(P_HAND, rel=1e-9)  # one test in the family


def test_seeds_are_averaged_within_a_fold():
    """Only the per-fold means count: moving the seeds of a fold further apart (X x 5) leaves
    the test unchanged; pairing (fold, seed) runs one by one would not."""
    wide = _frame()
    is_row = wide["row"] == UNSUP
    fold = np.array([json.loads(p)["fold"] for p in wide["data_params"]])
    sign = np.where(wide["seed"] == 0, 1.0, -1.0)
    wide.loc[is_row, "accuracy"] += (4 * sign * np.array(X)[fold] / 100)[is_row.to_numpy()]
    a = _line(cell_stats(_frame(), COMPS, [GLOBAL, UNSUP], n_boot=200))
    b = _line(cell_stats(wide, COMPS, [GLOBAL, UNSUP], n_boot=200))
    assert b["std"] > a["std"]  # the runs spread more
    for col in ("n_pairs", "delta", "delta_lo", "delta_hi", "p"):
        assert b[col] == pytest.approx(a[col], rel=1e-9), col


def test_shared_folds_only_and_too_few_folds():
    """A fold the baseline lacks is left out; below MIN_PAIRED_SEEDS shared folds a
    comparison keeps Δ but gets no p and no CI, as a seed comparison does."""
    df = _frame()
    df = df[~((df["row"] == GLOBAL) & (df["trial_id"] == f"{GLOBAL}-4"))]  # baseline lacks 4
    x = _line(cell_stats(df, COMPS, [GLOBAL, UNSUP], n_boot=200))
    assert x["test"] == stats.CORRECTED_T and x["n_pairs"] == 4 and x["folds"] == K
    assert x["delta"] == pytest.approx(np.mean(D[:4]))
    assert all(math.isnan(x[c]) for c in ("p", "delta_lo", "delta_hi", "p_holm"))
    thin = _line(cell_stats(_frame(folds=4), COMPS, [GLOBAL, UNSUP], n_boot=200))
    assert thin["n_pairs"] == 4 and math.isnan(thin["p"])


def test_without_cv_the_seed_is_the_unit_and_the_test_sign_flip():
    """The same numbers as 10 seeds of one trial each (no fold in data_params): 10 pairs by
    seed and the exact sign-flip test, as before."""
    x = _line(cell_stats(_frame(cv=False), COMPS, [GLOBAL, UNSUP], n_boot=200))
    assert x["test"] == stats.SIGN_FLIP and x["n_pairs"] == 10 and x["folds"] == 0
    d = [D[f] + (X[f] if s == 0 else -X[f]) for f in range(K) for s in range(2)]
    assert x["delta"] == pytest.approx(3.0)
    assert (x["p"], x["delta_lo"], x["delta_hi"]) == pytest.approx(stats.sign_flip(d))


# the (fold, seed) differences row - baseline: seed 0 D + X, seed 1 D - X
D_RUNS = [D[f] + (X[f] if s == 0 else -X[f]) for s in range(2) for f in range(K)]
assert D_RUNS == [4.0, 0.0, 4.0, 8.0, 4.0, -2.0, 4.0, 2.0, 0.0, 6.0]


def _robust_line(df: pd.DataFrame) -> pd.Series:
    lines = robust.robust_cells(df, COMPS, [GLOBAL, UNSUP], n_resamples=2000)
    return _line(lines)


def test_probability_of_improvement_pairs_fold_and_seed():
    """Under k-fold CV each run is a (fold, seed) replicate: P(row > baseline) pairs the two
    rows on the same fold and seed, 10 pairs of which the row wins 7 and ties 2 (D_RUNS):
    (7 + 2/2) / 10 = 0.8. Pairing by seed alone averaged each seed over its five folds (its
    five test sets) and saw 2 pairs, both won (means 4 and 2): 1.0."""
    x = _robust_line(_frame())
    assert x["n_pairs"] == 2 * K
    assert x["p_improve"] == pytest.approx(0.8)
    assert x["p_improve_lo"] <= 0.8 <= x["p_improve_hi"]
    # a fold the baseline lacks for one seed is left out of the pairs, not matched with
    # another fold of that seed: the row's fold 4 seed 1 (won, 6 > 0) has no partner
    df = _frame()
    gone = (df["row"] == GLOBAL) & (df["trial_id"] == f"{GLOBAL}-4") & (df["seed"] == 1)
    y = _robust_line(df[~gone])
    assert y["n_pairs"] == 2 * K - 1 and y["p_improve"] == pytest.approx(7 / 9)


def test_probability_of_improvement_without_cv_pairs_by_seed_as_before():
    """The same numbers as 10 seeds of one trial each (no fold): 10 seed pairs, 0.8."""
    x = _robust_line(_frame(cv=False))
    assert x["n_pairs"] == 2 * K and x["p_improve"] == pytest.approx(0.8)
    # several runs of one seed (here two trials of a pooled axis) are averaged first
    df = _frame(cv=False)
    twin = df.assign(trial_id=df["trial_id"] + "b", accuracy=df["accuracy"] - 0.02)
    y = _robust_line(pd.concat([df, twin], ignore_index=True))
    assert y["n_pairs"] == 2 * K and y["p_improve"] == pytest.approx(0.8)


def test_cv_partitions_of_data_params():
    got = cv_partitions(pd.Series([_params(3, 10), _params(3, 10, split_seed=7), "{}", "",
                                   json.dumps({"split_seed": 111})]))
    assert got.tolist() == ["", "7", "", "", "111"]


def test_a_split_per_seed_pairs_each_partitions_folds_not_fold_numbers():
    """`data.split_seed: seed` draws each seed its own partition: fold f of seed 0 and of seed
    1 are different test sets, so they are not averaged into one fold; each (partition, fold)
    is a unit, paired with the baseline's same partition and fold: 10 units, and the
    corrected t over them is Bouckaert & Frank's corrected repeated k-fold CV test (r = 2
    partitions x k = 5): mean 3, s^2 = 82/9 over the 10 differences, variance
    (1/10 + 1/4) s^2, 9 degrees of freedom."""
    from scipy.stats import t as student

    x = _line(cell_stats(_frame(split_per_seed=True), COMPS, [GLOBAL, UNSUP], n_boot=200))
    assert np.var(D_RUNS, ddof=1) == pytest.approx(82 / 9)
    se = math.sqrt((1 / 10 + 1 / 4) * 82 / 9)
    assert x["test"] == stats.CORRECTED_T and x["n_pairs"] == 2 * K and x["folds"] == 2 * K
    assert x["delta"] == pytest.approx(3.0)
    assert x["p"] == pytest.approx(2 * student.sf(3 / se, 9), rel=1e-9)
    half = 2.2621571627982053 * se  # t_{9, 0.975} (tables: 2.262)
    assert (x["delta_lo"], x["delta_hi"]) == pytest.approx((3 - half, 3 + half), rel=1e-9)
    # the probability of improvement pairs (partition, fold, seed): as with one partition
    r = _robust_line(_frame(split_per_seed=True))
    assert r["n_pairs"] == 2 * K and r["p_improve"] == pytest.approx(0.8)


def test_folds_of_different_partitions_are_not_paired():
    """A baseline whose folds are of another partition (another split seed) shares no test
    fold with the row: no fold pairs, no test, no probability of improvement."""
    df = _frame()
    is_row = (df["row"] == UNSUP).to_numpy()
    fold = [json.loads(p)["fold"] for p in df["data_params"]]
    df.loc[is_row, "data_params"] = [_params(f, split_seed=5)
                                     for f, r in zip(fold, is_row) if r]
    x = _line(cell_stats(df, COMPS, [GLOBAL, UNSUP], n_boot=200))
    assert x["n_pairs"] == 0 and math.isnan(x["delta"]) and math.isnan(x["p"])
    assert _robust_line(df)["n_pairs"] == 0


def test_benchmark_summary_uses_the_same_interval():
    """benchmarks/tu_beyond_summary.py's fold_difference is the report's interval."""
    from _bench import benchmark

    mod = benchmark("tu_beyond_summary")
    runs = {r: {(f, s): _accuracy(r, f, s) for f in range(K) for s in range(2)}
            for r in (GLOBAL, UNSUP)}
    d = mod.fold_difference(sorted(runs[UNSUP]), runs[UNSUP], runs[GLOBAL], folds=K)
    x = _line(cell_stats(_frame(), COMPS, [GLOBAL, UNSUP], n_boot=200))
    assert (d["mean"], d["lo"], d["hi"]) == pytest.approx(
        (x["delta"], x["delta_lo"], x["delta_hi"]), rel=1e-12)
    assert d["folds"] == K and d["pairs"] == 2 * K


def test_a_seed_one_row_lacks_on_a_fold_leaves_that_fold_paired_run_for_run():
    """The baseline lacks seed 1 on folds 0 and 2: there the row's seed 1 (D - X lower) is left
    out of its fold mean too, so fold f's difference is D + X (seed 0 alone), not D; the same
    numbers as benchmarks/tu_beyond_summary.py, which pairs (fold, seed) runs."""
    from _bench import benchmark

    df = _frame()
    fold = np.array([json.loads(p)["fold"] for p in df["data_params"]])
    df = df[~((df["row"] == GLOBAL) & (df["seed"] == 1) & np.isin(fold, [0, 2]))]
    x = _line(cell_stats(df, COMPS, [GLOBAL, UNSUP], n_boot=200))
    want = [D[f] + (X[f] if f in (0, 2) else 0.0) for f in range(K)]
    assert x["n_pairs"] == K and x["delta"] == pytest.approx(np.mean(want))
    p, lo, hi = stats.corrected_t(want, folds=K)
    assert (x["p"], x["delta_lo"], x["delta_hi"]) == pytest.approx((p, lo, hi), rel=1e-9)
    runs = {r: {(f, s): _accuracy(r, f, s) for f in range(K) for s in range(2)
                if not (r == GLOBAL and s == 1 and f in (0, 2))} for r in (GLOBAL, UNSUP)}
    pairs = sorted(set(runs[UNSUP]) & set(runs[GLOBAL]))
    d = benchmark("tu_beyond_summary").fold_difference(pairs, runs[UNSUP], runs[GLOBAL], folds=K)
    assert (d["mean"], d["lo"], d["hi"]) == pytest.approx((x["delta"], lo, hi), rel=1e-12)


def test_report_on_a_cv_store(tmp_path):
    """End to end: a store of 2 rows x 5 folds x 2 seeds (the runner's data_params) gives a
    tested comparison over 5 folds, its test named in the CSV and the markdown table, and no
    thin-store banner (2 seeds, but 5 folds)."""
    rows = [trial_record(trial_id=f"{'g' if row == GLOBAL else 'u'}{f}", seed=s,
                         seeds="0,1", split="test_orig", dataset="tu:MUTAG",
                         data_params=_params(f), accuracy=_accuracy(row, f, s) / 100,
                         attn_auc_l0=math.nan, pool_layers="" if row == GLOBAL else "1")
            for row in (GLOBAL, UNSUP) for f in range(K) for s in range(2)]
    write_trials(tmp_path / "res", "cv", rows)
    summary = write_report(tmp_path / "res", tmp_path / "out", n_boot=200, figures=False)
    cells = pd.read_csv(tmp_path / "out" / "tables" / "cv__stats.csv")
    x = cells.dropna(subset=["baseline"]).iloc[0]
    assert (x["row"], x["baseline"]) == (UNSUP, GLOBAL)
    assert x["test"] == stats.CORRECTED_T and x["n_pairs"] == K
    assert x["p"] == pytest.approx(P_HAND, rel=1e-9)
    assert (x["delta_lo"], x["delta_hi"]) == pytest.approx((3 - HALF_HAND, 3 + HALF_HAND),
                                                           rel=1e-9)
    md = (tmp_path / "out" / "tables" / "cv__stats.md").read_text()
    assert f"| {K} | {stats.CORRECTED_T} |" in md and "Nadeau & Bengio" in md
    assert not summary["cv"]["banner"]
    assert any("corrected resampled t p" in f and f"{K} paired folds" in f
               for f in summary["cv"]["findings"])


def test_report_on_a_store_with_a_split_per_seed(tmp_path):
    """End to end, as `data.split_seed: seed` stores it (one seed per trial, its split seed in
    data_params): the test pairs the 10 (partition, fold) units and the robust table the 10
    (fold, seed) runs; the split seed is pooled like the seed, not a row."""
    rows = [trial_record(trial_id=f"{'g' if row == GLOBAL else 'u'}{f}-{s}", seed=s,
                         seeds=str(s), split="test_orig", dataset="tu:MUTAG",
                         data_params=_params(f, split_seed=s),
                         accuracy=_accuracy(row, f, s) / 100, attn_auc_l0=math.nan,
                         pool_layers="" if row == GLOBAL else "1")
            for row in (GLOBAL, UNSUP) for f in range(K) for s in range(2)]
    write_trials(tmp_path / "res", "cv", rows)
    write_report(tmp_path / "res", tmp_path / "out", n_boot=200, figures=False)
    cells = pd.read_csv(tmp_path / "out" / "tables" / "cv__stats.csv")
    x = cells.dropna(subset=["baseline"]).iloc[0]
    assert (x["row"], x["baseline"]) == (UNSUP, GLOBAL)
    assert x["test"] == stats.CORRECTED_T and x["n_pairs"] == 2 * K and x["folds"] == 2 * K
    rob = pd.read_csv(tmp_path / "out" / "tables" / "cv__robust.csv")
    r = rob.dropna(subset=["baseline"]).iloc[0]
    assert r["n_pairs"] == 2 * K and r["p_improve"] == pytest.approx(0.8)


def test_what_varied_names_each_recipe_parameter_and_counts_the_folds():
    """The overview lists `data.KEY: values` (a key some runs leave at its default shows
    'default'), and a cross-validation fold as its count, not one JSON text per fold."""
    from analysis.overview import _data_params_varied

    texts = [json.dumps({"fold": f, "folds": 10, "path": "/d", "protocol": "cv"})
             for f in range(10)] + [json.dumps({"fold": 3, "folds": 10, "path": "/d",
                                                "protocol": "cv", "node_attr": True})]
    assert _data_params_varied(pd.Series(texts)) == [
        "data.fold: 10 cross-validation folds (0–9), pooled like seeds",
        "data.node_attr: True, default"]
    assert _data_params_varied(pd.Series([json.dumps({"n_train": 500})] * 3)) == []
