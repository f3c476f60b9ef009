"""Tables of a study: the paper's table layout, the paper comparison, statistics, attention
layers and the selective-dependence rows.

Each `*_table` function lays out numbers as a `Table` (`analysis.table_render`), which
renders to Markdown, LaTeX and HTML and saves its numbers as CSV. The GNN tables read
the per-cell numbers of `cell_stats` (`analysis.cells`); names and number formats come
from `analysis.formatting`. Accuracy and AUC are shown in percent. The names that were
defined here before the module was split stay importable from here.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis import stats
from analysis.cells import (
    ALPHA,
    CELL_COLUMNS,
    cell_stats,
    columns_of,
    direction,
    observations,
    primary,
    significant,
)
from analysis.formatting import (
    DATASET_NAMES,
    DOWN,
    SAME,
    SPLIT_NAMES,
    TEST_SPLITS,
    UP,
    column_name,
    dataset_name,
    fmt_ci,
    fmt_interval,
    fmt_p,
    fmt_pm,
)
from analysis.load import layer_columns
from analysis.reference import (
    AUC_COLUMN,
    LOG_SOURCE,
    MNIST_SCRIPT,
    NOTEBOOK_SOURCE,
    PAPER,
    PAPER_TU_SOURCE,
    SDC_REFERENCE,
    WORKSHOP,
    logged,
)
from analysis.table_render import MAX_HTML_COLUMNS, Table

__all__ = [
    "ALPHA", "CELL_COLUMNS", "DATASET_NAMES", "DOWN", "MAX_HTML_COLUMNS", "SDC_METRICS",
    "SPLIT_NAMES", "TEST_SPLITS", "UP", "Table", "cell_stats", "column_name", "columns_of",
    "dataset_name", "fmt_ci", "fmt_p", "fmt_pm", "layers_table", "main_table",
    "observations", "paper_table", "primary", "sdc_table", "significant", "stats_table",
]


def _num(x: float) -> str:
    """A paper number as printed: one decimal, two where the paper gives two (95.78)."""
    return f"{x:.2f}" if round(x, 1) != round(x, 2) else f"{x:.1f}"


COUNTING = {"colors": "green nodes", "triangles": "triangles"}  # count regressions, rounded


def zero_count_note(cells: pd.DataFrame) -> str | None:
    """Why a COLORS or TRIANGLES accuracy reads 0.0 ± 0.0 (every run scored 0), naming the
    cells; `cells` are the ones a table shows: None when none of them is such a cell."""
    c = primary(cells)
    c = c[c["dataset"].isin(list(COUNTING)) & (c["column"] != AUC_COLUMN)]
    zero = c[(c["mean"].to_numpy(dtype=float) == 0) & (c["std"].fillna(0).to_numpy(dtype=float)
                                                        == 0)]
    if zero.empty:
        return None
    named = []
    for (row, d), g in zero.groupby(["row", "dataset"], sort=False):
        named.append(f"{row} on {dataset_name(str(d))} "
                     f"({', '.join(column_name(str(x)) for x in g['column'])})")
    shown = "; ".join(named[:6]) + (f"; and {len(named) - 6} more" if len(named) > 6 else "")
    tasks = " and ".join(f"{dataset_name(d)} counts {w}" for d, w in COUNTING.items()
                       if d in set(zero["dataset"]))
    return (f"0.0 ± 0.0 is an accuracy, not a failure: {tasks}, trained as a regression, and a "
            "test graph counts as right only when the output rounded to the nearest integer "
            "is its exact count. A model that has not yet learnt to count (few epochs or "
            "little data, as in a short run) is exact on no graph in any run; the attention "
            "AUC, which is not rounded, still tells such rows apart. Cells at 0.0 ± 0.0: "
            + shown + ".")


def _marker(r: pd.Series) -> str:
    if r.get("sequence") == "equivalent":
        return SAME
    return {1: UP, -1: DOWN}.get(direction(r), "")


def marker_note(adaptive: dict | None, folds: bool = False) -> str:
    """What the main table's markers mean: fixed-n tests (`folds`: some over the folds of a
    k-fold cross-validation), or an adaptive study's decisions."""
    if adaptive is None:
        test = (f"exact sign-flip test over ≥ {stats.MIN_PAIRED_SEEDS} shared seeds" if not folds
                else f"over ≥ {stats.MIN_PAIRED_SEEDS} shared folds where the runs are folds of "
                "a k-fold cross-validation, the corrected resampled t-test; else the exact "
                "sign-flip test over shared seeds")
        return (f"{UP}/{DOWN} = significantly higher/lower than the row's first baseline, the "
                f"row differing from it in one axis only ({test}, Holm-adjusted p < {ALPHA}).")
    opts = adaptive["options"]
    what = ("the AUC column" if opts.get("metric") == "auc"
            else "its split's accuracy column (each dataset's decision split)")
    return (f"{UP}/{DOWN}/{SAME}: seeds were added adaptively, so the markers are the decisions "
            "of the study's confidence sequence (adaptive.json; the adaptive-seed section's "
            "table), which hold under its optional stopping: higher / lower than the row's "
            f"first baseline, or equivalent within ±{100 * opts['equivalence']:g} points, on "
            f"{what}. A cell the sequence did not decide has no marker: a fixed-n test on the "
            "seeds an adaptive study happened to run does not hold its level, and none is "
            "marked from one.")


def main_table(cells: pd.DataFrame, rows: list[str], runs: dict[str, int],
               notes: list[str], adaptive: dict | None = None) -> Table:
    """The paper's table layout (SPEC §5): rows = model variants, columns = per dataset
    accuracy per test split and attention AUC; mean ± std, best per column bold, ↑/↓ =
    significant (on an adaptive-seed study, `adaptive` its decisions file: the sequence's
    decisions, `marker_note`)."""
    layout = list(columns_of(cells).items())
    header = [[("", 1), ("", 1)] + [(dataset_name(d), len(cs)) for d, cs in layout],
              [("Model", 1), ("n", 1)] + [(column_name(c), 1) for _, cs in layout for c in cs]]
    cells = primary(cells)
    folds = "test" in cells.columns and bool((cells["test"] == stats.CORRECTED_T).any())
    idx = cells.set_index(["row", "dataset", "column"])
    body, bold = [], []
    for r in rows:
        line, b = [r, str(runs.get(r, 0))], [False, False]
        for d, cs in layout:
            for c in cs:
                if (r, d, c) in idx.index:
                    x = idx.loc[(r, d, c)]
                    line.append(fmt_pm(x["mean"], x["std"]) + _marker(x))
                    b.append(bool(x["best"]))
                else:
                    line.append("")
                    b.append(False)
        body.append(line)
        bold.append(b)
    wide = cells.pivot_table(index="row", columns=["dataset", "column"],
                             values=["mean", "std"], aggfunc="first", sort=False)
    wide.columns = [f"{d}.{c}.{s}" for s, d, c in wide.columns]
    wide = wide.reindex(rows).reset_index()
    notes = ["Accuracy (%) per test split and attention AUC (%, first pooling layer, pooled "
             "over the nodes of all test graphs as the papers report it: COLORS ORIG + LARGE + "
             "LARGE-C, TRIANGLES ORIG + LARGE); mean ± std over n runs (seeds x trials, per "
             "dataset); bold = best in column; " + marker_note(adaptive, folds) + " Rows and "
             f"columns as in the results table of {PAPER} ({WORKSHOP})."] + notes
    zero = zero_count_note(cells)
    if zero:
        notes.append(zero)
    return Table("main", "Accuracy and attention AUC (the paper's table layout)", header, body,
                 bold, wide, notes)


def reaches(paper: float, lo: float, hi: float) -> str:
    """Whether our runs reach a published mean: it lies inside our 95% CI ('yes'), or ours is
    below / above it; 'too few runs' where there is no interval."""
    if not (np.isfinite(lo) and np.isfinite(hi)) or not np.isfinite(paper):
        return "too few runs"
    if lo <= paper <= hi:
        return "yes"
    return "no: ours below" if hi < paper else "no: ours above"


def paper_table(cells: pd.DataFrame, rows: list[str], reduced: set[str]) -> Table | None:
    """Our number beside the paper's, with the difference, for every cell with a reference; a
    cell the authors' logs also report (MNIST-75SP) gets a second line with their number."""
    lines = []
    for _, x in primary(cells).iterrows():
        refs = [(x["paper"], x["paper_std"], x["paper_source"])] if np.isfinite(x["paper"]) else []
        nodes = x.get("train_nodes")
        log = logged(x["variant"], x["dataset"], x["column"],
                     None if nodes is None or nodes != nodes else int(nodes))
        if log is not None:
            refs.append((log.mean, math.nan, log.source))
        lines += [{**x.to_dict(), "paper": m, "paper_std": sd, "paper_source": src,
                   "diff_paper": x["mean"] - m} for m, sd, src in refs]
    if not lines:
        return None
    c = pd.DataFrame(lines)
    rank = {r: i for i, r in enumerate(rows)}
    c = c.sort_values(["row", "dataset"], key=lambda s: s.map(rank) if s.name == "row" else s,
                      kind="stable")
    header = [[("Model", 1), ("Dataset", 1), ("Column", 1), ("Ours", 1),
               ("Ours, 95% CI of the mean", 1), ("Paper", 1), ("Δ (ours − paper)", 1),
               ("Reaches it?", 1), ("Source", 1)]]
    body, bold = [], []
    for _, x in c.iterrows():
        paper = _num(x["paper"]) + (f" ± {_num(x['paper_std'])}"
                                    if np.isfinite(x["paper_std"]) else "")
        body.append([x["row"], dataset_name(x["dataset"]) + (" †" if x["dataset"] in reduced
                                                              else ""),
                     column_name(x["column"]), fmt_pm(x["mean"], x["std"]),
                     fmt_interval(x["ci_lo"], x["ci_hi"]), paper, f"{x['diff_paper']:+.1f}",
                     reaches(x["paper"], x["ci_lo"], x["ci_hi"]), x["paper_source"]])
        bold.append([False] * 9)
    notes = [f"Paper numbers: {PAPER}; 'workshop' = the results table of {WORKSHOP}, "
             "'final' = the NeurIPS version's ChebyGIN numbers, used where they exist. Δ in "
             "percentage points. 95% CI: Student-t "
             "interval of our mean over its n runs (none below "
             f"{stats.MIN_PAIRED_SEEDS} runs). The paper's number is a mean over seeds too, "
             "with noise of its own, so a paper number just outside our CI is not yet a "
             "difference: on COLORS LARGE-C a row moves by about ±11 points from seed to "
             "seed, and two 10-seed means of one implementation can differ by 12 (docs/fidelity.md). "
             "Reaches it?: 'yes' when the published mean lies inside our 95% CI, else whether "
             "ours is below or above it ('too few runs' without a CI). On MNIST-75SP NOISY the "
             "seeds of one code spread by several points (docs/fidelity.md, both codes side by "
             "side): a few seeds cannot tell a 2-point difference, and 92.3 ± 0.4 is a spread "
             "neither code shows seed to seed."]
    if (c["paper_source"] == LOG_SOURCE).any():
        notes.append(f"{LOG_SOURCE}: the MNIST-75SP logs of the authors' final code (their "
                     f"script {MNIST_SCRIPT}, trained on all 60,000 images, one seed: 111), a "
                     "source of its own: the paper's clean MNIST-75SP figures come from its "
                     "workshop version, which that code does not reproduce.")
    if c["paper_source"].isin([PAPER_TU_SOURCE, NOTEBOOK_SOURCE]).any():
        notes.append(f"TU data (test = every graph not trained on): {PAPER_TU_SOURCE} = the paper's "
                     "weakly supervised ChebyNet, without a std, whose D&D split (training graphs "
                     f"N <= 200 or <= 300) is not stated; {NOTEBOOK_SOURCE} = the authors' notebook "
                     "before their hyper-parameter tuning, per split (its weak D&D-300 model had "
                     "a hidden attention layer of 32). Two sources of their own; see "
                     "docs/fidelity.md for the authors' code run here on the same splits.")
    zero = zero_count_note(c.drop_duplicates(["row", "dataset", "column"]))  # the cells shown
    if zero:
        notes.append(zero)
    if reduced:
        notes.append("† trained on a dataset recipe that differs from the paper's (data_params): "
                      "not comparable.")
    data = c[["row", "dataset", "column", "n", "mean", "std", "ci_lo", "ci_hi", "paper",
              "paper_std", "diff_paper", "paper_source"]]
    return Table("paper", "Our numbers beside the paper's", header, body, bold, data, notes,
                 align="lllrrrrl")


def stats_table(cells: pd.DataFrame) -> Table:
    """Every cell's n, mean ± std, 95% CI and its one-axis comparisons (one line each); on an
    adaptive-seed study (a `sequence` column) also the sequence's decision, which the bold
    then follows."""
    adaptive = "sequence" in cells.columns
    header = [[("Model", 1), ("Dataset", 1), ("Column", 1), ("n", 1), ("mean ± std", 1),
               ("95% CI", 1), ("vs (one axis)", 1), ("pairs", 1), ("test", 1),
               ("Δ [95% CI]", 1), ("p", 1), ("p Holm", 1)]
              + ([("Sequence", 1)] if adaptive else [])]
    body, bold = [], []
    for _, x in cells.iterrows():
        has = x["n_pairs"] > 0
        vs = f"{x['axis']}={x['base_value']}" if x["axis"] else "–"
        body.append([x["row"], dataset_name(x["dataset"]), column_name(x["column"]),
                     str(x["n"]), fmt_pm(x["mean"], x["std"]),
                     fmt_interval(x["ci_lo"], x["ci_hi"]),
                     vs,
                     str(x["n_pairs"]) if x["axis"] else "–",
                     x["test"] if has and x["test"] else "–",
                     f"{x['delta']:+.1f} {fmt_ci(x['delta_lo'], x['delta_hi'])}" if has else "–",
                     fmt_p(x["p"]), fmt_p(x["p_holm"])] + ([x["sequence"] or "–"] if adaptive
                                                            else []))
        bold.append([False] * 11 + [significant(x)] * (2 if adaptive else 1))
    notes = [f"CI: Student-t interval of the mean (only from {stats.MIN_PAIRED_SEEDS} runs "
             "on). vs: the baseline row, "
             "which differs from this row only in that axis (its value shown). Δ: mean paired "
             "difference over shared seeds (runs of one seed averaged); p (test sign-flip): exact "
             "paired sign-flip (permutation) test of Δ, and the 95% CI of Δ is that test inverted, so "
             "it excludes 0 exactly when p < 0.05; p Holm: adjusted over every tested "
             "comparison of the study (bold < 0.05). Comparisons with fewer than "
             f"{stats.MIN_PAIRED_SEEDS} shared seeds show Δ only; with n pairs p ≥ 2/2^n, so the "
             "CI stays unbounded (±∞) below 6 pairs."]
    if (cells["test"] == stats.CORRECTED_T).any():
        notes.append(f"test {stats.CORRECTED_T}: both rows' runs are folds of one k-fold "
                     "cross-validation, so the unit is the fold: per fold the mean over its "
                     "seeds (they share its test graphs), paired over the folds both rows have "
                     "(pairs counts folds), and the corrected resampled t-test of Nadeau & "
                     "Bengio (2003): variance (1/k + 1/(K − 1))·s² of the k per-fold "
                     "differences for K-fold CV, t with k − 1 degrees of freedom, p and the 95% "
                     "CI of Δ from it (the folds' training sets overlap: the plain paired t "
                     f"over folds is too liberal); from {stats.MIN_PAIRED_SEEDS} folds on. A "
                     "fold is a fold of one partition: where each seed drew its own "
                     "(data.split_seed: seed) every (seed, fold) is a unit, k = seeds × K "
                     "(Bouckaert & Frank's corrected repeated k-fold CV test).")
    if adaptive:
        notes.append("This study added seeds adaptively, where its confidence sequence had not "
                     "decided yet: p, p Holm and the CI of Δ are fixed-n numbers on the seeds it "
                     "happened to run and do not hold their level after that optional stopping "
                     "(read them as descriptive). Sequence: the stored decision of the "
                     "comparison on that column (greater, less, equivalent, open; – where the "
                     "sequence decided nothing); bold follows it.")
    return Table("stats", "Statistics per cell", header, body, bold, cells, notes,
                 align="lllrrrlrlrrr" + ("l" if adaptive else ""))


def layers_table(ok: pd.DataFrame, rows: list[str]) -> Table | None:
    """Attention AUC and ratio of nodes kept per pooling layer on TEST-ORIG (and LARGE)."""
    auc_cols, kept_cols = layer_columns(ok, "attn_auc"), layer_columns(ok, "ratio_kept")
    if not kept_cols and len(auc_cols) < 2:
        return None
    metrics = [*auc_cols, *kept_cols]
    sub = ok[["row", "dataset", "split", *metrics]]
    sub = sub[sub["split"].isin(["test_orig", "test_large"])]
    sub = sub[sub[metrics].notna().any(axis=1)]
    if sub.empty:
        return None
    pairs = sub[["dataset", "split"]].drop_duplicates()
    groups = sorted(zip(pairs["dataset"].tolist(), pairs["split"].tolist()),
                    key=lambda g: (g[0], TEST_SPLITS.index(g[1])))
    metrics = [m for m in metrics if sub[m].notna().any()]
    header = [[("", 1)] + [(f"{dataset_name(d)} {column_name(s)}", len(metrics))
                           for d, s in groups],
              [("Model", 1)] + [(_metric_name(m), 1) for _ in groups for m in metrics]]
    agg = sub.groupby(["row", "dataset", "split"])[metrics].agg(["mean", "std"])
    body, bold = [], []
    have = set(sub["row"].unique())
    present = [r for r in rows if r in have]
    for r in present:
        line = [r]
        for d, s in groups:
            for m in metrics:
                if (r, d, s) in agg.index:
                    line.append(fmt_pm(100 * agg.loc[(r, d, s), (m, "mean")],
                                       100 * agg.loc[(r, d, s), (m, "std")]))
                else:
                    line.append("")
        body.append(line)
        bold.append([False] * len(line))
    data = agg.copy()
    data.columns = [f"{m}.{a}" for m, a in data.columns]
    return Table("layers", "Attention per pooling layer", header, body, bold,
                 data.reset_index(), ["AUC and ratio of nodes kept (N_kept / N, mean over "
                                      "graphs) per pooling layer, in %, mean ± std over runs."])


def _metric_name(m: str) -> str:
    kind, layer = m.rsplit("_l", 1)
    return f"{'AUC' if kind == 'attn_auc' else 'kept'} L{layer}"


SDC_METRICS = (("accuracy", "Acc", 100), ("ft", "FT", 100), ("nnz", "NNZ", 100),
               ("dist", "Dist", 1), ("ent", "Ent", 1))


def sdc_table(ok: pd.DataFrame, by: list[str]) -> Table | None:
    """Selective-dependence rows: accuracy, FT, NNZ, Dist, Ent per normaliser (Pandey et al.)."""
    sdc = ok[ok["dataset"].str.startswith("sdc")]
    if sdc.empty:
        return None
    for test in ("test_orig", "test"):  # the test split; else every non-validation split
        if (sdc["split"] == test).any():
            sdc = sdc[sdc["split"] == test]
            break
    else:
        if (sdc["split"] != "val").any():
            sdc = sdc[sdc["split"] != "val"]
    metrics = [(m, n, s) for m, n, s in SDC_METRICS if m in sdc.columns]
    keys = ["dataset", *[b for b in by if b in sdc.columns and b != "dataset"]]
    header = [[(k, 1) for k in keys] + [("runs", 1)] + [(n, 1) for _, n, _ in metrics]
              + [("paper Acc / FT", 1)]]
    body, bold, recs = [], [], []
    for key, g in sdc.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        line = [str(k) for k in key] + [str(len(g))]
        rec = dict(zip(keys, key), runs=len(g))
        for m, _, scale in metrics:
            mean, std = stats.mean_std(scale * g[m].to_numpy(dtype=float))
            line.append(fmt_pm(mean, std, 1 if scale == 100 else 3))
            rec[f"{m}_mean"], rec[f"{m}_std"] = mean, std
        norm = dict(zip(keys, key)).get("normalizer", "")
        ref = SDC_REFERENCE.get(str(norm)) if "cifar" in str(key[0]) else None
        line.append(f"{ref['accuracy']:.1f} / {ref['ft']:.1f}" if ref else "")
        body.append(line)
        bold.append([False] * len(line))
        recs.append(rec)
    return Table("sdc", "Accuracy and attention per normaliser (Table 2 of Pandey et al.)",
                 header, body, bold,
                 pd.DataFrame(recs), ["Acc, FT (foreground segment has the top score), NNZ "
                                      "(fraction of alpha > 0.01) in %; Dist = min_i ||alpha - "
                                      "e_i||, Ent = entropy of alpha; mean ± std over runs. "
                                      "Paper: Pandey et al., CIFAR-SDC."],
                 align="l" * len(keys) + "r" * (len(metrics) + 2))
