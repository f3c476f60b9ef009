"""Per-epoch training curves from the study's curve files, median and interquartile band
over runs.

- `dynamics`: validation accuracy and attention AUC per epoch, grouped by init quality
  (tertiles of cos(p_init, p_opt)) or, without cosines, by variant (paper Figures 3-4).
- `sdc_dynamics`: the FTPT / FFPT / FTPF / FFPF fractions of training mosaics per epoch
  of the selective-dependence runs, one line per normaliser (Pandey et al.).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis import figure_style, stats
from analysis.figure_style import (
    Figure,
    epoch_axis,
    most_frequent,
    not_drawn,
    palette,
    panel_grid,
    percent_axis,
    side_legend,
    theme,
)
from analysis.formatting import dataset_name


def dynamics(ok: pd.DataFrame, curves: pd.DataFrame, out: Path, study: str,
             variants: list[str]) -> list[Figure]:
    """Val accuracy and AUC per epoch: median and IQR band, by init quality or variant.

    By init quality only with at least MIN_PAIRED_SEEDS runs per tertile (the tables'
    threshold); attention runs whose cosine is undefined (a GNN scorer has no single
    projection p) are then left out, and the caption names them, as it names runs
    without curves. The legend gives each group's number of runs."""
    if curves.empty or "epoch" not in curves.columns:
        return []
    runs = ok.drop_duplicates(["trial_id", "seed"])
    cols = ["trial_id", "seed", "dataset", "variant"] + [
        x for x in ("cos_p_init", "pool_layers") if x in runs.columns]
    c = curves.merge(runs[cols], on=["trial_id", "seed"], how="inner")
    metrics = [m for m in ("val_accuracy", "val_auc") if m in c.columns
               and np.isfinite(c[m].to_numpy(dtype=float)).any()]
    if c.empty or not metrics:
        return []
    notes, left = [], ""
    have = c[["trial_id", "seed"]].drop_duplicates()
    if len(have) < len(runs):
        notes.append(f"{len(runs) - len(have)} of {len(runs)} runs have no per-epoch curves")
    cos = runs["cos_p_init"].to_numpy(dtype=float) if "cos_p_init" in runs.columns \
        else np.array([])
    by_init = np.isfinite(cos).sum() >= 3 * stats.MIN_PAIRED_SEEDS \
        and np.ptp(cos[np.isfinite(cos)]) > 0
    if by_init:
        q1, q2 = np.nanquantile(cos, [1 / 3, 2 / 3])
        labels = [f"cos ≤ {q1:.2f}", f"{q1:.2f} < cos ≤ {q2:.2f}", f"cos > {q2:.2f}"]
        cv = c["cos_p_init"].to_numpy(dtype=float)
        grp = np.where(cv <= q1, labels[0], np.where(cv <= q2, labels[1], labels[2]))
        glob = (c["pool_layers"].astype(str) == "").to_numpy() if "pool_layers" in c.columns \
            else np.zeros(len(c), bool)
        undefined = ~np.isfinite(cv) & ~glob
        if undefined.any():
            notes.append("attention runs whose cos(p_init, p_opt) is undefined (a GNN scorer "
                         "has no single projection p): " + _runs_named(c[undefined]))
        c = c.assign(group=np.where(np.isfinite(cv), grp, "no attention"))[~undefined]
        order = [g for g in [*labels, "no attention"] if g in set(c["group"].unique())]
        title = "init quality"
    else:
        c = c.assign(group=c["variant"])
        order = most_frequent(c.drop_duplicates(["trial_id", "seed"]), "group", variants)
        left = not_drawn(c["group"].unique(), order)
        c = c[c["group"].isin(order)]
        title = "variant"
    n_runs = figure_style.run_counts(c, "group")
    pal = palette(order)
    datasets = sorted(c["dataset"].unique())
    names = {"val_accuracy": "val accuracy", "val_auc": "val attention AUC"}
    q = c.groupby(["dataset", "group", "epoch"])[metrics].quantile([0.25, 0.5, 0.75])
    present = set(zip(q.index.get_level_values(0), q.index.get_level_values(1)))
    style, ctx = theme()
    with style, ctx:
        fig, axes = panel_grid(len(datasets), len(metrics), w=4.2, sharey=False)
        handles = {}
        for i, ds_ in enumerate(datasets):
            for j, m in enumerate(metrics):
                ax = axes[i, j]
                for k in order:
                    if (ds_, k) not in present:
                        continue
                    qk = q.loc[(ds_, k), m].unstack()
                    qk = qk[np.isfinite(qk[0.5].to_numpy(dtype=float))]
                    if qk.empty:
                        continue
                    (h,) = ax.plot(qk.index, qk[0.5], color=pal[k])
                    ax.fill_between(qk.index, qk[0.25], qk[0.75], color=pal[k], alpha=0.2, lw=0)
                    handles.setdefault(f"{k} ({n_runs.get(k, 'n = 0 runs')})", h)
                ax.set_title(f"{dataset_name(ds_)}: {names[m]}")
                ax.set_xlabel("epoch")
                epoch_axis(ax.xaxis)
                percent_axis(ax.yaxis)
        side_legend(fig, handles, title)
        png, svg = figure_style.save(fig, out, f"{study}__dynamics")
    caption = ("Training dynamics: validation accuracy and attention AUC per epoch, median "
               f"(line) and interquartile band over runs ({figure_style.RUNS_NOTE}), by {title}"
               + (" (tertiles of cos(p_init, p_opt); paper Figures 3-4)." if by_init else "."))
    if not by_init and np.isfinite(cos).any():
        caption += (f" Not by init quality: {int(np.isfinite(cos).sum())} runs with a cosine, "
                    f"tertiles need ≥ {3 * stats.MIN_PAIRED_SEEDS} ({stats.MIN_PAIRED_SEEDS} "
                    f"per group).")
    if notes:
        caption += " Left out: " + "; ".join(notes) + "."
    caption += left
    return [Figure("dynamics", caption, png, svg, {"grouped_by": title})]


def _runs_named(c: pd.DataFrame) -> str:
    """'12 runs on TRIANGLES (GIN unsup, ChebyGIN sup)', per dataset."""
    runs = c.drop_duplicates(["trial_id", "seed"])
    return ", ".join(f"{len(g)} runs on {dataset_name(str(d))} ("
                     + ", ".join(sorted(map(str, g["variant"].unique()))) + ")"
                     for d, g in runs.groupby("dataset", sort=True))


SDC_FRACTIONS = (("ftpt", "fraction of mosaics"), ("ffpt", ""), ("ftpf", ""), ("ffpf", ""))


def sdc_dynamics(ok: pd.DataFrame, curves: pd.DataFrame, out: Path, study: str,
                 variants: list[str]) -> list[Figure]:
    """FTPT / FFPT / FTPF / FFPF fractions of training mosaics per epoch (Pandey et al.):
    median and interquartile band over runs, one line per normaliser."""
    metrics = [(m, t) for m, t in SDC_FRACTIONS if m in curves.columns]
    if curves.empty or not metrics:
        return []
    runs = ok.drop_duplicates(["trial_id", "seed"])[["trial_id", "seed", "dataset", "variant"]]
    c = curves.merge(runs, on=["trial_id", "seed"], how="inner")
    if c.empty:
        return []
    hue = most_frequent(c.drop_duplicates(["trial_id", "seed"]), "variant", variants)
    left = not_drawn(c["variant"].unique(), hue)
    c = c[c["variant"].isin(hue)]
    names = [m for m, _ in metrics]
    q = c.groupby(["dataset", "variant", "epoch"])[names].quantile([0.25, 0.5, 0.75])
    present = set(zip(q.index.get_level_values(0), q.index.get_level_values(1)))
    datasets = sorted(c["dataset"].unique())
    pal = palette(hue)
    style, ctx = theme()
    with style, ctx:
        fig, axes = panel_grid(len(datasets), len(metrics), w=3.4)
        handles = {}
        for i, ds_ in enumerate(datasets):
            for j, (m, title) in enumerate(metrics):
                ax = axes[i, j]
                for v in hue:
                    if (ds_, v) not in present:
                        continue
                    qk = q.loc[(ds_, v), m].unstack()
                    (h,) = ax.plot(qk.index, qk[0.5], color=pal[v])
                    ax.fill_between(qk.index, qk[0.25], qk[0.75], color=pal[v], alpha=0.2, lw=0)
                    handles.setdefault(v, h)
                ax.set_title(f"{ds_}: {m.upper()}", fontsize=9)
                ax.set_ylabel(title if j == 0 else "", fontsize=8)
                ax.set_xlabel("epoch")
                epoch_axis(ax.xaxis)
                percent_axis(ax.yaxis)
        side_legend(fig, handles, "normalizer")
        png, svg = figure_style.save(fig, out, f"{study}__dynamics")
    return [Figure("sdc_dynamics", "Fractions of training mosaics per epoch: FTPT (focus on the "
                   "true foreground and prediction true), FFPT, FTPF, FFPF; median and "
                   "interquartile band over runs (Pandey et al.)." + left, png, svg)]
