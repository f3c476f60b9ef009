"""Model-variant labels, table rows and baselines.

A *variant* is named as in SPEC §5: backbone plus how attention is used
("GIN global pool", "GIN unsup top-k", "ChebyGIN sup", "ChebyGIN + GT attention").
A table *row* is a variant plus the other config axes that vary within it in a
study (e.g. "ChebyGIN unsup (init_dist=normal)"); an axis with more than
`MAX_ROW_VALUES` distinct values is continuous: it is pooled in the tables and
shown in the figures instead. Each row is compared only with rows that differ from
it in exactly one of the study's varied axes (`comparisons`), so that a difference is
credited to the one axis that changed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

BACKBONE_NAMES = {"gcn": "GCN", "gin": "GIN", "chebynet": "ChebyNet", "chebygin": "ChebyGIN",
                  "chebygin_ref": "ChebyGIN (ref. script)",
                  # PyG's dense layers (ablate.models.backbones), by their classes' names
                  "dense_gcn": "DenseGCN", "dense_gin": "DenseGIN", "dense_graph": "DenseGraph",
                  "dense_sage": "DenseSAGE", "dense_gat": "DenseGAT"}
SUPERVISION_ORDER = {"global": 0, "unsup": 1, "weak": 2, "sup": 3, "gt": 4}
BACKBONE_ORDER = {"gcn": 0, "gin": 1, "chebynet": 2, "chebygin": 3, "chebygin_ref": 4,
                  "dense_gcn": 5, "dense_gin": 6, "dense_graph": 7, "dense_sage": 8, "dense_gat": 9}
SELECTION_NAMES = {"threshold": "", "topk": " top-k", "gao": " gPool"}

# axes that may define table rows (besides the variant itself); not speed-only knobs
ROW_AXES = ("pool_layers", "K", "aggregation", "hidden", "filters", "readout", "dropout", "scorer",
            "scorer_input", "scorer_relu", "threshold", "ratio", "normalizer", "kl_weight", "init_dist",
            "init_scale", "epochs", "lr_decay_epochs", "lr_timing", "lr", "weight_decay", "batch_size",
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


DATA_PREFIX = "data."  # a dataset recipe parameter as an axis of its own ("data.max_train_nodes")
# recipe parameters that never define a row: where the data live, and a split seeded per run
_DATA_LOCATION = ("path", "url")
# recipe parameters that are replicates, not rows: the test fold of k-fold cross-validation
# (`data.protocol: cv`; Errica et al. 2020 report mean and std over folds and runs); the
# paired test pairs such rows by fold (`cv_folds`, `analysis.cells`)
_REPLICATES = ("fold",)


def add_data_axes(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with one `data.KEY` column per dataset recipe parameter (from `data_params`), so a
    row is named by the parameter that differs ('data.max_train_nodes=300'), not by the whole
    recipe. Left out: where the data live (path, url), `split_seed` where it is each run's
    own seed (`data.split_seed: seed`) and a cross-validation `fold`, which, like the seed,
    are pooled over."""
    if "data_params" not in df.columns or df.empty:
        return df
    codes, uniques = pd.factorize(df["data_params"].astype(str))
    parsed = [parse_data_params(text) for text in uniques]
    keys = sorted({k for p in parsed for k in p if k not in _DATA_LOCATION})
    df = df.copy()
    for key in keys:
        col = np.array([_axis_value(p.get(key, "default")) for p in parsed], dtype=object)[codes]
        if key == "split_seed" and "seed" in df.columns and all(
                str(v) == str(s) for v, s in zip(col, df["seed"].tolist())):
            continue  # a split per run: pooled like the seed
        if key in _REPLICATES:
            continue  # a cross-validation fold: pooled like the seed (mean over folds x seeds)
        df[DATA_PREFIX + key] = col
    return df


def parse_data_params(text: str) -> dict:
    """A record's `data_params` JSON as a dict ({} where empty or not a JSON object)."""
    try:
        value = json.loads(text) if text not in ("", "nan") else {}
    except ValueError:
        value = {}
    return value if isinstance(value, dict) else {}


# the k of a CV record that leaves `data.folds` at its default (a study file with `data:
# {protocol: cv}` stores no `folds`): the generators' default (tu:NAME and pyg; a test pins it)
CV_DEFAULT_FOLDS = 10


def cv_folds(params: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per record (its `data_params`), the cross-validation test fold and the k of the k-fold
    CV it belongs to (`data.protocol: cv`, `data.fold`, `data.folds`); NaN, NaN for a record
    of any other protocol. The fold is the paired test's unit of such a study
    (`analysis.cells`): its seeds share its test graphs."""
    codes, uniques = pd.factorize(params.astype(str))
    fold, k = np.full(len(uniques), np.nan), np.full(len(uniques), np.nan)
    for i, text in enumerate(uniques):
        p = parse_data_params(text)
        f, n = p.get("fold"), p.get("folds", CV_DEFAULT_FOLDS)
        if p.get("protocol") == "cv" and _integer(f) and _integer(n) and 0 <= f < n:
            fold[i], k[i] = f, n
    return fold[codes], k[codes]


def cv_partitions(params: pd.Series) -> np.ndarray:
    """Per record (its `data_params`), which k-fold partition its fold is of: the
    `split_seed` that shuffled the folds, as JSON text ("" where the record leaves it at the
    dataset's default). Runs share a test fold only when they share its number and this:
    `data.split_seed: seed` draws each seed its own partition (repeated k-fold CV), so fold
    3 of seed 0 and fold 3 of seed 1 are different test sets (`analysis.cells`)."""
    codes, uniques = pd.factorize(params.astype(str))
    out = np.empty(len(uniques), dtype=object)
    for i, text in enumerate(uniques):
        v = parse_data_params(text).get("split_seed")
        out[i] = "" if v is None else json.dumps(v)
    return out[codes]


def _integer(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _axis_value(v: object) -> object:
    return json.dumps(v) if isinstance(v, list | dict) else v


def row_axes(df: pd.DataFrame) -> RowAxes:
    """Axes that vary within some (variant, dataset) group of `df` (recipe parameters by their
    `data.KEY` columns where `add_data_axes` made them, else the whole `data_params`)."""
    split_by, pooled = [], []
    data_cols = sorted(c for c in df.columns if c.startswith(DATA_PREFIX))
    candidates = [a for a in ROW_AXES if not (data_cols and a == "data_params")] + data_cols
    for axis in candidates:
        if axis not in df.columns:
            continue
        per_group = df.groupby(["variant", "dataset"], sort=False)[axis].nunique(dropna=False)
        if per_group.max() <= 1:
            continue
        if axis == "pool_layers" and (df["pool_layers"] == "").all():
            continue
        (pooled if df[axis].nunique() > MAX_ROW_VALUES else split_by).append(axis)
    return RowAxes(tuple(split_by), tuple(pooled))


def axis_value_text(v: object) -> str:
    """An axis value as tables and legends show it (floats short, empty as 'none')."""
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
        return key, f"{variant} (" + ", ".join(f"{a}={axis_value_text(v)}"
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


# axes in which rows may differ, after the split-by axes, in the order comparisons are listed
VARIANT_AXES = ("supervision", "selection", "pool_layers", "backbone")
# axes that mean nothing without attention: global-pool rows are not compared along them
ATTENTION_AXES = frozenset({"supervision", "selection", "scorer", "scorer_input", "scorer_relu",
                            "threshold",
                            "ratio", "normalizer", "kl_weight", "init_dist", "init_scale"})
# reference values of an axis, most preferred first, where the papers name one ("" = global)
REFERENCE_VALUES: dict[str, tuple] = {"pool_layers": ("",), "supervision": ("unsup",),
                                      "selection": ("threshold", "topk"),
                                      "normalizer": ("softmax",)}


@dataclass(frozen=True)
class Comparison:
    """A row's baseline that differs from it in one axis only."""

    baseline: str  # the baseline's row label
    axis: str  # the one varied axis in which the two rows differ
    value: str  # the row's value of `axis`, formatted
    base_value: str  # the baseline's value of `axis`, formatted

    def describe(self) -> str:
        """'normalizer: softmax → sparsemax'."""
        return f"{self.axis}: {self.base_value} → {self.value}"


def varied_axes(df: pd.DataFrame, axes: RowAxes) -> tuple[str, ...]:
    """Axes whose values differ between the rows of `df`: split-by axes, then VARIANT_AXES.
    A row's value of an axis is every value its records hold (`row_values`), so the answer
    does not depend on the order of the records."""
    cand = [a for a in dict.fromkeys([*axes.split_by, *VARIANT_AXES]) if a in df.columns]
    vals = row_values(df, cand)
    return tuple(a for a in cand if _distinct(v[a] for v in vals.values()) > 1)


def _same(x: object, y: object) -> bool:
    both_nan = isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)
    return both_nan or bool(x == y)


def _distinct(values) -> int:
    found: list = []
    for v in values:
        if not any(_same(v, f) for f in found):
            found.append(v)
    return len(found)


@dataclass(frozen=True)
class ManyValues:
    """The values of an axis a row takes on different records (e.g. `pool_layers` 1 on COLORS
    and 1,2 on TRIANGLES: the recipes' own), distinct and sorted: equal to another row's
    exactly when the two take the same values."""

    values: tuple

    def __str__(self) -> str:
        return " / ".join(axis_value_text(v) for v in self.values)


def _row_value(column: pd.Series) -> object:
    """One row's value of an axis from its records: the value where they all hold one (a
    missing value counts as one value, NaN), else `ManyValues` of them all in `_sortable`
    order, whatever the order of the records."""
    found: list = []
    for v in column.drop_duplicates().tolist():
        v = math.nan if v is None or (isinstance(v, float) and math.isnan(v)) else v
        if not any(_same(v, f) for f in found):
            found.append(v)
    if len(found) == 1:
        return found[0]
    return ManyValues(tuple(sorted(found, key=_order_key)))


def _order_key(v: object) -> tuple:
    if isinstance(v, float) and math.isnan(v):
        return (2, 0.0, "", "")  # missing last (NaN would not sort)
    return (*_sortable(v), str(v))


def row_values(df: pd.DataFrame, cols: list[str]) -> dict[str, dict[str, object]]:
    """Row label -> {axis: the row's value} over all of the row's records (`_row_value`)."""
    out: dict[str, dict[str, object]] = {}
    for row, g in df.groupby("row", sort=True):
        out[str(row)] = {a: _row_value(g[a]) for a in cols}
    return out


def comparisons(df: pd.DataFrame, axes: RowAxes) -> dict[str, list[Comparison]]:
    """Row -> its one-axis comparisons, in `varied_axes` order (the first is its primary one).

    For each varied axis a, the rows that equal a row r in every other varied axis form
    r's group along a (global-pool rows, which store the default attention settings, take
    no part in comparisons along an attention axis). The group's reference value of a is
    the paper's (`REFERENCE_VALUES`) when present, else the value shared by the most rows
    of the study (each weighted by the number of other axes it shares with the group),
    else the first in table order. A row not at the reference is compared with the
    group's reference row (the first in table order where several are). A row with
    attention that no such neighbour reaches (e.g. the TU studies' weak rows, whose threshold,
    KL weight and init differ from every other row's) is compared with the global-pool row
    that equals it in every axis but pool_layers and the attention axes (a global-pool row's
    attention settings mean nothing): the paper's question of that row. Any other row
    without a neighbour gets no comparison.

    A row's value of an axis is taken from all of its records (`row_values`): the one
    value they hold, or where they hold several (an axis that is not a row axis but
    differs by dataset, as `pool_layers` does between the COLORS and TRIANGLES recipes in
    study=smoke) all of them, sorted (`ManyValues`, shown "1 / 1,2"), so two rows agree in
    the axis when they take the same values. The result thus depends only on the set of
    records, never on the order of the rows or of the result files they were read from.
    """
    order = row_order(df)
    pos = {r: i for i, r in enumerate(order)}
    varied = varied_axes(df, axes)
    every = row_values(df, [a for a in dict.fromkeys([*varied, "pool_layers"])
                            if a in df.columns])
    vals = {r: {a: every[r][a] for a in varied} for r in order}
    glob = {r: "pool_layers" in df.columns and _same(every[r]["pool_layers"], "")
            for r in order}

    def agree(r: str, c: str, skip: str) -> int:
        return sum(_same(vals[r][b], vals[c][b]) for b in varied if b != skip)

    def neighbour(r: str, c: str, a: str) -> bool:
        if c == r or _same(vals[r][a], vals[c][a]) or (a in ATTENTION_AXES and glob[c]):
            return False
        return all(_same(vals[r][b], vals[c][b]) for b in varied if b != a)

    out: dict[str, list[Comparison]] = {r: [] for r in order}
    for r in order:
        for a in varied:
            if a in ATTENTION_AXES and glob[r]:
                continue
            group = [r] + [c for c in order if neighbour(r, c, a)]
            if len(group) < 2:
                continue
            ref = _reference(a, group, order, pos, vals, agree)
            if _same(vals[r][a], ref):
                continue
            base = next(c for c in group if _same(vals[c][a], ref))
            out[r].append(Comparison(base, a, axis_value_text(vals[r][a]), axis_value_text(ref)))
    if "pool_layers" in varied:  # attention rows that no one-axis neighbour reaches
        for r in order:
            base = None if out[r] or glob[r] else next(
                (c for c in order if glob[c] and all(
                    _same(vals[r][b], vals[c][b]) for b in varied
                    if b != "pool_layers" and b not in ATTENTION_AXES)), None)
            if base is not None:
                out[r].append(Comparison(base, "pool_layers",
                                         axis_value_text(vals[r]["pool_layers"]),
                                         axis_value_text(vals[base]["pool_layers"])))
    return out


def _reference(a: str, group: list[str], order: list[str], pos: dict[str, int], vals: dict,
               agree) -> object:
    """The reference value of axis `a` in `group` (rows differing only in `a`)."""
    firsts: dict = {}
    for c in group:
        if not any(_same(vals[c][a], v) for v in firsts):
            firsts[vals[c][a]] = pos[c]
    for declared in REFERENCE_VALUES.get(a, ()):
        for v in firsts:
            if _same(v, declared):
                return v
    r = group[0]

    def weight(v: object) -> int:
        return sum(agree(r, c, a) for c in order if _same(vals[c][a], v))

    return max(firsts, key=lambda v: (weight(v), -firsts[v]))


def colour_axis(df: pd.DataFrame, axes: RowAxes, max_values: int = 10) -> str | None:
    """The axis a study's scatter plots are coloured by: its first split-by axis (the
    config axis the study varies within a model variant, e.g. normalizer) with at most
    `max_values` values; None when rows differ only by variant (colour by variant)."""
    for a in axes.split_by:
        if a in df.columns and df[a].nunique(dropna=False) <= max_values:
            return a
    return None
