"""Robust aggregates (`analysis.robust`, `analysis.figure_seeds`; issue 54 item 6): the
interquartile mean and its stratified bootstrap interval, the paired probability of
improvement, and the per-seed strips in which a collapsed seed stands out. Values against
hand computations."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis import figure_style, robust
from analysis.synthetic import trial_record, write_trials


def test_iqm_is_the_mean_of_the_middle_half():
    assert robust.iqm(np.arange(1, 9)) == pytest.approx(4.5)  # 3, 4, 5, 6
    assert robust.iqm(np.arange(10)) == pytest.approx(4.5)  # floor(10/4) = 2 cut: 2..7
    assert robust.iqm([7.0, 1.0, 3.0]) == pytest.approx(11 / 3)  # n = 3: nothing cut
    # one collapsed seed of four is cut; the mean moves by 80 / 4 = 20 points
    assert robust.iqm([90, 91, 89, 10]) == pytest.approx(89.5)
    assert np.mean([90, 91, 89, 10]) == pytest.approx(70.0)
    assert robust.iqm([1.0, np.nan, 2.0, 3.0, 4.0]) == pytest.approx(2.5)  # NaN ignored
    assert math.isnan(robust.iqm([]))


def test_a_stratified_interval_keeps_each_strata_size():
    """Two rows pooled, each constant: every stratified resample holds five 0s and five 100s,
    whose IQM (cut 2 each end: three 0s, three 100s) is 50, so the interval is the point;
    resampling the ten values together would move it."""
    zeros, hundreds = np.zeros(5), np.full(5, 100.0)
    assert robust.iqm_interval(zeros, hundreds) == (pytest.approx(50.0), pytest.approx(50.0))
    lo, hi = robust.iqm_interval(np.r_[zeros, hundreds])
    assert lo < 50 < hi
    assert robust.pooled_iqm([zeros, hundreds]) == (pytest.approx(50.0),
                                                     (pytest.approx(50.0), pytest.approx(50.0)))


def test_the_iqm_interval_brackets_the_iqm_and_needs_five_runs():
    v = np.array([88.0, 90, 91, 92, 89, 93, 90.5, 10])
    lo, hi = robust.iqm_interval(v)
    assert min(v) <= lo <= robust.iqm(v) <= hi <= max(v)
    assert robust.iqm_interval(v) == (lo, hi)  # seeded: the same interval every time
    assert all(math.isnan(x) for x in robust.iqm_interval(v[:4]))
    # a stratum of one run is held fixed; the others are resampled
    lo1, hi1 = robust.iqm_interval(v[:6], [50.0])
    assert np.isfinite(lo1) and lo1 <= hi1


def test_probability_of_improvement_counts_ties_half():
    # seed by seed: 1 > 0 wins, 2 = 2 ties, 3 < 4 loses, 4 = 4 ties: (1 + .5 + 0 + .5) / 4
    assert robust.probability_of_improvement([1, 2, 3, 4], [0, 2, 4, 4]) == pytest.approx(0.5)
    x, y = [3, 3, 3, 3, 3], [1, 3, 5, 3, 2]  # win, tie, loss, tie, win
    assert robust.probability_of_improvement(x, y) == pytest.approx(0.6)
    assert robust.probability_of_improvement(y, x) == pytest.approx(0.4)
    assert robust.probability_of_improvement([1, np.nan, 2], [0, 5, 3]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="one value per seed"):
        robust.probability_of_improvement([1, 2], [1, 2, 3])


def test_the_improvement_interval_is_over_seed_pairs():
    assert robust.improvement_interval([5] * 6, [1] * 6) == (1.0, 1.0)  # wins on every seed
    lo, hi = robust.improvement_interval([3, 3, 3, 3, 3], [1, 3, 5, 3, 2])
    assert 0.0 <= lo < 0.6 < hi <= 1.0
    # the bootstrap values are means of 5 of {1, .5, 0, .5, 1}: multiples of 0.1
    assert lo * 10 == pytest.approx(round(lo * 10)) and hi * 10 == pytest.approx(round(hi * 10))
    assert all(math.isnan(v) for v in robust.improvement_interval([1, 2, 3, 4], [0, 0, 0, 0]))


def _runs(store, collapsed: float = 0.10) -> pd.DataFrame:
    """Two rows on COLORS, 10 seeds: the global pool at 0.50 + s/100, unsup at 0.90 +
    s/1000 except seed 7, which collapsed to `collapsed`."""
    rows = []
    for s in range(10):
        for tid, pool, acc in (("g", "", 0.50 + s / 100),
                               ("u", "1", collapsed if s == 7 else 0.90 + s / 1000)):
            rows.append(trial_record(trial_id=tid, seed=s, split="test_largec", accuracy=acc,
                                     pool_layers=pool, seeds=",".join(map(str, range(10))),
                                     attn_auc_pooled_l0=0.8))
    write_trials(store, "st", rows)
    from analysis.load import load_store
    from analysis.variants import add_data_axes, add_rows, add_variant, row_axes

    ok = add_data_axes(add_variant(load_store(store)[0].ok))
    return add_rows(ok, row_axes(ok))


def test_a_collapsed_seed_is_a_far_dot_of_the_strip(tmp_path):
    ok = _runs(tmp_path)
    v = robust.seed_values(ok)
    acc = v[v["column"] == "test_largec"]
    far = acc[acc["far"]]
    assert far[["row", "seed"]].values.tolist() == [["ChebyGIN unsup", 7]]
    assert far["value"].iloc[0] == pytest.approx(10.0)
    assert len(acc) == 20  # every run a dot


def test_the_strip_figure_draws_the_collapsed_seed_in_red(tmp_path, monkeypatch):
    from analysis import figure_seeds

    ok = _runs(tmp_path / "s")
    drawn = []
    real = figure_style.save
    monkeypatch.setattr(figure_style, "save",
                        lambda fig, out, stem: (drawn.append(fig), real(fig, out, stem))[1])
    [fig] = figure_seeds.seed_strips(ok, tmp_path / "f", "st",
                                     ["ChebyGIN global pool", "ChebyGIN unsup"])
    assert fig.name == "st__seeds__colors" and fig.png.stat().st_size > 5000
    assert fig.info["far"] == [{"row": "ChebyGIN unsup", "column": "test_largec", "seed": 7,
                                "value": pytest.approx(10.0)}]
    assert "ChebyGIN unsup LARGE-C seed 7: 10.0" in fig.caption
    strips = [ax for ax in drawn[0].axes if "every run" in ax.get_title()]
    from matplotlib.collections import PathCollection

    red = [c for ax in strips for c in ax.collections if isinstance(c, PathCollection)
           and np.allclose(c.get_facecolor()[:, :3], [0.839, 0.153, 0.157], atol=0.01)]
    assert [tuple(np.round(c.get_offsets()[:, 0], 6)) for c in red] == [(10.0,)]
    lo, hi = strips[0].get_xlim()
    assert lo < 10 and hi > 90.9  # the axis shows the collapse and the rest


def test_no_far_dot_without_a_collapse(tmp_path):
    ok = _runs(tmp_path, collapsed=0.907)
    assert not robust.seed_values(ok)["far"].any()


def test_robust_cells_by_hand(tmp_path):
    from analysis.variants import comparisons, row_axes

    ok = _runs(tmp_path)
    comps = comparisons(ok, row_axes(ok))
    lines = robust.robust_cells(ok, comps, ["ChebyGIN global pool", "ChebyGIN unsup"],
                                n_resamples=2000)
    x = lines[(lines["row"] == "ChebyGIN unsup") & (lines["column"] == "test_largec")].iloc[0]
    unsup = [10.0 if s == 7 else 90 + s / 10 for s in range(10)]
    assert x["iqm"] == pytest.approx(np.mean(sorted(unsup)[2:8]))
    assert x["mean"] == pytest.approx(np.mean(unsup))
    assert x["baseline"] == "ChebyGIN global pool" and x["n_pairs"] == 10
    # unsup beats the global pool on 9 seeds, loses on seed 7 (10 < 57)
    assert x["p_improve"] == pytest.approx(0.9)
    assert x["p_improve_lo"] <= 0.9 <= x["p_improve_hi"] <= 1.0
    table = robust.robust_table(lines)
    assert "0.90 [" in table.to_markdown() and "IQM" in table.to_markdown()


def test_the_tails_of_a_wide_spread_are_not_far():
    """500 runs of one row spread ±5 points (a normal sample): Tukey's inner fences would flag
    a few of its tails; only a run past the outer fences (and 5 points out) is far."""
    v = np.random.default_rng(0).normal(60.0, 5.0, 500)
    assert not robust.far_runs(v).any()
    assert robust.far_runs(np.r_[v, 5.0]).tolist() == [False] * 500 + [True]
