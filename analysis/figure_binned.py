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
from analysis.json_columns import json_table, json_value
from analysis.load import layer_columns

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


def _size_bins(cols: list[list]) -> list[tuple]:
    """(dataset, split, variant, lo, hi, accuracy) per size bin of every row."""
    import pyarrow.compute as pc

    tab = json_table(cols[3], wrap="b") if cols[3] else None
    if tab is not None and "b" in tab.column_names:
        col = tab.column("b").combine_chunks()
        try:
            bins = pc.list_flatten(col)
            parent = pc.list_parent_indices(col).to_numpy()
            lengths = pc.list_value_length(bins).to_numpy(zero_copy_only=False)
            if len(lengths) and (lengths == lengths[0]).all() and lengths[0] >= 3:
                vals = pc.list_flatten(bins).to_numpy(zero_copy_only=False).astype(float)
                vals = vals.reshape(-1, int(lengths[0]))
                return [(cols[0][i], cols[1][i], cols[2][i], int(v[0]), int(v[1]), float(v[2]))
                        for i, v in zip(parent.tolist(), vals) if np.isfinite(v[2])]
            if not len(lengths):
                return []
        except (TypeError, ValueError, NotImplementedError):
            pass
    recs = []
    for ds_, sp, v, s in zip(*cols):
        bins = json_value(s)
        for b in bins if isinstance(bins, list) else ():
            if isinstance(b, list) and len(b) >= 3 and b[2] is not None:
                recs.append((ds_, sp, v, int(b[0]), int(b[1]), float(b[2])))
    return recs


def acc_by_size(ok: pd.DataFrame, out: Path, study: str, variants: list[str]) -> list[Figure]:
    """Test accuracy vs graph size (N bins), TEST-ORIG vs TEST-LARGE."""
    if "acc_by_size" not in ok.columns:
        return []
    d = subset(ok, ["trial_id", "seed", "dataset", "split", "variant", "acc_by_size"],
               ["test_orig", "test_large", "test_largec"])
    cols = as_lists(d, ["dataset", "split", "variant", "acc_by_size"])
    recs = _size_bins(cols)
    if not recs:
        return []
    long = pd.DataFrame(recs, columns=["dataset", "split", "variant", "lo", "hi", "acc"])
    hue = most_frequent(long, "variant", variants)
    left = not_drawn(long["variant"].unique(), hue)
    pal = palette(hue)
    datasets = sorted(long["dataset"].unique())
    style, ctx = theme()
    n_runs = d.drop_duplicates(["trial_id", "seed"]).groupby("variant").size()
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
                        handles.setdefault(f"{v} (n = {int(n_runs.get(v, 0))} runs)", h)
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
                   "variant, n runs in the legend)"
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
    cols = as_lists(d, ["dataset", "split", "variant", "gt_mass_curve"])
    tab = json_table(cols[3]) if cols[3] else None
    if tab is not None and tab.num_columns:
        keys = sorted(tab.column_names, key=_float)
        t = np.array([_float(k) for k in keys])
        frac = np.column_stack([tab.column(k).to_numpy(zero_copy_only=False).astype(float)
                                for k in keys])
    else:  # not strict JSON: parse row by row
        parsed = [json_value(v) for v in cols[3]]
        keys = sorted({k for c in parsed if isinstance(c, dict) for k in c}, key=_float)
        t = np.array([_float(k) for k in keys])
        frac = np.array([[_float(c.get(k)) if isinstance(c, dict) else math.nan for k in keys]
                         for c in parsed], dtype=float).reshape(len(parsed), len(keys))
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


def _float(x: object) -> float:
    try:
        return float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
