"""Figures of a study (seaborn style, Agg backend), each saved as PNG and SVG.

- `acc_vs_auc`: accuracy vs attention AUC per run, coloured by the axis the study
  varies (else by variant), with the exponential fit acc = a exp(b AUC) + c per panel
  where the data can carry one (the paper: "accuracy grows exponentially with
  attention correctness").
- `init_cos`: attention AUC and accuracy vs cos(p_init, p_opt) (paper Figure 2).
- `dynamics`: validation accuracy and AUC per epoch, median and interquartile band
  over runs, by init quality (tertiles of cos(p_init, p_opt)) or by variant
  (paper Figures 3-4).
- `ratio_kept`: ratio of nodes kept per pooling layer vs threshold.
- `acc_by_size`: test accuracy vs graph size (N bins), TEST-ORIG vs TEST-LARGE.
- `gt_mass`: fraction of graphs whose ground-truth nodes get attention mass >= t
  (an SDC-style curve).

Every function returns the `Figure`s it wrote, or [] when the study has no data for it.
Percentage axes label their ticks with as many decimals as keep the labels exact and
distinct (`PercentTicks`); epoch axes have integer ticks.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import Formatter, MaxNLocator  # noqa: E402

from analysis import stats  # noqa: E402
from analysis.load import layer_columns  # noqa: E402
from analysis.tables import TEST_SPLITS, column_name, dataset_name  # noqa: E402
from analysis.variants import axis_value_text  # noqa: E402

DPI = 110
MAX_HUE = 10  # more groups than this: the most frequent ones are drawn
RASTER_POINTS = 2000  # scatter layers with more points are rasterised in the SVG
MARKER_SIZE = 40  # scatter marker area (pt^2) of a panel with at most DENSE_POINTS points
DENSE_POINTS = 1000  # ... a denser panel draws markers of area 12
MARKERS = ("o", "^", "s", "D", "v", "P", "X", "*")  # marker per variant when colour is an axis


class PercentTicks(Formatter):
    """Fractions as percentages, with the fewest decimals (0-6) that print every tick
    exactly and distinctly: 1%, 2%, ... or 0.2%, 0.4%, ..., never 1%, 1%, 0%."""

    def __init__(self) -> None:
        self.decimals = 0

    def set_locs(self, locs) -> None:
        super().set_locs(locs)
        pct = [100 * float(x) for x in locs]
        for d in range(7):
            labels = [f"{v:.{d}f}" for v in pct]
            exact = all(abs(float(t) - v) <= 1e-6 * max(1.0, abs(v)) for t, v in zip(labels, pct))
            if exact and len(set(labels)) == len(labels):
                break
        self.decimals = d

    def __call__(self, x: float, pos: int | None = None) -> str:
        v = 100 * float(x)
        return f"{0.0 if abs(v) < 1e-9 else v:.{self.decimals}f}%"


def percent_axis(axis, nbins: int | str = "auto") -> None:
    """Label a matplotlib axis holding fractions in percent (`PercentTicks`), ticks at
    1, 2 or 5 times a power of ten (no 2.5 steps, which need one more decimal)."""
    axis.set_major_locator(MaxNLocator(nbins=nbins, steps=[1, 2, 5, 10]))
    axis.set_major_formatter(PercentTicks())


def epoch_axis(axis) -> None:
    """Integer ticks only: epochs are counted, 1, 2, 3, never 1.5."""
    axis.set_major_locator(MaxNLocator(integer=True))


@dataclass
class Figure:
    """A written figure: file stem, caption, PNG and SVG paths, and numbers it computed."""

    name: str
    caption: str
    png: Path
    svg: Path
    info: dict = field(default_factory=dict)


def _style():
    return sns.axes_style("whitegrid"), sns.plotting_context("paper", font_scale=1.1)


def _save(fig: plt.Figure, out: Path, stem: str) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    png, svg = out / f"{stem}.png", out / f"{stem}.svg"
    fig.savefig(png, dpi=DPI, bbox_inches="tight")
    fig.savefig(svg, bbox_inches="tight")  # each save draws twice (layout, then output)
    plt.close(fig)
    return png, svg


def _palette(keys: list[str]) -> dict[str, tuple]:
    return dict(zip(keys, sns.color_palette("tab10" if len(keys) <= 10 else "husl", len(keys))))


def _top(df: pd.DataFrame, col: str, order: list[str] | None = None) -> list[str]:
    counts = df[col].value_counts()
    keep = set(counts.index[:MAX_HUE])
    base = order if order is not None else sorted(counts.index)
    return [k for k in base if k in keep]


def _grid(n_rows: int, n_cols: int, w: float = 3.6, h: float = 3.0, sharey: bool = True):
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(w * n_cols + 1.5, h * n_rows),
                             squeeze=False, sharey=sharey)
    fig.subplots_adjust(hspace=0.55, wspace=0.25)
    return fig, axes


def _splits_of(df: pd.DataFrame, datasets: list[str]) -> dict[str, list[str]]:
    """Dataset -> its test splits present, in canonical order."""
    pairs = df[["dataset", "split"]].drop_duplicates()
    have = set(zip(pairs["dataset"].tolist(), pairs["split"].tolist()))
    return {d: [s for s in TEST_SPLITS if (d, s) in have] for d in datasets}


def _hide_unused(axes, per_row: list[int]) -> None:
    for i, n in enumerate(per_row):
        for ax in axes[i, n:]:
            ax.set_visible(False)


def _legend(fig: plt.Figure, handles: dict, title: str) -> None:
    if handles:
        fig.legend(list(handles.values()), list(handles.keys()), title=title,
                   loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)


def _band(ax, g: pd.DataFrame, x: str, y: str, color, label: str | None = None,
          ls: str = "-", marker: str | None = None):
    """Median line and interquartile band of y per x."""
    if g.empty:
        return None
    q = g.groupby(x)[y].quantile([0.25, 0.5, 0.75]).unstack()
    (line,) = ax.plot(q.index, q[0.5], color=color, ls=ls, marker=marker, ms=3, label=label)
    ax.fill_between(q.index, q[0.25], q[0.75], color=color, alpha=0.2, lw=0)
    return line


# ----------------------------------------------------------------------------- figures


def _marker_size(n: int) -> float:
    return MARKER_SIZE if n <= DENSE_POINTS else 12


def _hue_labels(d: pd.DataFrame, hue: str | None, variants: list[str]) -> tuple[pd.Series, list[str]]:
    """Colour label per row ('normalizer=softmax', or the variant) and their order."""
    if hue is None or hue not in d.columns:
        return d["variant"], _top(d, "variant", variants)
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
    d = _rows(ok, cols + ([hue] if hue in ok.columns else []), TEST_SPLITS)
    d = d[np.isfinite(d["attn_auc_l0"].to_numpy(dtype=float))
          & np.isfinite(d["accuracy"].to_numpy(dtype=float))]
    if len(d) < 3:
        return []
    label, colours = _hue_labels(d, hue, variants)
    d = d.assign(_c=label.to_numpy(dtype=object))
    by_axis = hue is not None and hue in d.columns
    shapes = _top(d, "variant", variants) if by_axis else []
    marker = {v: MARKERS[i] for i, v in enumerate(shapes)} if len(shapes) <= len(MARKERS) else {}
    datasets = sorted(d["dataset"].unique())
    split_of = _splits_of(d, datasets)
    pal = _palette(colours)
    fits: dict[str, dict] = {}
    style, ctx = _style()
    with style, ctx:
        fig, axes = _grid(len(datasets), max(map(len, split_of.values())), h=3.3)
        _hide_unused(axes, [len(split_of[x]) for x in datasets])
        for i, ds_ in enumerate(datasets):
            for j, sp in enumerate(split_of[ds_]):
                ax = axes[i, j]
                g = d[(d["dataset"] == ds_) & (d["split"] == sp)]
                for (c, v), gv in g.groupby(["_c", "variant"], sort=False):
                    if c in pal:
                        ax.scatter(gv["attn_auc_l0"], gv["accuracy"], s=_marker_size(len(g)),
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
        _legend(fig, handles, title)
        fig.suptitle("Accuracy vs attention AUC: acc = a·exp(b·AUC) + c", y=1.02)
        png, svg = _save(fig, out, f"{study}__acc_vs_auc")
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
    d = _rows(ok, ["trial_id", "seed", "dataset", "split", *need],
              ["test_orig", "test_large", "test_largec"])
    d = d[np.isfinite(d["cos_p_init"].to_numpy(dtype=float))]
    if d[["trial_id", "seed"]].drop_duplicates().shape[0] < 3:
        return []
    datasets = sorted(d["dataset"].unique())
    splits = [s for s in ("test_orig", "test_large", "test_largec") if s in set(d["split"].unique())]
    pal = _palette(splits)
    info: dict[str, dict] = {}
    style, ctx = _style()
    with style, ctx:
        fig, axes = _grid(len(datasets), 2, sharey=False)
        for i, ds_ in enumerate(datasets):
            g = d[d["dataset"] == ds_]
            a0 = g[g["split"] == splits[0]]
            raster = len(a0) > RASTER_POINTS
            ax = axes[i, 0]
            ax.scatter(a0["cos_p_init"], a0["attn_auc_l0"], s=_marker_size(len(a0)), alpha=0.7,
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
                ax.scatter(gs["cos_p_init"], gs["accuracy"], s=_marker_size(len(gs)), alpha=0.7,
                           color=pal[sp], edgecolor="white", lw=0.4,
                           label=f"{column_name(sp)} (r = {r:.2f})", rasterized=raster)
                _trend(ax, gs["cos_p_init"], gs["accuracy"], pal[sp])
            ax.set_title(f"{dataset_name(ds_)}: accuracy")
            ax.set_xlabel("cos(p_init, p_opt)")
            ax.set_ylabel("accuracy")
            ax.legend(fontsize=7, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3)
            for a in axes[i]:
                percent_axis(a.yaxis)
        png, svg = _save(fig, out, f"{study}__init_cos")
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


def dynamics(ok: pd.DataFrame, curves: pd.DataFrame, out: Path, study: str,
             variants: list[str]) -> list[Figure]:
    """Val accuracy and AUC per epoch: median and IQR band, by init quality or variant."""
    if curves.empty or "epoch" not in curves.columns:
        return []
    runs = ok.drop_duplicates(["trial_id", "seed"])
    cols = ["trial_id", "seed", "dataset", "variant"] + (
        ["cos_p_init"] if "cos_p_init" in runs.columns else [])
    c = curves.merge(runs[cols], on=["trial_id", "seed"], how="inner")
    metrics = [m for m in ("val_accuracy", "val_auc") if m in c.columns
               and np.isfinite(c[m].to_numpy(dtype=float)).any()]
    if c.empty or not metrics:
        return []
    cos = runs["cos_p_init"].to_numpy(dtype=float) if "cos_p_init" in runs.columns \
        else np.array([])
    by_init = np.isfinite(cos).sum() >= 6 and np.ptp(cos[np.isfinite(cos)]) > 0
    if by_init:
        q1, q2 = np.nanquantile(cos, [1 / 3, 2 / 3])
        labels = [f"cos ≤ {q1:.2f}", f"{q1:.2f} < cos ≤ {q2:.2f}", f"cos > {q2:.2f}"]
        cv = c["cos_p_init"].to_numpy(dtype=float)
        grp = np.where(cv <= q1, labels[0], np.where(cv <= q2, labels[1], labels[2]))
        c = c.assign(group=np.where(np.isfinite(cv), grp, "no attention"))
        order = [g for g in [*labels, "no attention"] if g in set(c["group"].unique())]
        title = "init quality"
    else:
        c = c.assign(group=c["variant"])
        order = _top(c, "group", variants)
        title = "variant"
    pal = _palette(order)
    datasets = sorted(c["dataset"].unique())
    names = {"val_accuracy": "val accuracy", "val_auc": "val attention AUC"}
    q = c.groupby(["dataset", "group", "epoch"])[metrics].quantile([0.25, 0.5, 0.75])
    present = set(zip(q.index.get_level_values(0), q.index.get_level_values(1)))
    style, ctx = _style()
    with style, ctx:
        fig, axes = _grid(len(datasets), len(metrics), w=4.2, sharey=False)
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
                    handles.setdefault(k, h)
                ax.set_title(f"{dataset_name(ds_)}: {names[m]}")
                ax.set_xlabel("epoch")
                epoch_axis(ax.xaxis)
                percent_axis(ax.yaxis)
        _legend(fig, handles, title)
        png, svg = _save(fig, out, f"{study}__dynamics")
    return [Figure("dynamics", "Training dynamics: validation accuracy and attention AUC per "
                   f"epoch, median (line) and interquartile band over runs, by {title}"
                   + (" (tertiles of cos(p_init, p_opt); paper Figures 3-4)." if by_init
                      else "."), png, svg, {"grouped_by": title})]


def ratio_kept(ok: pd.DataFrame, out: Path, study: str) -> list[Figure]:
    """Ratio of nodes kept per pooling layer vs threshold."""
    kept = layer_columns(ok, "ratio_kept")
    if not kept or "threshold" not in ok.columns:
        return []
    d = _rows(ok, ["dataset", "split", "threshold", *kept]
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
    pal = _palette(layers)
    datasets = sorted(long["dataset"].unique())
    style, ctx = _style()
    with style, ctx:
        fig, axes = _grid(1, len(datasets), w=4.2)
        handles = {}
        for j, ds_ in enumerate(datasets):
            ax = axes[0, j]
            for lay in layers:
                for sp, ls, mk in (("test_orig", "-", "o"), ("test_large", "--", "s")):
                    g = long[(long["dataset"] == ds_) & (long["layer"] == lay)
                             & (long["split"] == sp)]
                    h = _band(ax, g, "x", "kept", pal[lay], ls=ls, marker=mk)
                    if h is not None:
                        handles.setdefault(f"{lay}, {column_name(sp)}", h)
            if log:
                ax.set_xscale("log")
            ax.set_title(dataset_name(ds_))
            ax.set_xlabel("threshold α̃")
            ax.set_ylabel("ratio of nodes kept" if j == 0 else "")
            percent_axis(ax.yaxis)
        _legend(fig, handles, "pooling layer")
        png, svg = _save(fig, out, f"{study}__ratio_kept")
    return [Figure("ratio_kept", "Ratio of nodes kept (mean over graphs of N_kept / N) per "
                   "pooling layer vs the threshold, median and interquartile band over runs "
                   "(solid: TEST-ORIG, dashed: TEST-LARGE).", png, svg)]


def _size_bins(cols: list[list]) -> list[tuple]:
    """(dataset, split, variant, lo, hi, accuracy) per size bin of every row."""
    import pyarrow.compute as pc

    tab = _json_table(cols[3], wrap="b") if cols[3] else None
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
        bins = _json(s)
        for b in bins if isinstance(bins, list) else ():
            if isinstance(b, list) and len(b) >= 3 and b[2] is not None:
                recs.append((ds_, sp, v, int(b[0]), int(b[1]), float(b[2])))
    return recs


def _json_table(values: list, wrap: str | None = None):
    """Parse a column of JSON strings with pyarrow (C++): one object per row, or each value
    wrapped as {wrap: value}. None when some value is not strict JSON (e.g. NaN)."""
    import io

    import pyarrow as pa
    import pyarrow.json as pj

    empty = "[]" if wrap else "{}"
    lines = [v if isinstance(v, str) and v.strip() else empty for v in values]
    if wrap:
        lines = [f'{{"{wrap}":{v}}}' for v in lines]
    try:
        return pj.read_json(io.BytesIO("\n".join(lines).encode()),
                            read_options=pj.ReadOptions(block_size=1 << 24))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


def _json(s: object):
    if not isinstance(s, str) or not s:
        return None
    try:
        return json.loads(s)
    except ValueError:
        return None


def _rows(ok: pd.DataFrame, cols: list[str], splits) -> pd.DataFrame:
    """Only `cols` of the rows of `splits` (select columns first: filtering is per column)."""
    d = ok[list(dict.fromkeys(cols))]
    return d[d["split"].isin(list(splits))]


def _lists(df: pd.DataFrame, cols: list[str]) -> list[list]:
    """Columns as Python lists (iterating Arrow-backed pandas strings is slow)."""
    return [df[c].tolist() for c in cols]


def acc_by_size(ok: pd.DataFrame, out: Path, study: str, variants: list[str]) -> list[Figure]:
    """Test accuracy vs graph size (N bins), TEST-ORIG vs TEST-LARGE."""
    if "acc_by_size" not in ok.columns:
        return []
    d = _rows(ok, ["dataset", "split", "variant", "acc_by_size"],
              ["test_orig", "test_large", "test_largec"])
    cols = _lists(d, ["dataset", "split", "variant", "acc_by_size"])
    recs = _size_bins(cols)
    if not recs:
        return []
    long = pd.DataFrame(recs, columns=["dataset", "split", "variant", "lo", "hi", "acc"])
    hue = _top(long, "variant", variants)
    pal = _palette(hue)
    datasets = sorted(long["dataset"].unique())
    style, ctx = _style()
    with style, ctx:
        fig, axes = _grid(1, len(datasets), w=4.6)
        handles = {}
        for j, ds_ in enumerate(datasets):
            ax = axes[0, j]
            g = long[long["dataset"] == ds_]
            bins = sorted(map(tuple, g[["lo", "hi"]].drop_duplicates().to_numpy().tolist()))
            g = g.assign(x=g.groupby(["lo", "hi"], sort=True).ngroup())
            for v in hue:
                for sp, ls, mk in (("test_orig", "-", "o"), ("test_large", "--", "s"),
                                   ("test_largec", ":", "^")):
                    h = _band(ax, g[(g["variant"] == v) & (g["split"] == sp)], "x", "acc",
                              pal[v], ls=ls, marker=mk)
                    if h is not None:
                        handles.setdefault(v, h)
            ax.set_xticks(range(len(bins)), [f"{lo}–{hi}" for lo, hi in bins], rotation=30)
            ax.set_title(dataset_name(ds_))
            ax.set_xlabel("graph size N")
            ax.set_ylabel("test accuracy" if j == 0 else "")
            percent_axis(ax.yaxis)
        _legend(fig, handles, "variant")
        png, svg = _save(fig, out, f"{study}__acc_by_size")
    return [Figure("acc_by_size", "Test accuracy per graph-size bin, median and interquartile "
                   "band over runs (solid: TEST-ORIG, dashed: TEST-LARGE, dotted: "
                   "TEST-LARGE-C).", png, svg)]


GT_MASS_CAPTION = ("Fraction of graphs whose ground-truth nodes receive attention mass ≥ t (first "
                   "pooling layer), median and interquartile band over runs: the further right "
                   "the curve stays high, the more selective the attention.")


def gt_mass(ok: pd.DataFrame, out: Path, study: str, variants: list[str],
            caption: str = GT_MASS_CAPTION, ylabel: str = "graphs with GT mass ≥ t",
            legend: str = "variant") -> list[Figure]:
    """Fraction of graphs whose ground-truth nodes get attention mass >= t, vs t."""
    if "gt_mass_curve" not in ok.columns:
        return []
    d = _rows(ok, ["dataset", "split", "variant", "gt_mass_curve"], TEST_SPLITS)
    cols = _lists(d, ["dataset", "split", "variant", "gt_mass_curve"])
    tab = _json_table(cols[3]) if cols[3] else None
    if tab is not None and tab.num_columns:
        keys = sorted(tab.column_names, key=_float)
        t = np.array([_float(k) for k in keys])
        frac = np.column_stack([tab.column(k).to_numpy(zero_copy_only=False).astype(float)
                                for k in keys])
    else:  # not strict JSON: parse row by row
        parsed = [_json(v) for v in cols[3]]
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
    hue = _top(meta, "variant", variants)
    pal = _palette(hue)
    datasets = sorted(meta["dataset"].unique())
    split_of = _splits_of(meta, datasets)
    style, ctx = _style()
    with style, ctx:
        fig, axes = _grid(len(datasets), max(map(len, split_of.values())), h=3.3)
        _hide_unused(axes, [len(split_of[x]) for x in datasets])
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
        _legend(fig, {v: handles[v] for v in hue if v in handles}, legend)
        png, svg = _save(fig, out, f"{study}__gt_mass")
    return [Figure("gt_mass", caption, png, svg)]


def _float(x: object) -> float:
    try:
        return float(x)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


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
    names = [m for m, _ in metrics]
    q = c.groupby(["dataset", "variant", "epoch"])[names].quantile([0.25, 0.5, 0.75])
    present = set(zip(q.index.get_level_values(0), q.index.get_level_values(1)))
    datasets = sorted(c["dataset"].unique())
    hue = [v for v in variants if v in set(c["variant"].unique())][:MAX_HUE]
    pal = _palette(hue)
    style, ctx = _style()
    with style, ctx:
        fig, axes = _grid(len(datasets), len(metrics), w=3.4)
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
        _legend(fig, handles, "normalizer")
        png, svg = _save(fig, out, f"{study}__dynamics")
    return [Figure("sdc_dynamics", "Fractions of training mosaics per epoch: FTPT (focus on the "
                   "true foreground and prediction true), FFPT, FTPF, FFPF; median and "
                   "interquartile band over runs (Pandey et al.).", png, svg)]


_TASKS: list = []  # (function, args) of the figures being drawn; read by forked workers


def _draw(i: int) -> tuple[list[Figure], float]:
    import time

    fn, args = _TASKS[i]
    t0 = time.perf_counter()
    return fn(*args), time.perf_counter() - t0


def all_figures(ok: pd.DataFrame, curves: pd.DataFrame, out: Path, study: str,
                variants: list[str], jobs: int = 1, hue: str | None = None) -> list[Figure]:
    """Every figure that the study's data supports; `hue` is the axis the accuracy-AUC
    scatter is coloured by (None: by variant); `jobs` > 1 draws them in that many forked
    processes (matplotlib is single-threaded; the data is shared by fork)."""
    global _TASKS
    _TASKS = [(acc_vs_auc, (ok, out, study, variants, hue)), (init_cos, (ok, out, study)),
              (dynamics, (ok, curves, out, study, variants)), (ratio_kept, (ok, out, study)),
              (acc_by_size, (ok, out, study, variants)), (gt_mass, (ok, out, study, variants))]
    results = None
    if jobs > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        try:
            ctx = mp.get_context("fork")
            with ProcessPoolExecutor(min(jobs, len(_TASKS)), mp_context=ctx) as pool:
                # the slowest figures first, so that the two workers finish together
                order = [0, 5, 2, 1, 3, 4]
                done = dict(zip(order, pool.map(_draw, order)))
            results = [done[i] for i in range(len(_TASKS))]
        except (ValueError, OSError, RuntimeError):
            results = None  # no fork on this platform, or a worker died: draw here
    if results is None:
        results = [_draw(i) for i in range(len(_TASKS))]
    _TASKS = []
    figs: list[Figure] = []
    for made, seconds in results:
        for f in made:
            f.info["seconds"] = seconds
        figs += made
    return figs
