"""The look shared by every figure of the report, and the helpers the figure modules draw with.

Seaborn's whitegrid style in the paper context on the Agg backend; PNG at `DPI` plus SVG
(`save`); percentage axes with the fewest decimals that print every tick exactly and
distinctly (`PercentTicks`, `percent_axis`); integer epoch ticks (`epoch_axis`); panel
grids, palettes of at most `MAX_HUE` groups, a legend to the right of the panels,
median lines with interquartile bands; and `Figure`, what every figure function returns.

The rules every statistic drawn on a figure follows, the same as the tables': a correlation
is shown only with `stats.MIN_CORRELATION_POINTS` runs from `stats.MIN_PAIRED_SEEDS` seeds
(`correlation`, `correlation_text`), always with n and its 95% interval; `split_styles`
words the caption from the line styles and markers actually drawn.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.axis import Axis  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import Formatter, MaxNLocator  # noqa: E402

from analysis import stats  # noqa: E402
from analysis.formatting import TEST_SPLITS, column_name  # noqa: E402

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

    def set_locs(self, locs: Sequence[float]) -> None:
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


def percent_axis(axis: Axis, nbins: int | str = "auto") -> None:
    """Label a matplotlib axis holding fractions in percent (`PercentTicks`), ticks at
    1, 2 or 5 times a power of ten (no 2.5 steps, which need one more decimal)."""
    axis.set_major_locator(MaxNLocator(nbins=nbins, steps=[1, 2, 5, 10]))
    axis.set_major_formatter(PercentTicks())


def epoch_axis(axis: Axis) -> None:
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


def theme() -> tuple[AbstractContextManager, AbstractContextManager]:
    """The seaborn style and context every figure is drawn in (use both as `with`)."""
    return sns.axes_style("whitegrid"), sns.plotting_context("paper", font_scale=1.1)


def save(fig: plt.Figure, out: Path, stem: str) -> tuple[Path, Path]:
    """Write `out/stem.png` (at DPI) and `out/stem.svg`, close the figure; the two paths.

    The figure modules call it as `figure_style.save`, so a test can wrap it in one place."""
    out.mkdir(parents=True, exist_ok=True)
    png, svg = out / f"{stem}.png", out / f"{stem}.svg"
    fig.savefig(png, dpi=DPI, bbox_inches="tight")
    fig.savefig(svg, bbox_inches="tight")  # each save draws twice (layout, then output)
    plt.close(fig)
    return png, svg


def palette(keys: list[str]) -> dict[str, tuple]:
    """A colour per key: tab10 for up to 10 keys, else husl."""
    return dict(zip(keys, sns.color_palette("tab10" if len(keys) <= 10 else "husl", len(keys))))


def most_frequent(df: pd.DataFrame, col: str, order: list[str] | None = None) -> list[str]:
    """The MAX_HUE most frequent values of `col`, in `order` (default: sorted)."""
    counts = df[col].value_counts()
    keep = set(counts.index[:MAX_HUE])
    base = order if order is not None else sorted(counts.index)
    return [k for k in base if k in keep]


def not_drawn(present: object, drawn: list[str], what: str = "variants") -> str:
    """Caption sentence naming the groups a figure leaves out beyond its MAX_HUE colours
    (" Not drawn: ...", with the reason), or "" when every group present is drawn."""
    rest = sorted({str(v) for v in present} - {str(v) for v in drawn})
    if not rest:
        return ""
    return (f" Not drawn ({len(rest)} {what} beyond the {MAX_HUE} most frequent that a "
            f"legend can tell apart; no statistic uses them): {', '.join(rest)}.")


def panel_grid(n_rows: int, n_cols: int, w: float = 3.6, h: float = 3.0,
               sharey: bool = True) -> tuple[plt.Figure, np.ndarray]:
    """A figure of n_rows x n_cols panels of w x h inches (axes always 2-D)."""
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(w * n_cols + 1.5, h * n_rows),
                             squeeze=False, sharey=sharey)
    fig.subplots_adjust(hspace=0.55, wspace=0.25)
    return fig, axes


def splits_of(df: pd.DataFrame, datasets: list[str]) -> dict[str, list[str]]:
    """Dataset -> its test splits present, in canonical order."""
    pairs = df[["dataset", "split"]].drop_duplicates()
    have = set(zip(pairs["dataset"].tolist(), pairs["split"].tolist()))
    return {d: [s for s in TEST_SPLITS if (d, s) in have] for d in datasets}


def hide_unused(axes: np.ndarray, per_row: list[int]) -> None:
    """Hide the panels of each row beyond the `per_row[i]` it uses."""
    for i, n in enumerate(per_row):
        for ax in axes[i, n:]:
            ax.set_visible(False)


RUNS_NOTE = ("n in the legend: runs (one seed of one trial) per dataset, as n in the tables; "
             "the splits of a run are one run")


def run_counts(df: pd.DataFrame, group: str) -> dict[str, str]:
    """The legend's "n = ..." of each value of `group`: its runs (distinct trial and seed) per
    dataset panel, as the tables' n counts them (a run's splits and epochs are one run), so a
    variant trained on COLORS and TRIANGLES with 2 seeds says 2, not 4."""
    runs = df.drop_duplicates(["trial_id", "seed"])
    if "dataset" not in runs.columns:
        return {str(g): f"n = {n} runs" for g, n in runs.groupby(group).size().items()}
    from analysis.formatting import dataset_name

    several = runs["dataset"].nunique() > 1
    out = {}
    for g, per in runs.groupby([group, "dataset"]).size().groupby(level=0):
        counts = {str(d): int(n) for (_, d), n in per.items() if n}
        values = set(counts.values())
        if not several:
            out[str(g)] = f"n = {sum(counts.values())} runs"
        elif len(counts) == runs["dataset"].nunique() and len(values) == 1:
            out[str(g)] = f"n = {values.pop()} runs per dataset"
        else:
            out[str(g)] = "n = " + ", ".join(f"{n} ({dataset_name(d)})"
                                             for d, n in counts.items()) + " runs"
    return out


def side_legend(fig: plt.Figure, handles: dict, title: str) -> None:
    """One legend for the figure, right of the panels (none when `handles` is empty)."""
    if handles:
        fig.legend(list(handles.values()), list(handles.keys()), title=title,
                   loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)


def median_band(ax: Axes, g: pd.DataFrame, x: str, y: str, color: object, label: str | None = None,
                ls: str = "-", marker: str | None = None) -> Line2D | None:
    """Median line and interquartile band of y per x."""
    if g.empty:
        return None
    q = g.groupby(x)[y].quantile([0.25, 0.5, 0.75]).unstack()
    (line,) = ax.plot(q.index, q[0.5], color=color, ls=ls, marker=marker, ms=3, label=label)
    ax.fill_between(q.index, q[0.25], q[0.75], color=color, alpha=0.2, lw=0)
    return line


def marker_size(n: int) -> float:
    """Scatter marker area for a panel of n points: smaller in dense panels."""
    return MARKER_SIZE if n <= DENSE_POINTS else 12


def subset(ok: pd.DataFrame, cols: list[str], splits: Iterable[str]) -> pd.DataFrame:
    """Only `cols` of the rows of `splits` (select columns first: filtering is per column)."""
    d = ok[list(dict.fromkeys(cols))]
    return d[d["split"].isin(list(splits))]


def as_lists(df: pd.DataFrame, cols: list[str]) -> list[list]:
    """Columns as Python lists (iterating Arrow-backed pandas strings is slow)."""
    return [df[c].tolist() for c in cols]


LEVEL = 0.95  # every interval drawn on a figure


def correlation_support(n: int, n_seeds: int) -> str:
    """Why n runs from n_seeds seeds are too few for a correlation (the findings' and tables'
    thresholds: MIN_CORRELATION_POINTS runs from MIN_PAIRED_SEEDS seeds), or "" if enough."""
    if n < stats.MIN_CORRELATION_POINTS or n_seeds < stats.MIN_PAIRED_SEEDS:
        return (f"{n} runs from {n_seeds} seeds; r needs ≥ {stats.MIN_CORRELATION_POINTS} "
                f"runs from ≥ {stats.MIN_PAIRED_SEEDS} seeds")
    return ""


def correlation(x: object, y: object, n_seeds: int) -> dict:
    """Pearson r of the finite pairs with its two-sided p, 95% CI (Fisher z, scipy's
    `pearsonr(...).confidence_interval`), n and seeds, and `reason` ("" when r may be shown:
    enough runs and seeds, and r defined)."""
    r, p, n = stats.pearson(x, y)
    lo = hi = math.nan
    reason = correlation_support(n, n_seeds)
    if not reason and not np.isfinite(r):
        reason = "r undefined (a constant variable)"
    if np.isfinite(r) and n > 3:
        from scipy import stats as sps

        xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        keep = np.isfinite(xa) & np.isfinite(ya)
        ci = sps.pearsonr(xa[keep], ya[keep]).confidence_interval(LEVEL)
        lo, hi = float(ci.low), float(ci.high)
    return {"pearson_r": r, "pearson_p": p, "pearson_lo": lo, "pearson_hi": hi, "n": n,
            "n_seeds": int(n_seeds), "r_shown": not reason, "r_reason": reason}


def correlation_text(c: dict) -> str:
    """'r = 0.41 (95% CI 0.12 to 0.64), n = 40 runs, 10 seeds', or why no r is shown."""
    if c["r_shown"]:
        return (f"r = {c['pearson_r']:.2f} ({100 * LEVEL:.0f}% CI {c['pearson_lo']:.2f} to "
                f"{c['pearson_hi']:.2f}), n = {c['n']} runs, {c['n_seeds']} seeds")
    return f"no r: {c['r_reason']}"


def split_styles(drawn: dict[str, bool], styles: dict[str, tuple[str, str]]) -> str:
    """Caption words for the test splits drawn: `drawn[split]` is True when some line of it
    joins two or more points, False when it is markers only; `styles` the (ls, marker)."""
    ls_name = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dotted"}
    mk_name = {"o": "circles", "s": "squares", "^": "triangles", "D": "diamonds"}
    parts = []
    for sp in [s for s in styles if s in drawn]:
        ls, mk = styles[sp]
        what = f"{ls_name.get(ls, ls)} lines with {mk_name.get(mk, mk)}" if drawn[sp] \
            else f"{mk_name.get(mk, mk)} only (a single point per line, nothing to join)"
        parts.append(f"{column_name(sp)}: {what}")
    return "; ".join(parts)
