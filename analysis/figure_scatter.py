"""Scatter figures, one point per run: accuracy vs attention AUC, and AUC and accuracy vs
cos(p_init, p_opt).

- `acc_vs_auc`: accuracy vs attention AUC per run and test split, coloured by the axis the
  study varies (marker shape = variant) or by variant, with the least-squares fit
  acc = a exp(b AUC) + c per panel where the data can carry one (the paper: "accuracy
  grows exponentially with attention correctness"); the fits and their reasons go into
  the figure's `info` for the findings and `summary.json`.
- `init_cos`: attention AUC and accuracy vs cos(p_init, p_opt) with least-squares lines
  and Pearson r (paper Figure 2).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from analysis import figure_style, stats
from analysis.figure_style import (
    MARKERS,
    MAX_HUE,
    RASTER_POINTS,
    Figure,
    hide_unused,
    marker_size,
    most_frequent,
    palette,
    panel_grid,
    percent_axis,
    side_legend,
    splits_of,
    subset,
    theme,
)
from analysis.formatting import TEST_SPLITS, column_name, dataset_name
from analysis.variants import axis_value_text


def _hue_labels(d: pd.DataFrame, hue: str | None, variants: list[str]) -> tuple[pd.Series, list[str]]:
    """Colour label per row ('normalizer=softmax', or the variant) and their order."""
    if hue is None or hue not in d.columns:
        return d["variant"], most_frequent(d, "variant", variants)
    vals = sorted(d[hue].unique().tolist(), key=lambda v: (isinstance(v, str), v))
    names = {v: f"{hue}={axis_value_text(v)}" for v in vals}
    return d[hue].map(names), [names[v] for v in vals][:MAX_HUE]


def acc_vs_auc(ok: pd.DataFrame, out: Path, study: str, variants: list[str],
               hue: str | None = None) -> list[Figure]:
    """Accuracy vs attention AUC per run and split, coloured by the axis `hue` (marker
    shape = variant) or by variant; an exponential fit per panel where the data allows."""
    if "attn_auc_l0" not in ok.columns or "accuracy" not in ok.columns:
        return []
    cols = ["dataset", "split", "variant", "seed", "attn_auc_l0", "accuracy"]
    d = subset(ok, cols + ([hue] if hue in ok.columns else []), TEST_SPLITS)
    d = d[np.isfinite(d["attn_auc_l0"].to_numpy(dtype=float))
          & np.isfinite(d["accuracy"].to_numpy(dtype=float))]
    if len(d) < 3:
        return []
    label, colours = _hue_labels(d, hue, variants)
    d = d.assign(_c=label.to_numpy(dtype=object))
    by_axis = hue is not None and hue in d.columns
    shapes = most_frequent(d, "variant", variants) if by_axis else []
    marker = {v: MARKERS[i] for i, v in enumerate(shapes)} if len(shapes) <= len(MARKERS) else {}
    datasets = sorted(d["dataset"].unique())
    split_of = splits_of(d, datasets)
    pal = palette(colours)
    fits: dict[str, dict] = {}
    style, ctx = theme()
    with style, ctx:
        fig, axes = panel_grid(len(datasets), max(map(len, split_of.values())), h=3.3)
        hide_unused(axes, [len(split_of[x]) for x in datasets])
        for i, ds_ in enumerate(datasets):
            for j, sp in enumerate(split_of[ds_]):
                ax = axes[i, j]
                g = d[(d["dataset"] == ds_) & (d["split"] == sp)]
                for (c, v), gv in g.groupby(["_c", "variant"], sort=False):
                    if c in pal:
                        ax.scatter(gv["attn_auc_l0"], gv["accuracy"], s=marker_size(len(g)),
                                   alpha=0.7, color=pal[c], marker=marker.get(v, "o"),
                                   edgecolor="white", lw=0.4, rasterized=len(g) > RASTER_POINTS)
                fits[f"{ds_}/{sp}"] = _fit_panel(ax, g)
                ax.set_title(f"{dataset_name(ds_)} {column_name(sp)}")
                ax.set_xlabel("attention AUC")
                ax.set_ylabel("accuracy" if j == 0 else "")
                percent_axis(ax.xaxis, nbins=4)
                percent_axis(ax.yaxis)
        handles = {c: Line2D([], [], ls="", marker="o", ms=7, color=pal[c]) for c in colours}
        if marker:
            handles.update({v: Line2D([], [], ls="", marker=marker[v], ms=7, color="0.35")
                            for v in shapes})
        title = (f"colour: {hue}" + (", marker: variant" if marker else "")) if by_axis \
            else "variant"
        side_legend(fig, handles, title)
        fig.suptitle("Accuracy vs attention AUC: acc = a·exp(b·AUC) + c", y=1.02)
        png, svg = figure_style.save(fig, out, f"{study}__acc_vs_auc")
    by = f"colour = {hue}, marker = variant" if by_axis else "colour = variant"
    return [Figure("acc_vs_auc", f"Accuracy vs attention AUC (first pooling layer, same split), "
                   f"one point per run ({by}); black: least-squares fit of acc = a·exp(b·AUC) + c "
                   f"(fractions) with R² and Pearson r, drawn only with ≥ {stats.MIN_FIT_POINTS} "
                   f"points spanning ≥ {100 * stats.MIN_FIT_SPAN:.0f} AUC points.", png, svg,
                   {"fits": fits, "hue": hue if by_axis else "variant"})]


def _fit_panel(ax, g: pd.DataFrame) -> dict:
    """Fit and annotate one panel; the numbers (and why there is no fit) for the report."""
    r, p, n = stats.pearson(g["attn_auc_l0"], g["accuracy"])
    reason = stats.exp_fit_support(g["attn_auc_l0"])
    fit = stats.exp_fit(g["attn_auc_l0"], g["accuracy"]) if not reason else stats.ExpFit(
        math.nan, math.nan, math.nan, math.nan, n, "none")
    if fit.method == "none" and not reason:
        reason = "the fit failed"
    if not reason:
        xs = np.linspace(g["attn_auc_l0"].min(), g["attn_auc_l0"].max(), 100)
        ax.plot(xs, fit(xs), color="black", lw=1.5)
        txt = (f"a={fit.a:.3g}, b={fit.b:.3g}, c={fit.c:.3g}\n"
               f"R²={fit.r2:.2f}, r={r:.2f}, n={fit.n}")
    else:
        txt = f"n={len(g)}: no fit ({reason})"
    ax.text(0.03, 0.97, txt, transform=ax.transAxes, va="top", fontsize=7,
            bbox=dict(boxstyle="round", fc="white", alpha=0.8, lw=0))
    return {"a": fit.a, "b": fit.b, "c": fit.c, "r2": fit.r2, "n": n, "method": fit.method,
            "reason": reason, "pearson_r": r, "pearson_p": p,
            "n_seeds": int(g["seed"].nunique())}


def init_cos(ok: pd.DataFrame, out: Path, study: str) -> list[Figure]:
    """Attention AUC and accuracy vs cos(p_init, p_opt) (paper Figure 2)."""
    need = {"cos_p_init", "attn_auc_l0", "accuracy"}
    if not need <= set(ok.columns):
        return []
    d = subset(ok, ["trial_id", "seed", "dataset", "split", *need],
               ["test_orig", "test_large", "test_largec"])
    d = d[np.isfinite(d["cos_p_init"].to_numpy(dtype=float))]
    if d[["trial_id", "seed"]].drop_duplicates().shape[0] < 3:
        return []
    datasets = sorted(d["dataset"].unique())
    splits = [s for s in ("test_orig", "test_large", "test_largec") if s in set(d["split"].unique())]
    pal = palette(splits)
    info: dict[str, dict] = {}
    style, ctx = theme()
    with style, ctx:
        fig, axes = panel_grid(len(datasets), 2, sharey=False)
        for i, ds_ in enumerate(datasets):
            g = d[d["dataset"] == ds_]
            a0 = g[g["split"] == splits[0]]
            raster = len(a0) > RASTER_POINTS
            ax = axes[i, 0]
            ax.scatter(a0["cos_p_init"], a0["attn_auc_l0"], s=marker_size(len(a0)), alpha=0.7,
                       color="C0", edgecolor="white", lw=0.4, rasterized=raster)
            r, p, n = stats.pearson(a0["cos_p_init"], a0["attn_auc_l0"])
            info[f"{ds_}/auc"] = {"pearson_r": r, "pearson_p": p, "n": n,
                                  "n_seeds": int(a0["seed"].nunique()), "split": splits[0]}
            _trend(ax, a0["cos_p_init"], a0["attn_auc_l0"], "C0")
            ax.set_title(f"{dataset_name(ds_)}: AUC ({column_name(splits[0])}), r = {r:.2f}")
            ax.set_xlabel("cos(p_init, p_opt)")
            ax.set_ylabel("attention AUC")
            ax = axes[i, 1]
            here = set(g["split"].unique())
            for sp in [x for x in splits if x in here]:
                gs = g[g["split"] == sp]
                r, p, n = stats.pearson(gs["cos_p_init"], gs["accuracy"])
                info[f"{ds_}/{sp}"] = {"pearson_r": r, "pearson_p": p, "n": n,
                                       "n_seeds": int(gs["seed"].nunique())}
                ax.scatter(gs["cos_p_init"], gs["accuracy"], s=marker_size(len(gs)), alpha=0.7,
                           color=pal[sp], edgecolor="white", lw=0.4,
                           label=f"{column_name(sp)} (r = {r:.2f})", rasterized=raster)
                _trend(ax, gs["cos_p_init"], gs["accuracy"], pal[sp])
            ax.set_title(f"{dataset_name(ds_)}: accuracy")
            ax.set_xlabel("cos(p_init, p_opt)")
            ax.set_ylabel("accuracy")
            ax.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
            for a in axes[i]:
                percent_axis(a.yaxis)
        png, svg = figure_style.save(fig, out, f"{study}__init_cos")
    return [Figure("init_cos", "Attention AUC (left) and accuracy (right) vs the cosine of the "
                   "initial attention projection with the optimal one, one point per run, "
                   "least-squares line and Pearson r (paper Figure 2).", png, svg, info)]


def _trend(ax, x: pd.Series, y: pd.Series, color) -> None:
    xa, ya = x.to_numpy(dtype=float), y.to_numpy(dtype=float)
    keep = np.isfinite(xa) & np.isfinite(ya)
    if keep.sum() >= 3 and np.ptp(xa[keep]) > 0:
        k, c = np.polyfit(xa[keep], ya[keep], 1)
        xs = np.linspace(xa[keep].min(), xa[keep].max(), 50)
        ax.plot(xs, k * xs + c, color=color, lw=1.2)
