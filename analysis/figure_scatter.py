"""Scatter figures, one point per run: accuracy vs attention AUC, and AUC and accuracy vs
cos(p_init, p_opt).

- `acc_vs_auc`: accuracy vs attention AUC per run and test split, coloured by the axis the
  study varies (marker shape = variant) or by variant, with the least-squares fit
  acc = a exp(b AUC) + c per panel where the data can carry one (the paper: "accuracy
  grows exponentially with attention correctness"); the fits and their reasons go into
  the figure's `info` for the findings and `summary.json`.
- `init_cos`: attention AUC and accuracy vs cos(p_init, p_opt) with least-squares lines
  and Pearson r (paper Figure 2).

Every statistic drawn follows the tables' rules: r only with `stats.MIN_CORRELATION_POINTS`
runs from `stats.MIN_PAIRED_SEEDS` seeds, always with its 95% CI and n; a fit only where
`fit_support` finds the data can carry one, with its growth rate's 95% CI; every panel
without them, and every run left out, named in the caption.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from analysis import figure_style, stats
from analysis.figure_style import (
    LEVEL,
    MARKERS,
    RASTER_POINTS,
    Figure,
    correlation,
    correlation_text,
    hide_unused,
    marker_size,
    most_frequent,
    not_drawn,
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
    label = d[hue].map(names)
    return label, most_frequent(pd.DataFrame({"c": label}), "c", [names[v] for v in vals])


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
    left = not_drawn(d["_c"].unique(), colours, "colour groups")
    d = d[d["_c"].isin(colours)]  # what is not drawn feeds no r and no fit either
    by_axis = hue is not None and hue in d.columns
    shapes = sorted(d["variant"].unique(), key=lambda v: variants.index(v) if v in variants
                    else len(variants)) if by_axis else []
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
        fitted = [k for k, f in fits.items() if not f["reason"]]
        fig.suptitle("Accuracy vs attention AUC" + (": acc = a·exp(b·AUC) + c" if fitted else ""),
                     y=1.02)
        png, svg = figure_style.save(fig, out, f"{study}__acc_vs_auc")
    by = f"colour = {hue}, marker = variant" if by_axis else "colour = variant"
    return [Figure("acc_vs_auc", f"Accuracy vs attention AUC (first pooling layer, same split), "
                   f"one point per run ({by}). In each panel: Pearson r with its 95% CI "
                   f"(Fisher z) and n, shown only with ≥ {stats.MIN_CORRELATION_POINTS} runs "
                   f"from ≥ {stats.MIN_PAIRED_SEEDS} seeds; black: least-squares fit of "
                   f"acc = a·exp(b·AUC) + c (fractions) with its growth rate b and b's 95% CI, "
                   f"drawn only with ≥ {stats.MIN_FIT_POINTS} points from ≥ "
                   f"{stats.MIN_PAIRED_SEEDS} seeds, ≥ {stats.MIN_FIT_DISTINCT} distinct AUC "
                   f"values spanning ≥ {100 * stats.MIN_FIT_SPAN:.0f} AUC points, ≥ "
                   f"{stats.MIN_FIT_DISTINCT} distinct accuracies and at most half the runs at "
                   f"one accuracy. " + _missing(fits, "r_reason", "No r") + " "
                   + _missing(fits, "reason", "No fit") + left, png, svg,
                   {"fits": fits, "hue": hue if by_axis else "variant"})]


def _missing(info: dict[str, dict], key: str, what: str, suffix: str = "") -> str:
    """'No fit on COLORS ORIG, TRIANGLES ORIG: 2 seeds (...).' for the panels with a reason
    under `key` (grouped by reason), "" when every panel has the statistic."""
    by_reason: dict[str, list[str]] = {}
    for k, v in info.items():
        if v.get(key):
            ds_, sp = k.split("/")
            where = "AUC" if sp == "auc" else column_name(sp) + suffix
            by_reason.setdefault(str(v[key]), []).append(f"{dataset_name(ds_)} {where}")
    return " ".join(f"{what} on {', '.join(panels)}: {reason}."
                    for reason, panels in by_reason.items())


def fit_support(g: pd.DataFrame) -> str:
    """Why a panel's runs cannot carry the exponential fit, or "" when they can: the AUC
    values pass `stats.exp_fit_support`, the runs come from at least MIN_PAIRED_SEEDS seeds
    (the tables' threshold for any statistic), and the accuracies take at least
    MIN_FIT_DISTINCT distinct values with no single value held by more than half the runs
    (a curve through a pile of zeros fits the pile, not a trend)."""
    x, y = g["attn_auc_l0"].to_numpy(dtype=float), g["accuracy"].to_numpy(dtype=float)
    reason = stats.exp_fit_support(x)
    if reason:
        return reason
    seeds = int(g["seed"].nunique())
    if seeds < stats.MIN_PAIRED_SEEDS:
        return f"{seeds} seeds (a fit needs ≥ {stats.MIN_PAIRED_SEEDS}, as the tables' statistics)"
    vals, counts = np.unique(y[np.isfinite(y)], return_counts=True)
    if vals.size < stats.MIN_FIT_DISTINCT:
        return f"{vals.size} distinct accuracies (a fit needs ≥ {stats.MIN_FIT_DISTINCT})"
    top = int(counts.argmax())
    if 2 * counts[top] > counts.sum():
        return (f"{counts[top]} of {counts.sum()} runs at accuracy {100 * vals[top]:.1f}% "
                f"(a fit needs most runs off any single value)")
    return ""


def rate_interval(fit: stats.ExpFit, x: object, y: object) -> tuple[float, float]:
    """95% interval of the growth rate b of a fitted acc = a exp(b AUC) + c (Wald, from the
    least-squares covariance, Student-t with n - 3 degrees of freedom); NaN when the data
    do not determine b."""
    from scipy import optimize
    from scipy import stats as sps

    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(xa) & np.isfinite(ya)
    xa, ya = xa[keep], ya[keep]
    x0 = float(xa.mean())
    xc = xa - x0

    def f(t, a, b, c):
        return a * np.exp(b * t) + c

    def jac(t, a, b, c):
        e = np.exp(b * t)
        return np.column_stack([e, a * t * e, np.ones_like(t)])

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (_, b, _), cov = optimize.curve_fit(f, xc, ya, p0=(fit.a * math.exp(fit.b * x0),
                                                               fit.b, fit.c), jac=jac,
                                                maxfev=2_000)
    except (RuntimeError, ValueError, FloatingPointError, OverflowError):
        return math.nan, math.nan
    se = float(np.sqrt(cov[1, 1])) if np.isfinite(cov[1, 1]) and cov[1, 1] >= 0 else math.nan
    if not np.isfinite(se) or xa.size <= 3:
        return math.nan, math.nan
    t = float(sps.t.ppf(0.5 + LEVEL / 2, xa.size - 3))
    return float(b - t * se), float(b + t * se)


def _fit_panel(ax, g: pd.DataFrame) -> dict:
    """Fit and annotate one panel; the numbers (and why there is no fit or no r) for the
    report. Drawn: r with its 95% CI and n (only with enough runs and seeds) and, where
    the data carry it, the fitted curve with its growth rate b and b's 95% CI."""
    corr = correlation(g["attn_auc_l0"], g["accuracy"], int(g["seed"].nunique()))
    n = corr["n"]
    reason = fit_support(g)
    fit = stats.exp_fit(g["attn_auc_l0"], g["accuracy"]) if not reason else stats.ExpFit(
        math.nan, math.nan, math.nan, math.nan, n, "none")
    if fit.method == "none" and not reason:
        reason = "the fit failed"
    b_lo = b_hi = math.nan
    if not reason:
        b_lo, b_hi = rate_interval(fit, g["attn_auc_l0"], g["accuracy"])
        if not (np.isfinite(b_lo) and np.isfinite(b_hi)):
            reason = "the data do not determine the growth rate b (no finite 95% CI)"
            fit = stats.ExpFit(math.nan, math.nan, math.nan, math.nan, n, "none")
    lines = [correlation_text(corr)]
    if not reason:
        xs = np.linspace(g["attn_auc_l0"].min(), g["attn_auc_l0"].max(), 100)
        ax.plot(xs, fit(xs), color="black", lw=1.5)
        lines.append(f"fit: b = {fit.b:.3g} ({100 * LEVEL:.0f}% CI {b_lo:.3g} to {b_hi:.3g}), "
                     f"n = {fit.n}")
    else:
        lines.append(f"no fit: {reason}")
    ax.text(0.03, 0.97, "\n".join(lines), transform=ax.transAxes, va="top", fontsize=6.5,
            bbox=dict(boxstyle="round", fc="white", alpha=0.8, lw=0))
    return {"a": fit.a, "b": fit.b, "c": fit.c, "r2": fit.r2, "n": n, "method": fit.method,
            "reason": reason, "b_lo": b_lo, "b_hi": b_hi,
            **{k: corr[k] for k in ("pearson_r", "pearson_p", "pearson_lo", "pearson_hi",
                                    "n_seeds", "r_shown", "r_reason")}}


def init_cos(ok: pd.DataFrame, out: Path, study: str) -> list[Figure]:
    """Attention AUC and accuracy vs cos(p_init, p_opt) (paper Figure 2). Pearson r (with
    its 95% CI and n) and least-squares lines only where the runs are enough for a
    correlation (the findings' thresholds); the caption names the variants pooled and the
    runs left out (undefined cosine)."""
    need = {"cos_p_init", "attn_auc_l0", "accuracy"}
    if not need <= set(ok.columns):
        return []
    extra = [c for c in ("variant", "pool_layers") if c in ok.columns]
    d = subset(ok, ["trial_id", "seed", "dataset", "split", *extra, *need],
               ["test_orig", "test_large", "test_largec"])
    cos_ok = np.isfinite(d["cos_p_init"].to_numpy(dtype=float))
    left_out = d[~cos_ok]
    d = d[cos_ok]
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
            c = correlation(a0["cos_p_init"], a0["attn_auc_l0"], int(a0["seed"].nunique()))
            info[f"{ds_}/auc"] = {**c, "split": splits[0]}
            if c["r_shown"]:
                _trend(ax, a0["cos_p_init"], a0["attn_auc_l0"], "C0")
            ax.text(0.03, 0.97, correlation_text(c), transform=ax.transAxes, va="top",
                    fontsize=6.5, bbox=dict(boxstyle="round", fc="white", alpha=0.8, lw=0))
            ax.set_title(f"{dataset_name(ds_)}: AUC ({column_name(splits[0])})")
            ax.set_xlabel("cos(p_init, p_opt)")
            ax.set_ylabel("attention AUC")
            ax = axes[i, 1]
            here = set(g["split"].unique())
            for sp in [x for x in splits if x in here]:
                gs = g[g["split"] == sp]
                c = correlation(gs["cos_p_init"], gs["accuracy"], int(gs["seed"].nunique()))
                info[f"{ds_}/{sp}"] = c
                label = f"{column_name(sp)}: " + (correlation_text(c) if c["r_shown"]
                                                  else f"n = {c['n']} runs, {c['n_seeds']} seeds")
                ax.scatter(gs["cos_p_init"], gs["accuracy"], s=marker_size(len(gs)), alpha=0.7,
                           color=pal[sp], edgecolor="white", lw=0.4, label=label,
                           rasterized=raster)
                if c["r_shown"]:
                    _trend(ax, gs["cos_p_init"], gs["accuracy"], pal[sp])
            ax.set_title(f"{dataset_name(ds_)}: accuracy")
            ax.set_xlabel("cos(p_init, p_opt)")
            ax.set_ylabel("accuracy")
            ax.legend(fontsize=6.5, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2),
                      ncol=1)
            for a in axes[i]:
                percent_axis(a.yaxis)
        png, svg = figure_style.save(fig, out, f"{study}__init_cos")
    pooled = _variants_of(d)
    caption = ("Attention AUC (left) and accuracy (right) vs the cosine of the initial attention "
               "projection with the optimal one, one point per run"
               + (f", pooling the variants {pooled}" if pooled else "") + " (paper Figure 2). "
               f"Pearson r with its 95% CI (Fisher z) and n, and a least-squares line, only "
               f"with ≥ {stats.MIN_CORRELATION_POINTS} runs from ≥ {stats.MIN_PAIRED_SEEDS} "
               f"seeds. " + _missing(info, "r_reason", "No r", " accuracy"))
    gone = _left_out(left_out)
    if gone:
        caption += (f" Left out (cos(p_init, p_opt) undefined: no attention, or a GNN scorer "
                    f"without a single projection p): {gone}.")
    return [Figure("init_cos", caption.strip(), png, svg, info)]


def _variants_of(d: pd.DataFrame) -> str:
    """The variants among the rows, comma-separated ("" without a variant column)."""
    if "variant" not in d.columns:
        return ""
    return ", ".join(sorted(map(str, d["variant"].unique())))


def _left_out(d: pd.DataFrame) -> str:
    """'12 runs on TRIANGLES (GIN unsup, ChebyGIN sup)' for the runs of `d`, per dataset."""
    if d.empty:
        return ""
    runs = d.drop_duplicates(["trial_id", "seed"])
    parts = []
    for ds_, g in runs.groupby("dataset", sort=True):
        which = _variants_of(g)
        parts.append(f"{len(g)} runs on {dataset_name(str(ds_))}" + (f" ({which})" if which else ""))
    return "; ".join(parts)


def _trend(ax, x: pd.Series, y: pd.Series, color) -> None:
    xa, ya = x.to_numpy(dtype=float), y.to_numpy(dtype=float)
    keep = np.isfinite(xa) & np.isfinite(ya)
    if keep.sum() >= 3 and np.ptp(xa[keep]) > 0:
        k, c = np.polyfit(xa[keep], ya[keep], 1)
        xs = np.linspace(xa[keep].min(), xa[keep].max(), 50)
        ax.plot(xs, k * xs + c, color=color, lw=1.2)
