"""Robust aggregates of runs over seeds, after Agarwal et al. (NeurIPS 2021, "Deep
reinforcement learning at the edge of the statistical precipice"; their `rliable` library).

- `iqm`: the interquartile mean, the mean of the middle half of the values: floor(n/4) values
  cut from each end (`scipy.stats.trim_mean` at 0.25, as `rliable` computes it). One seed
  that collapses moves the mean by (collapse)/n; from 4 runs on it is among the values cut.
- `iqm_interval`: its stratified percentile bootstrap interval (`scipy.stats.bootstrap`):
  each stratum (a row, when several rows are pooled; a trial, when a table row pools
  several) is resampled on its own, so a resample keeps every stratum's number of runs.
- `probability_of_improvement`: P(X > Y) over paired seeds, ties counted half: the share of
  shared seeds on which row X beats row Y. (`rliable` compares every run of X with every run
  of Y, Mann-Whitney style; the rows here share their seeds, so pairs are by seed.) In a
  k-fold cross-validated study every run is a (fold, seed) replicate, and two rows are
  paired on the same fold (of the same partition, `data.split_seed`) and seed.
  `improvement_interval`: its percentile bootstrap interval over the pairs.
- Under cross-validation the runs of one test fold share its test graphs: the intervals of
  the CV cells are cluster bootstraps (`cluster_iqm_interval`, `improvement_interval` with
  `clusters`) that draw whole folds, each with all its seeds, not single runs. The folds'
  training sets overlap, so even these are somewhat narrower than they should be.
- `robust_cells` / `robust_table`: these numbers for every cell of a study's table and every
  one-axis comparison, the report's "Robust aggregates" table; `seed_values`: every run as
  a dot of the per-seed strip plot (`analysis.figure_seeds`), far seeds flagged.

Values are in percent, as the report's other tables. The intervals are fixed-n: on an
adaptive-seed study they are descriptive only, as the table note says.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis import stats
from analysis.formatting import column_name, dataset_name, fmt_interval
from analysis.table_render import Table

CUT = 0.25  # the share cut from each end: the interquartile mean
LEVEL = 0.95
N_RESAMPLES = 10_000  # fewer, at least stats.MIN_BOOT, where n x B would pass stats.MAX_DRAWS
SEED = 0  # every bootstrap starts from this seed
MIN_RUNS = stats.MIN_PAIRED_SEEDS  # fewest runs (or seed pairs) for an interval
FAR_IQR = 3.0  # a run beyond Tukey's outer fences (3 IQR outside the quartiles: "far out") ...
FAR_POINTS = 5.0  # ... and this many points from the median is flagged as far


def _clean(x: object) -> np.ndarray:
    a = np.asarray(x, dtype=float).ravel()
    return a[np.isfinite(a)]


def iqm(x: object) -> float:
    """Interquartile mean of the finite values: floor(n/4) cut from each end, the rest
    averaged (NaN with no value)."""
    from scipy.stats import trim_mean

    a = _clean(x)
    return float(trim_mean(a, CUT)) if a.size else math.nan


def _iqm_of_strata(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
    from scipy.stats import trim_mean

    return trim_mean(np.concatenate(samples, axis=axis), CUT, axis=axis)


def iqm_interval(*strata: object, level: float = LEVEL, n_resamples: int = N_RESAMPLES,
                 seed: int = SEED) -> tuple[float, float]:
    """Stratified percentile bootstrap interval of the IQM of all the strata's values pooled:
    each stratum is resampled with replacement on its own (`scipy.stats.bootstrap` over
    several samples). A stratum of one value is held fixed (it has nothing to resample).
    (NaN, NaN) with fewer than MIN_RUNS values in all, or when no stratum has two."""
    from scipy.stats import bootstrap

    parts = [a for a in (_clean(s) for s in strata) if a.size]
    if sum(a.size for a in parts) < MIN_RUNS:
        return math.nan, math.nan
    vary = [a for a in parts if a.size > 1]
    fixed = np.concatenate([a for a in parts if a.size == 1] or [np.empty(0)])
    if not vary:
        return math.nan, math.nan
    n_resamples = stats.n_resamples(sum(a.size for a in parts), n_resamples)

    def statistic(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        held = np.broadcast_to(fixed, samples[0].shape[:-1] + fixed.shape)
        return _iqm_of_strata(*samples, held, axis=axis)

    res = bootstrap(tuple(vary), statistic, n_resamples=n_resamples, vectorized=True,
                    confidence_level=level, method="percentile", rng=np.random.default_rng(seed))
    ci = res.confidence_interval
    return float(ci.low), float(ci.high)


def _units(clusters: Sequence[object], keep: np.ndarray) -> np.ndarray:
    """The cluster of each kept value as a code 0 .. m-1 (labels: any hashable, a tuple too)."""
    labels = pd.Series(list(clusters), dtype=object)
    if len(labels) != keep.size:
        raise ValueError(f"one cluster per value, got {len(labels)} for {keep.size} values")
    return pd.factorize(labels[keep])[0]


def _cluster_bootstrap(codes: np.ndarray, statistic, level: float, n_resamples: int,
                       seed: int) -> tuple[float, float]:
    """Percentile bootstrap of `statistic` over whole clusters: each resample draws as many
    clusters as there are, with replacement (`statistic(idx, axis=-1)` reads the drawn cluster
    codes along the last axis)."""
    from scipy.stats import bootstrap

    m = int(codes.max()) + 1
    res = bootstrap((np.arange(m),), statistic, vectorized=True, confidence_level=level,
                    n_resamples=stats.n_resamples(codes.size, n_resamples),
                    method="percentile", rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def cluster_iqm_interval(values: object, clusters: Sequence[object], level: float = LEVEL,
                         n_resamples: int = N_RESAMPLES, seed: int = SEED
                         ) -> tuple[float, float]:
    """Cluster percentile bootstrap interval of the IQM of the finite values: whole clusters
    (`clusters[i]` is value i's; under cross-validation a test fold with all its seeds) are
    drawn with replacement, as many as there are, and the IQM taken over all their runs
    pooled. Runs that share a cluster are not independent (a fold's seeds share its test
    graphs): resampling them one by one would give too narrow an interval. (NaN, NaN) below
    MIN_RUNS clusters."""
    v = np.asarray(values, dtype=float).ravel()
    keep = np.isfinite(v)
    codes = _units(clusters, keep)
    v = v[keep]
    if not v.size or codes.max() + 1 < MIN_RUNS:
        return math.nan, math.nan
    sizes = np.bincount(codes)
    order = np.argsort(codes, kind="stable")
    table = np.full((sizes.size, sizes.max()), np.nan)  # a cluster's runs, padded with NaN
    table[codes[order], np.arange(v.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)] = \
        v[order]

    def statistic(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        runs = np.sort(table[idx].reshape(*idx.shape[:-1], -1), axis=-1)  # padding last
        n = sizes[idx].sum(axis=-1)
        cut = n // 4  # trim_mean's int(0.25 n), from each end
        j = np.arange(runs.shape[-1])
        mid = (j >= cut[..., None]) & (j < (n - cut)[..., None])
        return np.where(mid, runs, 0.0).sum(axis=-1) / (n - 2 * cut)

    return _cluster_bootstrap(codes, statistic, level, n_resamples, seed)


def _paired(x: object, y: object) -> tuple[np.ndarray, np.ndarray]:
    """Per finite seed pair: 1 where x > y, 0.5 on a tie, 0 where x < y; and which pairs
    were finite."""
    xa, ya = np.asarray(x, dtype=float).ravel(), np.asarray(y, dtype=float).ravel()
    if xa.shape != ya.shape:
        raise ValueError(f"paired values need one value per seed on each side, got "
                         f"{xa.size} and {ya.size}")
    keep = np.isfinite(xa) & np.isfinite(ya)
    return (np.sign(xa[keep] - ya[keep]) + 1) / 2, keep


def _wins(x: object, y: object) -> np.ndarray:
    """Per finite seed pair: 1 where x > y, 0.5 on a tie, 0 where x < y."""
    return _paired(x, y)[0]


def probability_of_improvement(x: object, y: object) -> float:
    """P(X > Y) over paired seeds (x[i] and y[i] from seed i), ties counted half: the mean of
    1[x > y] + 0.5 1[x = y] over the finite pairs (NaN with none)."""
    w = _wins(x, y)
    return float(w.mean()) if w.size else math.nan


def improvement_interval(x: object, y: object, level: float = LEVEL,
                         n_resamples: int = N_RESAMPLES, seed: int = SEED,
                         clusters: Sequence[object] | None = None) -> tuple[float, float]:
    """Percentile bootstrap interval of `probability_of_improvement`, seed pairs resampled
    together; (NaN, NaN) below MIN_RUNS pairs. `clusters` (one label per pair; under
    cross-validation the pair's test fold, `cluster_iqm_interval`): whole clusters of pairs
    are resampled instead, and (NaN, NaN) below MIN_RUNS clusters."""
    from scipy.stats import bootstrap

    w, keep = _paired(x, y)
    if clusters is not None:
        return _clustered_improvement(w, _units(clusters, keep), level, n_resamples, seed)
    if w.size < MIN_RUNS:
        return math.nan, math.nan
    if np.all(w == w[0]):
        return float(w[0]), float(w[0])
    n_resamples = stats.n_resamples(w.size, n_resamples)
    res = bootstrap((w,), np.mean, n_resamples=n_resamples, vectorized=True,
                    confidence_level=level, method="percentile", rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _clustered_improvement(w: np.ndarray, codes: np.ndarray, level: float, n_resamples: int,
                           seed: int) -> tuple[float, float]:
    """`improvement_interval` over whole clusters of pairs: the share of wins among all the
    pairs of the drawn clusters."""
    if not w.size or codes.max() + 1 < MIN_RUNS:
        return math.nan, math.nan
    if np.all(w == w[0]):
        return float(w[0]), float(w[0])
    won, pairs = np.bincount(codes, weights=w), np.bincount(codes).astype(float)

    def statistic(idx: np.ndarray, axis: int = -1) -> np.ndarray:
        return won[idx].sum(axis=-1) / pairs[idx].sum(axis=-1)

    return _cluster_bootstrap(codes, statistic, level, n_resamples, seed)


ROBUST_COLUMNS = ["row", "dataset", "column", "n", "mean", "iqm", "iqm_lo", "iqm_hi",
                  "strata", "baseline", "axis", "n_pairs", "p_improve", "p_improve_lo",
                  "p_improve_hi"]


def _strata(g: pd.DataFrame) -> list[np.ndarray]:
    """A cell's runs by trial when it pools several trials of two runs or more each (the
    strata the bootstrap keeps), else one stratum."""
    by = [t["value"].to_numpy(dtype=float) for _, t in g.groupby("trial_id", sort=False)]
    return by if len(by) > 1 and all(a.size > 1 for a in by) else [g["value"].to_numpy(float)]


def robust_cells(ok: pd.DataFrame, comparisons: dict, rows: list[str],
                 n_resamples: int = N_RESAMPLES) -> pd.DataFrame:
    """One line per (row, dataset, column) and one-axis comparison of the row (one line
    without a baseline when it has none): n runs, mean, IQM with its stratified bootstrap
    interval, and P(row > baseline) over the shared seeds (runs of one seed averaged) with its
    interval; where both cells are folds of one k-fold CV (`cells.cv_cells`), over the shared
    (partition, fold, seed) runs instead: a seed's folds are different test sets, not one
    seed's repeats. A CV cell's intervals resample whole test folds (partition, fold), each
    with all its seeds (`cluster_iqm_interval`): a fold's runs share its test graphs. Where
    the study has CV cells a column `clusters` gives each cell's number of folds (0: not CV).
    Percent; `comparisons` and `rows` as `cells.cell_stats` takes them."""
    from analysis.cells import CV_UNIT, cv_cells, observations

    obs = observations(ok)
    cells = ["row", "dataset", "column"]
    cv = cv_cells(obs)
    per_seed = obs.groupby([*cells, "seed"], sort=False)["value"].mean()
    seeds_of = {k: g.droplevel([0, 1, 2]) for k, g in per_seed.groupby(level=cells, sort=False)}
    runs_of: dict[tuple, pd.Series] = {}  # the CV cells' runs by (partition, fold, seed)
    if cv:  # (a run without a fold has a NaN key: left out, its cell is not in `cv`)
        per_run = obs.groupby([*cells, *CV_UNIT, "seed"], sort=False)["value"].mean()
        runs_of = {k: g.droplevel([0, 1, 2])
                   for k, g in per_run.groupby(level=cells, sort=False)}
    recs = []
    for (row, dset, col), g in obs.groupby(cells, sort=False):
        if (row, dset, col) in cv:  # whole test folds resampled, each with all its seeds
            folds = list(zip(g["cv_split"].tolist(), g["cv_fold"].tolist()))
            strata, extra = [g["value"].to_numpy(float)], {"clusters": len(set(folds))}
            lo, hi = cluster_iqm_interval(strata[0], folds, n_resamples=n_resamples)
        else:
            strata, extra = _strata(g), {"clusters": 0} if cv else {}
            lo, hi = iqm_interval(*strata, n_resamples=n_resamples)
        cell = {"row": row, "dataset": dset, "column": col, "n": len(g),
                "mean": float(g["value"].mean()), "iqm": iqm(g["value"]), "iqm_lo": lo,
                "iqm_hi": hi, "strata": len(strata), **extra}
        for comp in comparisons.get(row) or [None]:
            rec = {**cell, "baseline": None, "axis": "", "n_pairs": 0, "p_improve": math.nan,
                   "p_improve_lo": math.nan, "p_improve_hi": math.nan}
            base = seeds_of.get((comp.baseline, dset, col)) if comp is not None else None
            if comp is not None:
                rec.update(baseline=comp.baseline, axis=comp.axis)
            if base is not None:
                a = seeds_of[(row, dset, col)]
                k, bkey = cv.get((row, dset, col)), (comp.baseline, dset, col)
                by_fold = k is not None and k == cv.get(bkey)  # both folds of one k-fold CV
                if by_fold:
                    a, base = runs_of[(row, dset, col)], runs_of[bkey]
                shared = a.index.intersection(base.index)
                folds = list(zip(shared.get_level_values(0), shared.get_level_values(1))) \
                    if by_fold else None  # a pair's cluster: its test fold
                x, y = a.loc[shared].to_numpy(), base.loc[shared].to_numpy()
                p_lo, p_hi = improvement_interval(x, y, n_resamples=n_resamples,
                                                  clusters=folds)
                rec.update(n_pairs=len(shared), p_improve=probability_of_improvement(x, y),
                           p_improve_lo=p_lo, p_improve_hi=p_hi)
            recs.append(rec)
    columns = [*ROBUST_COLUMNS, "clusters"] if cv else ROBUST_COLUMNS
    if not recs:
        return pd.DataFrame(columns=columns)
    out = pd.DataFrame(recs)
    rank = {r: i for i, r in enumerate(rows)}
    out["_r"] = out["row"].map(rank).fillna(len(rank))
    return out.sort_values(["_r", "dataset"], kind="stable")[columns].reset_index(drop=True)


def robust_table(robust: pd.DataFrame, adaptive: bool = False) -> Table:
    """The report's table of `robust_cells`: IQM beside the mean, and P(row > baseline)."""
    header = [[("Model", 1), ("Dataset", 1), ("Column", 1), ("n", 1), ("mean", 1),
               ("IQM [95% CI]", 1), ("vs", 1), ("pairs", 1), ("P(row > vs) [95% CI]", 1)]]
    body = []
    for _, x in robust.iterrows():
        ci = fmt_interval(x["iqm_lo"], x["iqm_hi"])
        has = x["n_pairs"] > 0
        p = (f"{x['p_improve']:.2f}" + (f" [{x['p_improve_lo']:.2f}, {x['p_improve_hi']:.2f}]"
                                        if np.isfinite(x["p_improve_lo"]) else "")
             if has else "–")
        body.append([x["row"], dataset_name(x["dataset"]), column_name(x["column"]),
                     str(x["n"]), f"{x['mean']:.1f}",
                     f"{x['iqm']:.1f}" + (f" {ci}" if ci != "–" else ""),
                     x["baseline"] if isinstance(x["baseline"], str) else "–",
                     str(x["n_pairs"]) if x["axis"] else "–", p])
    notes = ["IQM: interquartile mean, the mean of the middle half of a cell's runs "
             "(floor(n/4) cut from each end; Agarwal et al., NeurIPS 2021): from 4 runs on, one "
             "collapsed seed is among those cut; 95% CI: percentile bootstrap "
             f"(scipy.stats.bootstrap, {N_RESAMPLES:,} resamples, fewer, at least "
             f"{stats.MIN_BOOT:,}, beyond {stats.MAX_DRAWS // N_RESAMPLES} runs; seed {SEED}), "
             "stratified by "
             "trial where a row pools several trials of ≥ 2 runs each, shown from "
             f"{MIN_RUNS} runs. P(row > vs): the share of the seeds both rows have on which "
             "the row beats its one-axis baseline, ties counted half (runs of one seed "
             "averaged; under k-fold cross-validation the (fold, seed) runs both rows have, "
             "paired on the same fold of the same partition and seed), with a percentile "
             f"bootstrap 95% CI over the pairs from {MIN_RUNS} pairs; 0.5 = no tendency "
             "either way. The figure beside each bar of an IQM shows every run as a dot "
             "(section figures)."]
    if "clusters" in robust.columns and (robust["clusters"] > 0).any():
        notes.append("Under k-fold cross-validation both intervals are cluster bootstraps: "
                     "whole test folds (a fold of one partition, with all its seeds and "
                     "pairs) are resampled, not single runs, since a fold's runs share its "
                     f"test graphs; shown from {MIN_RUNS} folds. The folds' training sets "
                     "overlap, so even these intervals are somewhat too narrow.")
    if adaptive:
        notes.append("Seeds were added adaptively here: these intervals are fixed-n and "
                     "descriptive; the decisions are the confidence sequence's.")
    return Table("robust", "Robust aggregates: interquartile mean and probability of "
                 "improvement", header, body, [[False] * 9 for _ in body], robust, notes,
                 align="lllrrrlrr")


def far_runs(values: object) -> np.ndarray:
    """Which values lie far from the rest: beyond Tukey's outer fences (FAR_IQR x IQR outside
    the quartiles; a normal sample passes them about twice in a million draws) and more than
    FAR_POINTS from the median; none below MIN_RUNS values."""
    a = np.asarray(values, dtype=float)
    out = np.zeros(a.shape, dtype=bool)
    ok = np.isfinite(a)
    if ok.sum() < MIN_RUNS:
        return out
    q1, med, q3 = np.percentile(a[ok], [25, 50, 75])
    fence = FAR_IQR * (q3 - q1)
    out[ok] = ((a[ok] < q1 - fence) | (a[ok] > q3 + fence)) & (np.abs(a[ok] - med) > FAR_POINTS)
    return out


def seed_values(ok: pd.DataFrame) -> pd.DataFrame:
    """Every run as the strip plot draws it: row, dataset, column, trial_id, seed, value
    (percent) and `far` (`far_runs` within its cell): a collapsed seed is a far dot; and its
    cross-validation fold and partition (`cv_fold`, NaN where not CV, and `cv_split`, as
    `cells.observations` gives them)."""
    from analysis.cells import observations

    obs = observations(ok).reset_index(drop=True)
    far = np.zeros(len(obs), dtype=bool)
    for idx in obs.groupby(["row", "dataset", "column"], sort=False).indices.values():
        far[idx] = far_runs(obs["value"].to_numpy(dtype=float)[idx])
    out = obs.assign(far=far)[["row", "dataset", "column", "trial_id", "seed", "value", "far",
                               "cv_fold", "cv_split"]]
    for c in ("row", "dataset", "column"):  # plain strings: the figure groups and looks them up
        out[c] = out[c].astype(str).to_numpy(dtype=object)
    return out


def pooled_iqm(rows: Sequence[object]) -> tuple[float, tuple[float, float]]:
    """The IQM of several rows' runs pooled, with its interval stratified by row (each row
    resampled on its own): (IQM, (low, high))."""
    return iqm(np.concatenate([_clean(r) for r in rows] or [np.empty(0)])), iqm_interval(*rows)
