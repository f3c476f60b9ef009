"""Curves over bins or thresholds, median and interquartile band over runs.

- `ratio_kept`: ratio of nodes kept per pooling layer vs the threshold (log-binned when
  the threshold is continuous), on TEST-ORIG and TEST-LARGE.
- `acc_by_size`: test accuracy per graph-size bin on ORIG, LARGE and LARGE-C, per variant.
- `gt_mass`: fraction of graphs whose ground-truth nodes get attention mass >= t, vs t
  (an SDC-style curve); the SDC section draws its foreground-mass figure with it too.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from analysis import figure_style
from analysis.figure_style import (
    Figure,
    as_lists,
    hide_unused,
    median_band,
    most_frequent,
    not_drawn,
    palette,
    panel_grid,
    percent_axis,
    side_legend,
    split_styles,
    splits_of,
    subset,
    theme,
)
from analysis.formatting import TEST_SPLITS, column_name, dataset_name
from analysis.load import layer_columns
from result_store.schema import ACC_BY_SIZE, MASS_CURVE

# line style and marker of each test split in the curve figures (captions name them)
SPLIT_STYLES = {"test_orig": ("-", "o"), "test_large": ("--", "s"), "test_largec": (":", "^")}


def ratio_kept(ok: pd.DataFrame, out: Path, study: str) -> list[Figure]:
    """Ratio of nodes kept per pooling layer vs threshold."""
    kept = layer_columns(ok, "ratio_kept")
    if not kept or "threshold" not in ok.columns:
        return []
    d = subset(ok, ["dataset", "split", "threshold", *kept]
               + (["selection"] if "selection" in ok.columns else []), ["test_orig", "test_large"])
    if "selection" in d.columns:
        d = d[d["selection"] == "threshold"]
    long = d.melt(id_vars=["dataset", "split", "threshold"], value_vars=kept, var_name="layer",
                  value_name="kept")
    long = long[np.isfinite(long["kept"].to_numpy(dtype=float))
                & np.isfinite(long["threshold"].to_numpy(dtype=float))]
    if long.empty:
        return []
    long["layer"] = long["layer"].str.replace("ratio_kept_l", "layer ", regex=False)
    thr = long["threshold"].to_numpy(dtype=float)
    log = thr.min() > 0 and thr.max() / thr.min() > 20
    if long["threshold"].nunique() > 12:  # continuous: median per (log-)bin
        edges = np.geomspace(thr.min(), thr.max(), 16) if log else np.linspace(thr.min(),
                                                                                 thr.max(), 16)
        mids = np.sqrt(edges[:-1] * edges[1:]) if log else (edges[:-1] + edges[1:]) / 2
        long["x"] = mids[np.clip(np.searchsorted(edges, thr, side="right") - 1, 0, 14)]
    else:
        long["x"] = thr
    layers = sorted(long["layer"].unique())
    pal = palette(layers)
    datasets = sorted(long["dataset"].unique())
    style, ctx = theme()
    with style, ctx:
        fig, axes = panel_grid(1, len(datasets), w=4.2)
        handles = {}
        drawn: dict[str, bool] = {}
        for j, ds_ in enumerate(datasets):
            ax = axes[0, j]
            for lay in layers:
                for sp, (ls, mk) in list(SPLIT_STYLES.items())[:2]:
                    g = long[(long["dataset"] == ds_) & (long["layer"] == lay)
                             & (long["split"] == sp)]
                    h = median_band(ax, g, "x", "kept", pal[lay], ls=ls, marker=mk)
                    if h is not None:
                        handles.setdefault(f"{lay}, {column_name(sp)}", h)
                        drawn[sp] = drawn.get(sp, False) or len(h.get_xdata()) > 1
            if log:
                ax.set_xscale("log")
            ax.set_title(dataset_name(ds_))
            ax.set_xlabel("threshold α̃")
            ax.set_ylabel("ratio of nodes kept" if j == 0 else "")
            percent_axis(ax.yaxis)
        side_legend(fig, handles, "pooling layer")
        png, svg = figure_style.save(fig, out, f"{study}__ratio_kept")
    return [Figure("ratio_kept", "Ratio of nodes kept (mean over graphs of N_kept / N) per "
                   "pooling layer (colour) vs the threshold, median and interquartile band over "
                   f"runs ({split_styles(drawn, SPLIT_STYLES)}).", png, svg)]


def _nested(s: pd.Series, type_: pa.DataType) -> pa.Array:
    """A nested column as one Arrow array: as the loader gives it (`pd.ArrowDtype`), or from
    Python lists of dicts (a frame built by hand; NaN or None: null)."""
    if isinstance(s.dtype, pd.ArrowDtype):
        return s.array.__arrow_array__().combine_chunks()
    return pa.array(s.tolist(), type=type_, from_pandas=True)


def _size_bins(d: pd.DataFrame) -> list[tuple]:
    """(dataset, split, variant, lo, hi, accuracy) per size bin of every row."""
    arr = _nested(d["acc_by_size"], ACC_BY_SIZE)
    bins = pc.list_flatten(arr)
    parent = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
    lo, hi, acc = (bins.field(f).to_numpy(zero_copy_only=False).astype(float)
                   for f in ("lo", "hi", "accuracy"))
    keep = np.isfinite(acc) & np.isfinite(lo) & np.isfinite(hi)
    cols = as_lists(d, ["dataset", "split", "variant"])
    return [(cols[0][i], cols[1][i], cols[2][i], int(a), int(b), float(c))
            for i, a, b, c in zip(parent[keep].tolist(), lo[keep], hi[keep], acc[keep])]


def acc_by_size(ok: pd.DataFrame, out: Path, study: str, variants: list[str]) -> list[Figure]:
    """Test accuracy vs graph size (N bins), TEST-ORIG vs TEST-LARGE."""
    if "acc_by_size" not in ok.columns:
        return []
    d = subset(ok, ["trial_id", "seed", "dataset", "split", "variant", "acc_by_size"],
               ["test_orig", "test_large", "test_largec"])
    recs = _size_bins(d)
    if not recs:
        return []
    long = pd.DataFrame(recs, columns=["dataset", "split", "variant", "lo", "hi", "acc"])
    hue = most_frequent(long, "variant", variants)
    left = not_drawn(long["variant"].unique(), hue)
    pal = palette(hue)
    datasets = sorted(long["dataset"].unique())
    style, ctx = theme()
    n_runs = figure_style.run_counts(d, "variant")
    with style, ctx:
        fig, axes = panel_grid(1, len(datasets), w=4.6)
        handles = {}
        drawn: dict[str, bool] = {}
        for j, ds_ in enumerate(datasets):
            ax = axes[0, j]
            g = long[long["dataset"] == ds_]
            bins = sorted(map(tuple, g[["lo", "hi"]].drop_duplicates().to_numpy().tolist()))
            g = g.assign(x=g.groupby(["lo", "hi"], sort=True).ngroup())
            for v in hue:
                for sp, (ls, mk) in SPLIT_STYLES.items():
                    h = median_band(ax, g[(g["variant"] == v) & (g["split"] == sp)], "x",
                                    "acc", pal[v], ls=ls, marker=mk)
                    if h is not None:
                        handles.setdefault(f"{v} ({n_runs.get(v, 'n = 0 runs')})", h)
                        drawn[sp] = drawn.get(sp, False) or len(h.get_xdata()) > 1
            ax.set_xticks(range(len(bins)), [f"{lo}–{hi}" for lo, hi in bins], rotation=30)
            ax.set_title(dataset_name(ds_))
            ax.set_xlabel("graph size N")
            ax.set_ylabel("test accuracy" if j == 0 else "")
            percent_axis(ax.yaxis)
        side_legend(fig, handles, "variant")
        png, svg = figure_style.save(fig, out, f"{study}__acc_by_size")
    lines = any(drawn.values())
    return [Figure("acc_by_size", "Test accuracy per graph-size bin, median over runs (colour: "
                   f"variant; {figure_style.RUNS_NOTE})"
                   + (", interquartile band where a split has two or more bins" if lines else
                      "; one marker per (variant, split) and bin, no lines: each split covers "
                      "a single size bin")
                   + f" ({split_styles(drawn, SPLIT_STYLES)})." + left, png, svg,
                   {"styles": drawn})]


GT_MASS_CAPTION = ("Fraction of graphs whose ground-truth nodes receive attention mass ≥ t (first "
                   "pooling layer), median and interquartile band over runs: the further right "
                   "the curve stays high, the more selective the attention.")


def gt_mass(ok: pd.DataFrame, out: Path, study: str, variants: list[str],
            caption: str = GT_MASS_CAPTION, ylabel: str = "graphs with GT mass ≥ t",
            legend: str = "variant") -> list[Figure]:
    """Fraction of graphs whose ground-truth nodes get attention mass >= t, vs t."""
    if "gt_mass_curve" not in ok.columns:
        return []
    d = subset(ok, ["dataset", "split", "variant", "gt_mass_curve"], TEST_SPLITS)
    cols = as_lists(d, ["dataset", "split", "variant"])
    arr = _nested(d["gt_mass_curve"], MASS_CURVE)
    points = pc.list_flatten(arr)
    parent = pc.list_parent_indices(arr).to_numpy(zero_copy_only=False)
    tt, ff = (points.field(f).to_numpy(zero_copy_only=False).astype(float)
              for f in ("t", "fraction"))
    known = np.isfinite(tt)
    t = np.unique(tt[known])
    frac = np.full((len(d), len(t)), math.nan)  # (rows x thresholds)
    frac[parent[known], np.searchsorted(t, tt[known])] = ff[known]
    has = np.isfinite(frac).any(axis=1) if frac.size else np.zeros(len(cols[0]), bool)
    if not has.any():
        return []
    frac = frac[has]  # (runs x thresholds)
    rows = [r for r, h in zip(zip(cols[0], cols[1], cols[2]), has) if h]
    meta = pd.DataFrame(rows, columns=["dataset", "split", "variant"])
    hue = most_frequent(meta, "variant", variants)
    left = not_drawn(meta["variant"].unique(), hue)
    pal = palette(hue)
    datasets = sorted(meta["dataset"].unique())
    split_of = splits_of(meta, datasets)
    style, ctx = theme()
    with style, ctx:
        fig, axes = panel_grid(len(datasets), max(map(len, split_of.values())), h=3.3)
        hide_unused(axes, [len(split_of[x]) for x in datasets])
        handles = {}
        for (ds_, sp, v), idx in meta.groupby(["dataset", "split", "variant"]).indices.items():
            if v not in pal:
                continue
            ax = axes[datasets.index(ds_), split_of[ds_].index(sp)]
            with np.errstate(all="ignore"):
                q = np.nanquantile(frac[idx], [0.25, 0.5, 0.75], axis=0)
            (h,) = ax.plot(t, q[1], color=pal[v])
            ax.fill_between(t, q[0], q[2], color=pal[v], alpha=0.2, lw=0)
            handles.setdefault(v, h)
        for i, ds_ in enumerate(datasets):
            for j, sp in enumerate(split_of[ds_]):
                ax = axes[i, j]
                ax.set_title(f"{dataset_name(ds_)} {column_name(sp)}")
                ax.set_xlabel("attention mass threshold t")
                ax.set_ylabel(ylabel if j == 0 else "")
                percent_axis(ax.yaxis)
        side_legend(fig, {v: handles[v] for v in hue if v in handles}, legend)
        png, svg = figure_style.save(fig, out, f"{study}__gt_mass")
    return [Figure("gt_mass", caption + left, png, svg)]
