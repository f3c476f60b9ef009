"""Every seed beside the aggregate: per dataset, a bar of each row's interquartile mean with its
stratified bootstrap interval, and beside it a strip plot with every run as a dot
(`seed_strips`, one figure `<study>__seeds__<dataset>` per dataset).

A bar hides how its runs spread; the strip beside it shows them, so a seed that collapsed
(an accuracy far below its row's others) is seen at a glance. Runs beyond Tukey's fences and
more than `robust.FAR_POINTS` from their cell's median (`robust.far_runs`) are drawn in red
with their seed number. The numbers are `analysis.robust`'s (`seed_values`, `iqm`,
`iqm_interval`), the same as the "Robust aggregates" table.
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


def _stem_part(dataset: str) -> str:
    """A dataset name as a file-name part (tu:NCI1 -> tu_NCI1)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", dataset)


def seed_strips(ok: pd.DataFrame, out: Path, study: str, rows: list[str]) -> list[fs.Figure]:
    """One figure per dataset: for each table column (test splits, then AUC) a bar panel of
    the IQM per row with its 95% interval, and a strip panel of every run beside it."""
    values = robust.seed_values(ok)
    figs = []
    for dset, d in values.groupby("dataset", sort=True):
        cols = [c for c in [*TEST_SPLITS, AUC_COLUMN] if c in set(d["column"])]
        present = [r for r in rows if r in set(d["row"])] + sorted(set(d["row"]) - set(rows))
        figs.append(_figure(d, str(dset), cols, present, out,
                            f"{study}__seeds__{_stem_part(str(dset))}"))
    return figs


def _figure(d: pd.DataFrame, dset: str, cols: list[str], rows: list[str], out: Path,
            stem: str) -> fs.Figure:
    import matplotlib.pyplot as plt

    height = 0.8 + 0.28 * len(rows)
    style, context = fs.theme()
    far: list[dict] = []
    with style, context:
        fig, axes = plt.subplots(len(cols), 2, figsize=(9.5, height * len(cols) + 0.4),
                                 squeeze=False, sharey=True, layout="constrained")
        for (bar_ax, strip_ax), col in zip(axes, cols):
            g = d[d["column"] == col]
            _bars(bar_ax, g, rows)
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
    named = "; ".join(f"{x['row']} {column_name(x['column'])} seed {x['seed']}: "
                      f"{x['value']:.1f}" for x in far[:8])
    more = f" and {len(far) - 8} more" if len(far) > 8 else ""
    caption = (f"{dataset_name(dset)}: left, each row's interquartile mean with its 95% "
               "bootstrap interval (no interval below "
               f"{robust.MIN_RUNS} runs); right, every run as a dot (rows jittered "
               "vertically), the row's IQM as a black tick; in red with its seed, a run beyond "
               f"Tukey's fences and more than {robust.FAR_POINTS:g} points from its row's "
               "median" + (f" ({named}{more})." if far else " (none here)."))
    return fs.Figure(stem, caption, png, svg, {"far": far})


def _bars(ax, g: pd.DataFrame, rows: list[str]) -> None:
    """Horizontal bars of the IQM per row, with the stratified bootstrap interval."""
    for i, row in enumerate(rows):
        r = g[g["row"] == row]
        if r.empty:
            continue
        v = r["value"].to_numpy(dtype=float)
        strata = [t["value"].to_numpy(float) for _, t in r.groupby("trial_id", sort=False)]
        if not (len(strata) > 1 and all(s.size > 1 for s in strata)):
            strata = [v]
        m = robust.iqm(v)
        lo, hi = robust.iqm_interval(*strata)
        ax.barh(i, m, height=0.6, color="#9ecae1", edgecolor="#3182bd", lw=0.8)
        if np.isfinite(lo):
            ax.errorbar(m, i, xerr=[[m - lo], [hi - m]], fmt="none", ecolor="black", capsize=3,
                        lw=1)
    ax.set_xlim(0, 100 * 1.02)


def _strip(ax, g: pd.DataFrame, rows: list[str]) -> list[dict]:
    """Every run of each row as a dot; far runs in red, labelled with their seed."""
    rng = np.random.default_rng(0)
    far = []
    for i, row in enumerate(rows):
        r = g[g["row"] == row]
        if r.empty:
            continue
        v = r["value"].to_numpy(dtype=float)
        y = i + rng.uniform(-JITTER, JITTER, v.size)
        is_far = r["far"].to_numpy(dtype=bool)
        ax.scatter(v[~is_far], y[~is_far], s=16, color="#3182bd", alpha=0.8, lw=0)
        if is_far.any():
            ax.scatter(v[is_far], y[is_far], s=30, color=FAR_COLOUR, lw=0, zorder=3)
            for x, yy, s in zip(v[is_far], y[is_far], r["seed"].to_numpy()[is_far]):
                ax.annotate(f"s{s}", (x, yy), xytext=(3, 3), textcoords="offset points",
                            fontsize=7, color=FAR_COLOUR)
                far.append({"row": row, "column": str(r["column"].iloc[0]), "seed": int(s),
                            "value": float(x)})
        m = robust.iqm(v)
        ax.plot([m, m], [i - 0.3, i + 0.3], color="black", lw=1.2)
    v = g["value"].to_numpy(dtype=float)
    if v.size:
        a, b = float(v.min()), float(v.max())
        pad = 0.06 * max(b - a, 2.0)
        ax.set_xlim(max(-1.0, a - pad), min(101.0, b + pad))
    return far
