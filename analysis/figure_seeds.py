"""Every seed beside the aggregate: per dataset, a bar of each row's interquartile mean with its
stratified bootstrap interval, and beside it a strip plot with every run as a dot
(`seed_strips`, one figure `<study>__seeds__<dataset>` per dataset).

A bar hides how its runs spread; the strip beside it shows them, so a seed that collapsed
(an accuracy far below its row's others) is seen at a glance. Runs beyond Tukey's outer
fences and more than `robust.FAR_POINTS` from their cell's median (`robust.far_runs`) are
drawn in red with their seed number (`run_label`; under cross-validation with their fold as
well: a seed's runs are the k folds' different test sets). The numbers are
`analysis.robust`'s (`seed_values`, `iqm`, `iqm_interval`; under cross-validation
`cluster_iqm_interval`), the same as the "Robust aggregates" table.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import figure_style as fs
from analysis import robust
from analysis.formatting import TEST_SPLITS, column_name, dataset_name
from analysis.reference import AUC_COLUMN

FAR_COLOUR = "#d62728"
JITTER = 0.18  # vertical spread of a row's dots, in rows
MAX_LABELS = 3  # far runs labelled with their seed per row and panel (all are red)


def run_label(seed: int, fold: float = float("nan"), partition: str = "") -> str:
    """A far dot's label: its seed ("s7"); under cross-validation its fold too ("s1 f3"),
    and its partition (split seed) where that is not the seed's own ("s1 f3 p0")."""
    label = f"s{seed}"
    if np.isfinite(fold):
        label += f" f{int(fold)}"
        if partition not in ("", str(seed)):
            label += f" p{partition}"
    return label


def _far_name(x: dict) -> str:
    """A far run in the caption: "seed 7", under cross-validation "seed 1 fold 3"."""
    return (f"seed {x['seed']}" + (f" fold {x['fold']}" if "fold" in x else "")
            + (f" partition {x['partition']}" if "partition" in x else ""))


def _stem_part(dataset: str) -> str:
    """A dataset name as a file-name part (tu:NCI1 -> tu_NCI1)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", dataset)


def seed_strips(ok: pd.DataFrame, out: Path, study: str, rows: list[str],
                aggregates: pd.DataFrame | None = None) -> list[fs.Figure]:
    """One figure per dataset: for each table column (test splits, then AUC) a bar panel of
    the IQM per row with its 95% interval, and a strip panel of every run beside it.
    `aggregates`: `robust.robust_cells` of the same rows where already computed."""
    values = robust.seed_values(ok)
    if aggregates is None:
        aggregates = robust.robust_cells(ok, {}, rows)
    bars = {(r, d, c): (m, lo, hi) for r, d, c, m, lo, hi in aggregates.drop_duplicates(
        ["row", "dataset", "column"])[["row", "dataset", "column", "iqm", "iqm_lo",
                                       "iqm_hi"]].itertuples(index=False)}
    figs = []
    for dset, d in values.groupby("dataset", sort=True):
        cols = [c for c in [*TEST_SPLITS, AUC_COLUMN] if c in set(d["column"])]
        have = set(d["row"].tolist())
        present = [r for r in rows if r in have] + sorted(have - set(rows))
        figs.append(_figure(d, str(dset), cols, present, bars, out,
                            f"{study}__seeds__{_stem_part(str(dset))}"))
    return figs


def _figure(d: pd.DataFrame, dset: str, cols: list[str], rows: list[str], bars: dict,
            out: Path, stem: str) -> fs.Figure:
    import matplotlib.pyplot as plt

    height = 0.8 + 0.28 * len(rows)
    style, context = fs.theme()
    far: list[dict] = []
    with style, context:
        fig, axes = plt.subplots(len(cols), 2, figsize=(9.5, height * len(cols) + 0.4),
                                 squeeze=False, sharey=True, layout="constrained")
        for (bar_ax, strip_ax), col in zip(axes, cols):
            g = d[d["column"] == col]
            _bars(bar_ax, {r: bars.get((r, dset, col)) for r in rows}, rows)
            far += _strip(strip_ax, g, rows)
            what = "attention AUC (%)" if col == AUC_COLUMN else f"{column_name(col)} accuracy (%)"
            bar_ax.set_title(f"{dataset_name(dset)} {column_name(col)}: IQM, 95% CI", fontsize=9)
            strip_ax.set_title(f"{dataset_name(dset)} {column_name(col)}: every run", fontsize=9)
            for ax in (bar_ax, strip_ax):
                ax.set_xlabel(what, fontsize=8)
                ax.tick_params(labelsize=8)
        axes[0, 0].set_yticks(range(len(rows)), rows)
        axes[0, 0].set_ylim(len(rows) - 0.5, -0.5)
        png, svg = fs.save(fig, out, stem)
    named = "; ".join(f"{x['row']} {column_name(x['column'])} {_far_name(x)}: "
                      f"{x['value']:.1f}" for x in far[:8])
    cv = "cv_fold" in d.columns and bool(np.isfinite(d["cv_fold"].to_numpy(float)).any())
    more = f" and {len(far) - 8} more" if len(far) > 8 else ""
    caption = (f"{dataset_name(dset)}: left, each row's interquartile mean with its 95% "
               "bootstrap interval (no interval below "
               f"{robust.MIN_RUNS} runs"
               + (f"; under cross-validation whole folds resampled, none below "
                  f"{robust.MIN_RUNS} folds" if cv else "")
               + "); right, every run as a dot (rows jittered "
               "vertically), the row's IQM as a black tick; in red with its seed"
               + (" and fold" if cv else "") + " (at most "
               f"{MAX_LABELS} labelled a row), a run beyond Tukey's outer fences "
               f"({robust.FAR_IQR:g} IQR outside the quartiles) and more than "
               f"{robust.FAR_POINTS:g} points from its row's median"
               + (f" ({named}{more})." if far else " (none here)."))
    return fs.Figure(stem, caption, png, svg, {"far": far})


def _bars(ax, bars: dict, rows: list[str]) -> None:
    """Horizontal bars of the IQM per row, with its stratified bootstrap interval (`bars`:
    row -> (IQM, low, high) or None)."""
    for i, row in enumerate(rows):
        if bars.get(row) is None:
            continue
        m, lo, hi = bars[row]
        ax.barh(i, m, height=0.6, color="#9ecae1", edgecolor="#3182bd", lw=0.8)
        if np.isfinite(lo):
            ax.errorbar(m, i, xerr=[[m - lo], [hi - m]], fmt="none", ecolor="black", capsize=3,
                        lw=1)
    ax.set_xlim(0, 100 * 1.02)


def _strip(ax, g: pd.DataFrame, rows: list[str]) -> list[dict]:
    """Every run of each row as a dot (one scatter for the panel); far runs in red, labelled
    with their seed; each row's IQM as a black tick."""
    rng = np.random.default_rng(0)
    index = {r: i for i, r in enumerate(rows)}
    pos = np.array([index[r] for r in g["row"].tolist()], dtype=float)
    v = g["value"].to_numpy(dtype=float)
    y = pos + rng.uniform(-JITTER, JITTER, v.size)
    is_far = g["far"].to_numpy(dtype=bool)
    ax.scatter(v[~is_far], y[~is_far], s=16, color="#3182bd", alpha=0.8, lw=0,
               rasterized=v.size > fs.RASTER_POINTS)
    far = []
    if is_far.any():
        ax.scatter(v[is_far], y[is_far], s=30, color=FAR_COLOUR, lw=0, zorder=3)
        labelled: dict[str, int] = {}
        column = str(g["column"].iloc[0])
        fold = g["cv_fold"].to_numpy(dtype=float) if "cv_fold" in g.columns \
            else np.full(v.size, np.nan)
        split = g["cv_split"].astype(str).to_numpy() if "cv_split" in g.columns \
            else np.full(v.size, "")
        for row, x, yy, s, f, p in zip(np.asarray(g["row"].tolist(), dtype=object)[is_far],
                                       v[is_far], y[is_far], g["seed"].to_numpy()[is_far],
                                       fold[is_far], split[is_far]):
            labelled[row] = labelled.get(row, 0) + 1
            if labelled[row] <= MAX_LABELS:
                ax.annotate(run_label(int(s), f, p), (x, yy), xytext=(3, 3),
                            textcoords="offset points", fontsize=7, color=FAR_COLOUR)
            run = {"row": row, "column": column, "seed": int(s), "value": float(x)}
            if np.isfinite(f):  # a fold of a k-fold CV
                run["fold"] = int(f)
                if p not in ("", str(int(s))):
                    run["partition"] = p
            far.append(run)
    ticks = [(index[r], robust.iqm(x)) for r, x in g.groupby("row", sort=False)["value"]]
    if ticks:
        at, m = np.array(ticks).T
        ax.vlines(m, at - 0.3, at + 0.3, color="black", lw=1.2)
    if v.size:
        a, b = float(v.min()), float(v.max())
        pad = 0.06 * max(b - a, 2.0)
        ax.set_xlim(max(-1.0, a - pad), min(101.0, b + pad))
    far.sort(key=lambda x: (index[x["row"]], x["seed"], x.get("fold", -1)))
    return far
