"""The numbers behind a study's tables: one line per (table row, dataset, column,
one-axis comparison).

`cell_stats` gives each line n runs and seeds, mean, std, the 95% Student-t CI, the
paired comparison with the baseline over shared seeds (exact sign-flip test and the CI
inverting it, Holm-adjusted over the study; only with at least `stats.MIN_PAIRED_SEEDS`
shared seeds), and the paper's number. Where both rows' runs are folds of one k-fold
cross-validation (`data.protocol: cv`) the unit is the test fold instead: per fold of a
partition (`data.split_seed`; `data.split_seed: seed` gives every seed its own) the mean
over the seeds both rows ran on it, paired over the test folds both rows have, by the corrected resampled
t-test (`stats.paired_folds`; `test` names the test of each line). `primary` picks each
row's first comparison and `significant` says whether a line clears `ALPHA`. Values are in
percent.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis import stats
from analysis.formatting import TEST_SPLITS
from analysis.reference import AUC_COLUMN, AUC_SPLIT, POOLED_AUC, reference, train_nodes
from analysis.variants import Comparison, cv_folds, cv_partitions

ALPHA = 0.05  # significance level of the markers (Holm-adjusted p)


def observations(ok: pd.DataFrame) -> pd.DataFrame:
    """One value (percent) per (row, dataset, column, trial, seed): test accuracies and AUC,
    with the run's cross-validation fold and k (`cv_fold`, `cv_folds`; NaN where the run is
    not a fold of a k-fold CV, `variants.cv_folds`) and the partition its fold is of
    (`cv_split`: the split seed, "" for the default, `variants.cv_partitions`)."""
    keep = ["row", "variant", "dataset", "trial_id", "seed", "cv_fold", "cv_folds", "cv_split"]
    ok = ok[[c for c in [*keep, "split", "accuracy", "attn_auc_l0", POOLED_AUC, "data_params"]
             if c in ok.columns]]
    if "data_params" in ok.columns:
        (fold, k), split = cv_folds(ok["data_params"]), cv_partitions(ok["data_params"])
    else:
        fold, k, split = np.full(len(ok), np.nan), np.full(len(ok), np.nan), np.full(len(ok), "")
    ok = ok.assign(cv_fold=fold, cv_folds=k, cv_split=split)
    acc = ok[ok["split"].isin(TEST_SPLITS)]
    parts = [acc[keep].assign(column=acc["split"].to_numpy(),
                              value=100 * acc["accuracy"].to_numpy(dtype=float))
             ] if "accuracy" in ok.columns else []
    auc = ok[ok["split"] == AUC_SPLIT]  # one row per seed (the pooled value is on every row)
    if POOLED_AUC in ok.columns:  # as the papers pool it: all test graphs of the seed together
        values = auc[POOLED_AUC].to_numpy(dtype=float)
        if "attn_auc_l0" in auc.columns:  # stores written before the pooled column existed
            values = np.where(np.isfinite(values), values, auc["attn_auc_l0"].to_numpy(dtype=float))
        parts.append(auc[keep].assign(column=AUC_COLUMN, value=100 * values))
    elif "attn_auc_l0" in ok.columns:
        parts.append(auc[keep].assign(column=AUC_COLUMN,
                                      value=100 * auc["attn_auc_l0"].to_numpy(dtype=float)))
    if not parts:
        return pd.DataFrame(columns=[*keep, "column", "value"])
    obs = pd.concat(parts, ignore_index=True)
    return obs[np.isfinite(obs["value"].to_numpy(dtype=float))]


def columns_of(obs: pd.DataFrame) -> dict[str, list[str]]:
    """Dataset -> its table columns (test splits in canonical order, then AUC)."""
    order = [*TEST_SPLITS, AUC_COLUMN]
    out: dict[str, list[str]] = {}
    for d, cols in obs.groupby("dataset", sort=True)["column"]:
        present = set(cols)
        out[str(d)] = [c for c in order if c in present]
    return out


CELL_COLUMNS = ["row", "variant", "dataset", "column", "n", "seeds", "mean", "std", "ci_lo",
                "ci_hi", "folds", "baseline", "axis", "base_value", "value", "primary", "test",
                "n_pairs", "delta", "delta_lo", "delta_hi", "p", "p_holm", "paper", "paper_std",
                "paper_source", "diff_paper", "best", "train_nodes"]


def cell_stats(ok: pd.DataFrame, comparisons: dict[str, list[Comparison]], rows: list[str],
               n_boot: int = stats.N_BOOT) -> pd.DataFrame:
    """Numbers of every (row, dataset, column) cell, one line per comparison of the row (one
    line without a baseline when it has none); `primary` marks the line of the row's first
    comparison, the one the main table marks. Below MIN_PAIRED_SEEDS shared seeds (shared
    folds, under cross-validation) a comparison keeps its Δ but gets no p-value and no CI.
    `folds`: the cell's cross-validation test folds, (partition, fold) pairs: k for one
    partition, r x k for r (0 where its runs are not all folds of one k-fold CV)."""
    obs = observations(ok)
    recs = []
    per_seed = obs.groupby(["row", "dataset", "column", "seed"], sort=False)["value"].mean()
    seeds_of = {k: g.droplevel([0, 1, 2]) for k, g in per_seed.groupby(
        level=["row", "dataset", "column"], sort=False)}
    folds_of = _folds_of(obs)
    pairs = obs[["row", "variant"]].drop_duplicates()
    variant_of = dict(zip(pairs["row"].tolist(), pairs["variant"].tolist()))
    nodes_of = _train_nodes_of(ok)
    for (row, dset, col), g in obs.groupby(["row", "dataset", "column"], sort=False):
        v = g["value"].to_numpy(dtype=float)
        mean, std = stats.mean_std(v)
        lo, hi = stats.bootstrap_ci(v, n_boot=n_boot) if v.size >= stats.MIN_PAIRED_SEEDS \
            else (math.nan, math.nan)  # no CI of a mean from 2-4 runs
        ref = reference(variant_of[row], dset, col)
        cell = {"row": row, "variant": variant_of[row], "dataset": dset, "column": col,
                "n": int(v.size), "seeds": int(seeds_of[(row, dset, col)].size), "mean": mean,
                "std": std, "ci_lo": lo, "ci_hi": hi,
                "folds": _n_folds(folds_of[(row, dset, col)][0])
                if (row, dset, col) in folds_of else 0,
                "paper": ref.mean if ref else math.nan,
                "paper_std": ref.std if ref and ref.std is not None else math.nan,
                "paper_source": ref.source if ref else "",
                "train_nodes": nodes_of.get((row, dset))}
        comps = comparisons.get(row) or [None]
        for i, comp in enumerate(comps):
            recs.append({**cell, **_compare(comp, seeds_of, folds_of, (row, dset, col),
                                            n_boot), "primary": i == 0})
    if not recs:
        return pd.DataFrame(columns=CELL_COLUMNS)
    out = pd.DataFrame(recs)
    out["p_holm"] = stats.holm(out["p"].to_numpy(dtype=float))
    out["diff_paper"] = out["mean"] - out["paper"]
    best = out.groupby(["dataset", "column"])["mean"].transform("max")
    out["best"] = np.isclose(out["mean"], best, rtol=0, atol=1e-9)
    rank = {r: i for i, r in enumerate(rows)}
    order = {c: i for i, c in enumerate([*TEST_SPLITS, AUC_COLUMN])}
    out["_r"] = out["row"].map(rank).fillna(len(rank))
    out["_c"] = out["column"].map(order).fillna(len(order))
    out = out.sort_values(["_r", "dataset", "_c", "primary"], ascending=[True, True, True, False],
                          kind="stable")
    return out[CELL_COLUMNS].reset_index(drop=True)


def _train_nodes_of(ok: pd.DataFrame) -> dict[tuple[str, str], int | None]:
    """(row, dataset) -> the TU split's max_train_nodes, where the row has one (None: mixed)."""
    if "data_params" not in ok.columns or "row" not in ok.columns:
        return {}
    import json

    out: dict[tuple[str, str], int | None] = {}
    pairs = ok[["row", "dataset", "data_params"]].drop_duplicates()
    for row, dset, params in pairs.itertuples(index=False):
        try:
            parsed = json.loads(params) if params not in ("", "nan") else {}
        except ValueError:
            parsed = {}
        n = train_nodes(str(dset), parsed if isinstance(parsed, dict) else {})
        key = (row, str(dset))
        out[key] = n if out.get(key, n) == n else None
    return out


def cv_cells(obs: pd.DataFrame) -> dict[tuple, int]:
    """(row, dataset, column) -> the CV's k, for the cells of `observations` whose every run
    is a fold of one k-fold cross-validation: their runs are (partition, fold, seed)
    replicates, paired on all three (a partition is a `cv_split`)."""
    out: dict[tuple, int] = {}
    if "cv_fold" not in obs.columns or not np.isfinite(obs["cv_fold"].to_numpy(float)).any():
        return out  # no cross-validated run
    for key, g in obs.groupby(["row", "dataset", "column"], sort=False):
        k = g["cv_folds"].to_numpy(dtype=float)
        if np.isfinite(k).all() and np.isfinite(g["cv_fold"].to_numpy(dtype=float)).all() \
                and np.unique(k).size == 1:
            out[key] = int(k[0])
    return out


CV_UNIT = ["cv_split", "cv_fold"]  # a test fold: the fold of one partition (split seed)


def _folds_of(obs: pd.DataFrame) -> dict[tuple, tuple[pd.Series, int]]:
    """(row, dataset, column) -> (each run's value, indexed by (partition, fold, seed); the
    CV's k), for the cells whose every run is a fold of one k-fold cross-validation
    (`cv_cells`). A fold number alone is no unit where the partitions differ
    (`data.split_seed: seed`: every seed its own), so fold 3 of two partitions is two units,
    each paired only with the baseline's same partition and fold (`_fold_means`)."""
    out: dict[tuple, tuple[pd.Series, int]] = {}
    ks = cv_cells(obs)
    if not ks:
        return out
    for key, g in obs.groupby(["row", "dataset", "column"], sort=False):
        if key in ks:
            g = g.assign(cv_fold=g["cv_fold"].to_numpy(dtype=float).astype(int))
            out[key] = (g.groupby([*CV_UNIT, "seed"], sort=True)["value"].mean(), ks[key])
    return out


def _n_folds(runs: pd.Series) -> int:
    """The test folds (partition, fold) a cell's runs cover."""
    return int(runs.index.droplevel("seed").nunique())


def _fold_means(a: pd.Series, b: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per test fold both cells have, the mean over the seeds BOTH ran on it, for each cell:
    a seed one row lacks on a fold is left out of the other's mean there too, so each fold's
    difference is paired run for run (as `benchmarks/tu_beyond_summary.py` pairs them)."""
    shared = a.index.intersection(b.index)
    fa = a.loc[shared].groupby(level=CV_UNIT, sort=True).mean()
    fb = b.loc[shared].groupby(level=CV_UNIT, sort=True).mean()
    return fa.to_numpy(), fb.loc[fa.index].to_numpy()


def _compare(comp: Comparison | None, seeds_of: dict, folds_of: dict, key: tuple,
             n_boot: int) -> dict:
    """The comparison columns of one cell line: paired over the test folds (partition, fold)
    both cells have where both are folds of the same k-fold cross-validation (corrected
    resampled t), else over the seeds both have (sign-flip)."""
    rec = {"baseline": None, "axis": "", "base_value": "", "value": "", "test": "",
           "n_pairs": 0, "delta": math.nan, "delta_lo": math.nan, "delta_hi": math.nan,
           "p": math.nan}
    if comp is None:
        return rec
    rec.update(baseline=comp.baseline, axis=comp.axis, base_value=comp.base_value,
               value=comp.value)
    bkey = (comp.baseline, *key[1:])
    if bkey not in seeds_of:
        return rec
    if key in folds_of and bkey in folds_of and folds_of[key][1] == folds_of[bkey][1]:
        (a, k), (b, _) = folds_of[key], folds_of[bkey]
        fa, fb = _fold_means(a, b)
        if not fa.size:
            return rec
        pr = stats.paired_folds(fa, fb, k, alpha=ALPHA)
    else:
        a, b = seeds_of[key], seeds_of[bkey]
        shared = a.index.intersection(b.index)
        if not len(shared):
            return rec
        pr = stats.paired(a.loc[shared].to_numpy(), b.loc[shared].to_numpy(), alpha=ALPHA,
                          n_perm=n_boot)
    rec.update(test=pr.test, n_pairs=pr.n, delta=pr.delta)
    if pr.n >= stats.MIN_PAIRED_SEEDS:
        rec.update(delta_lo=pr.ci_lo, delta_hi=pr.ci_hi, p=pr.p)
    return rec


def significant(r: pd.Series) -> bool:
    """A comparison line is significant: tested (enough paired seeds) and Holm p < ALPHA; on
    an adaptive-seed study (a `sequence` column, `adaptive_decisions.apply_decisions`) only
    when the study's confidence sequence decided it higher or lower: a fixed-n test on the
    seeds an optional stopping rule left does not hold its level."""
    if "sequence" in r.index:
        return r["sequence"] in ("greater", "less")
    return bool(np.isfinite(r["p_holm"]) and r["p_holm"] < ALPHA)


def direction(r: pd.Series) -> int:
    """+1 / -1 for a line marked higher / lower than its baseline (`significant`), else 0;
    on an adaptive-seed study the sequence's decision gives the sign."""
    if not significant(r):
        return 0
    if "sequence" in r.index:
        return 1 if r["sequence"] == "greater" else -1
    return 1 if r["delta"] > 0 else -1


def primary(cells: pd.DataFrame) -> pd.DataFrame:
    """One line per (row, dataset, column): the row's primary comparison (or none)."""
    return cells[cells["primary"].astype(bool)]
