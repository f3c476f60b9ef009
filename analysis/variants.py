"""Model-variant labels, table rows and baselines.

A *variant* is named as in SPEC §5: backbone plus how attention is used
("GIN global pool", "GIN unsup top-k", "ChebyGIN sup", "ChebyGIN + GT attention").
A table *row* is a variant plus the other config axes that vary within it in a
study (e.g. "ChebyGIN unsup (init_dist=normal)"); an axis with more than
`MAX_ROW_VALUES` distinct values is continuous: it is pooled in the tables and
shown in the figures instead. Each row is compared with a *baseline* row: the
global-pool model of the same backbone, else the first row of that backbone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

BACKBONE_NAMES = {"gcn": "GCN", "gin": "GIN", "chebynet": "ChebyNet", "chebygin": "ChebyGIN"}
SUPERVISION_ORDER = {"global": 0, "unsup": 1, "weak": 2, "sup": 3, "gt": 4}
BACKBONE_ORDER = {"gcn": 0, "gin": 1, "chebynet": 2, "chebygin": 3}
SELECTION_NAMES = {"threshold": "", "topk": " top-k", "gao": " gPool"}

# axes that may define table rows (besides the variant itself); not speed-only knobs
ROW_AXES = ("pool_layers", "K", "aggregation", "hidden", "filters", "readout", "dropout", "scorer",
            "scorer_input", "threshold", "ratio", "normalizer", "kl_weight", "init_dist",
            "init_scale", "epochs", "lr_decay_epochs", "lr", "weight_decay", "batch_size",
            "data_params", "extra", "average_at", "entropy_lambda", "focus_hidden",
            "classify_hidden")
MAX_ROW_VALUES = 12  # more distinct values than this: a continuous axis, pooled in tables


def variant_label(backbone: str, pool_layers: str, supervision: str, selection: str) -> str:
    """The SPEC §5 row name of a model variant."""
    name = BACKBONE_NAMES.get(backbone, backbone or "model")
    if not pool_layers:
        return f"{name} global pool"
    if supervision == "gt":
        return f"{name} + GT attention"
    return f"{name} {supervision or 'unsup'}{SELECTION_NAMES.get(selection, ' ' + selection)}"


def per_unique(df: pd.DataFrame, cols: list[str], fn) -> tuple[np.ndarray, list[tuple]]:
    """Apply `fn(*values)` once per distinct combination of `cols`; (per-row codes, uniques)."""
    mi = pd.MultiIndex.from_frame(df[cols].astype(object))
    codes, uniques = pd.factorize(mi)
    uniq = [tuple(u) for u in uniques]
    return codes, [fn(*u) for u in uniq]


def _variant_key(b: str, p: str, s: str, sel: str) -> tuple:
    return (SUPERVISION_ORDER.get("global" if not p else s, 9), BACKBONE_ORDER.get(b, 9),
            sel != "threshold", b, s, sel)


def add_variant(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with a `variant` label column and its table order `_vorder` (an int)."""
    df = df.copy()
    cols = ["backbone", "pool_layers", "supervision", "selection"]
    for c in cols:
        if c not in df.columns:
            df[c] = ""
    codes, found = per_unique(df, cols, lambda *u: (_variant_key(*map(str, u)),
                                                   variant_label(*map(str, u))))
    ranks = {k: i for i, k in enumerate(sorted(set(found)))}
    df["variant"] = np.array([lab for _, lab in found], dtype=object)[codes]
    df["_vorder"] = np.array([ranks[f] for f in found])[codes]
    return df


@dataclass(frozen=True)
class RowAxes:
    """Which axes split the rows of a study's tables and which are pooled."""

    split_by: tuple[str, ...]  # discrete axes varying within a variant
    pooled: tuple[str, ...]  # continuous axes (> MAX_ROW_VALUES values), pooled in tables


def row_axes(df: pd.DataFrame) -> RowAxes:
    """Axes that vary within some (variant, dataset) group of `df`."""
    split_by, pooled = [], []
    for axis in ROW_AXES:
        if axis not in df.columns:
            continue
        per_group = df.groupby(["variant", "dataset"], sort=False)[axis].nunique(dropna=False)
        if per_group.max() <= 1:
            continue
        if axis == "pool_layers" and (df["pool_layers"] == "").all():
            continue
        (pooled if df[axis].nunique() > MAX_ROW_VALUES else split_by).append(axis)
    return RowAxes(tuple(split_by), tuple(pooled))


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v) if str(v) != "" else "none"


def add_rows(df: pd.DataFrame, axes: RowAxes) -> pd.DataFrame:
    """`df` with a `row` label (variant + its split-by axis values) and order `_rorder`."""
    df = df.copy()
    cols = ["variant", "_vorder", *axes.split_by]

    def label(variant, vorder, *vals):
        key = (vorder, *[_sortable(v) for v in vals])
        if not vals:
            return key, variant
        return key, f"{variant} (" + ", ".join(f"{a}={_fmt(v)}"
                                               for a, v in zip(axes.split_by, vals)) + ")"

    codes, found = per_unique(df, cols, label)
    ranks = {k: i for i, k in enumerate(sorted(set(found)))}
    df["row"] = np.array([lab for _, lab in found], dtype=object)[codes]
    df["_rorder"] = np.array([ranks[f] for f in found])[codes]
    return df


def _sortable(v: object) -> tuple:
    if isinstance(v, int | float | np.integer | np.floating):
        return (0, float(v), "")
    return (1, 0.0, "" if v in ("default", "") else str(v))


def row_order(df: pd.DataFrame) -> list[str]:
    """Row labels of `df` in table order."""
    first = df.drop_duplicates("row")
    return [r for _, r in sorted(zip(first["_rorder"], first["row"]))]


def baselines(df: pd.DataFrame, axes: RowAxes) -> dict[str, str | None]:
    """Row -> its baseline row (None for a backbone's own baseline).

    The baseline is the global-pool row of the same backbone (the one sharing most
    split-by values, then the first in table order); without one, the backbone's
    first row. A global-pool row is compared with its backbone's first global row.
    """
    info = df.drop_duplicates("row").set_index("row")
    order = row_order(df)
    info = info.loc[order]
    backbone = info["backbone"] if "backbone" in info.columns else pd.Series("", index=info.index)
    is_global = (info["pool_layers"] == "") if "pool_layers" in info.columns \
        else pd.Series(False, index=info.index)
    out: dict[str, str | None] = {}
    for row in order:
        same = [r for r in order if backbone[r] == backbone[row]]
        globals_ = [r for r in same if is_global[r]]
        if is_global[row]:
            out[row] = None if globals_[0] == row else globals_[0]
            continue
        cand = globals_ or [same[0]]
        if cand == [row]:
            out[row] = None
            continue
        shared = {c: sum(info.at[c, a] == info.at[row, a] for a in axes.split_by) for c in cand}
        out[row] = max(cand, key=lambda c: (shared[c], -order.index(c)))
    return out
