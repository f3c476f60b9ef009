"""Tables of a study: the SPEC §5 layout, the paper comparison, statistics, attention layers.

`cell_stats` computes one row of numbers per (table row, dataset, column, one-axis
comparison): n runs and seeds, mean, std, 95% bootstrap CI, the paired comparison with
the baseline over shared seeds (exact sign-flip test and the CI inverting it, Holm-adjusted
over the study; only with at least `stats.MIN_PAIRED_SEEDS` shared seeds), and the paper's
number. The `*_table` functions lay those numbers out as `Table`s, which render to
Markdown, LaTeX (booktabs) and HTML (wide tables cut into parts) and save their numbers
as CSV. Accuracy and AUC are shown in percent.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from analysis import stats
from analysis.load import layer_columns
from analysis.reference import AUC_COLUMN, AUC_SPLIT, POOLED_AUC, SDC_REFERENCE, reference
from analysis.variants import Comparison

TEST_SPLITS = ("test_orig", "test_large", "test_largec", "test_noisy", "test_noisyc", "test")
SPLIT_NAMES = {"val": "VAL", "test_orig": "ORIG", "test_large": "LARGE",
               "test_largec": "LARGE-C", "test_noisy": "NOISY", "test_noisyc": "NOISY-C",
               "test": "TEST", AUC_COLUMN: "AUC"}
DATASET_NAMES = {"colors": "COLORS", "triangles": "TRIANGLES", "mnist_sp": "MNIST-75SP",
                 "digits_sp": "DIGITS-SP", "proteins": "PROTEINS", "dd": "D&D",
                 "collab": "COLLAB"}
ALPHA = 0.05  # significance level of the markers (Holm-adjusted sign-flip p)
UP, DOWN = "↑", "↓"
MAX_HTML_COLUMNS = 8  # value columns per HTML table part: wider tables are cut into parts


def dataset_name(d: str) -> str:
    return DATASET_NAMES.get(d, d.upper())


def column_name(c: str) -> str:
    return SPLIT_NAMES.get(c, c)


# ----------------------------------------------------------------------------- numbers


def observations(ok: pd.DataFrame) -> pd.DataFrame:
    """One value (percent) per (row, dataset, column, trial, seed): test accuracies and AUC."""
    keep = ["row", "variant", "dataset", "trial_id", "seed"]
    ok = ok[[c for c in [*keep, "split", "accuracy", "attn_auc_l0", POOLED_AUC]
             if c in ok.columns]]
    acc = ok[ok["split"].isin(TEST_SPLITS)]
    parts = [acc[keep].assign(column=acc["split"].to_numpy(),
                              value=100 * acc["accuracy"].to_numpy(dtype=float))
             ] if "accuracy" in ok.columns else []
    auc = ok[ok["split"] == AUC_SPLIT]  # one row per seed (the pooled value is on every row)
    if POOLED_AUC in ok.columns:  # as the papers pool it: all test graphs of the seed together
        values = auc[POOLED_AUC].to_numpy(dtype=float)
        if "attn_auc_l0" in auc.columns:  # stores written before the pooled column existed
            values = np.where(np.isfinite(values), values, auc["attn_auc_l0"].to_numpy(dtype=float))
        parts.append(auc[keep].assign(column=AUC_COLUMN, value=100 * values))
    elif "attn_auc_l0" in ok.columns:
        parts.append(auc[keep].assign(column=AUC_COLUMN,
                                      value=100 * auc["attn_auc_l0"].to_numpy(dtype=float)))
    if not parts:
        return pd.DataFrame(columns=[*keep, "column", "value"])
    obs = pd.concat(parts, ignore_index=True)
    return obs[np.isfinite(obs["value"].to_numpy(dtype=float))]


def columns_of(obs: pd.DataFrame) -> dict[str, list[str]]:
    """Dataset -> its table columns (test splits in canonical order, then AUC)."""
    order = [*TEST_SPLITS, AUC_COLUMN]
    out: dict[str, list[str]] = {}
    for d, cols in obs.groupby("dataset", sort=True)["column"]:
        present = set(cols)
        out[str(d)] = [c for c in order if c in present]
    return out


CELL_COLUMNS = ["row", "variant", "dataset", "column", "n", "seeds", "mean", "std", "ci_lo",
                "ci_hi", "baseline", "axis", "base_value", "value", "primary", "n_pairs", "delta",
                "delta_lo", "delta_hi", "p", "p_holm", "paper", "paper_std", "paper_source",
                "diff_paper", "best"]


def cell_stats(ok: pd.DataFrame, comparisons: dict[str, list[Comparison]], rows: list[str],
               n_boot: int = stats.N_BOOT) -> pd.DataFrame:
    """Numbers of every (row, dataset, column) cell, one line per comparison of the row (one
    line without a baseline when it has none); `primary` marks the line of the row's first
    comparison, the one the main table marks. Below MIN_PAIRED_SEEDS shared seeds a
    comparison keeps its Δ but gets no p-value and no CI."""
    obs = observations(ok)
    recs = []
    per_seed = obs.groupby(["row", "dataset", "column", "seed"], sort=False)["value"].mean()
    seeds_of = {k: g.droplevel([0, 1, 2]) for k, g in per_seed.groupby(
        level=["row", "dataset", "column"], sort=False)}
    pairs = obs[["row", "variant"]].drop_duplicates()
    variant_of = dict(zip(pairs["row"].tolist(), pairs["variant"].tolist()))
    for (row, dset, col), g in obs.groupby(["row", "dataset", "column"], sort=False):
        v = g["value"].to_numpy(dtype=float)
        mean, std = stats.mean_std(v)
        lo, hi = stats.bootstrap_ci(v, n_boot=n_boot) if v.size >= stats.MIN_PAIRED_SEEDS \
            else (math.nan, math.nan)  # a percentile CI of 2-4 runs is [min, max], not a CI
        ref = reference(variant_of[row], dset, col)
        cell = {"row": row, "variant": variant_of[row], "dataset": dset, "column": col,
                "n": int(v.size), "seeds": int(seeds_of[(row, dset, col)].size), "mean": mean,
                "std": std, "ci_lo": lo, "ci_hi": hi,
                "paper": ref.mean if ref else math.nan,
                "paper_std": ref.std if ref and ref.std is not None else math.nan,
                "paper_source": ref.source if ref else ""}
        comps = comparisons.get(row) or [None]
        for i, comp in enumerate(comps):
            recs.append({**cell, **_compare(comp, seeds_of, (row, dset, col), n_boot),
                         "primary": i == 0})
    if not recs:
        return pd.DataFrame(columns=CELL_COLUMNS)
    out = pd.DataFrame(recs)
    out["p_holm"] = stats.holm(out["p"].to_numpy(dtype=float))
    out["diff_paper"] = out["mean"] - out["paper"]
    best = out.groupby(["dataset", "column"])["mean"].transform("max")
    out["best"] = np.isclose(out["mean"], best, rtol=0, atol=1e-9)
    rank = {r: i for i, r in enumerate(rows)}
    order = {c: i for i, c in enumerate([*TEST_SPLITS, AUC_COLUMN])}
    out["_r"] = out["row"].map(rank).fillna(len(rank))
    out["_c"] = out["column"].map(order).fillna(len(order))
    out = out.sort_values(["_r", "dataset", "_c", "primary"], ascending=[True, True, True, False],
                          kind="stable")
    return out[CELL_COLUMNS].reset_index(drop=True)


def _compare(comp: Comparison | None, seeds_of: dict, key: tuple, n_boot: int) -> dict:
    """The comparison columns of one cell line."""
    rec = {"baseline": None, "axis": "", "base_value": "", "value": "", "n_pairs": 0,
           "delta": math.nan, "delta_lo": math.nan, "delta_hi": math.nan, "p": math.nan}
    if comp is None:
        return rec
    rec.update(baseline=comp.baseline, axis=comp.axis, base_value=comp.base_value,
               value=comp.value)
    bkey = (comp.baseline, *key[1:])
    if bkey not in seeds_of:
        return rec
    a, b = seeds_of[key], seeds_of[bkey]
    shared = a.index.intersection(b.index)
    if not len(shared):
        return rec
    pr = stats.paired(a.loc[shared].to_numpy(), b.loc[shared].to_numpy(), alpha=ALPHA,
                      n_perm=n_boot)
    rec.update(n_pairs=pr.n, delta=pr.delta)
    if pr.n >= stats.MIN_PAIRED_SEEDS:
        rec.update(delta_lo=pr.ci_lo, delta_hi=pr.ci_hi, p=pr.p)
    return rec


# ----------------------------------------------------------------------------- layout


@dataclass
class Table:
    """A rendered table: header rows of (text, colspan), body rows, bold flags, notes."""

    name: str  # file stem
    title: str
    header: list[list[tuple[str, int]]]
    body: list[list[str]]
    bold: list[list[bool]]
    data: pd.DataFrame  # the numbers, saved as CSV
    notes: list[str] = field(default_factory=list)
    align: str = ""  # LaTeX column spec; default l + r...

    def to_markdown(self) -> str:
        width = len(self.body[0]) if self.body else sum(s for _, s in self.header[-1])
        names = [""] * width
        for hrow in self.header:
            i = 0
            for text, span in hrow:
                for j in range(i, i + span):
                    names[j] = (names[j] + " " + text).strip() if text else names[j]
                i += span
        spec = self.align if len(self.align) == width else "l" + "r" * (width - 1)
        lines = ["| " + " | ".join(_md_escape(n) for n in names) + " |",
                 "|" + "|".join(":---" if a == "l" else "---:" for a in spec) + "|"]
        for cells, bolds in zip(self.body, self.bold):
            lines.append("| " + " | ".join(f"**{_md_escape(c)}**" if b and c else _md_escape(c)
                                           for c, b in zip(cells, bolds)) + " |")
        out = "\n".join(lines)
        if self.notes:
            out += "\n\n" + "\n".join(f"*{n}*  " for n in self.notes)
        return out

    def to_latex(self, label: str = "") -> str:
        width = len(self.body[0]) if self.body else sum(s for _, s in self.header[-1])
        spec = self.align or "l" + "r" * (width - 1)
        lines = [r"\begin{table}[t]", r"\centering", r"\small",
                 rf"\caption{{{_tex(self.title)}}}"]
        if label:
            lines.append(rf"\label{{{label}}}")
        lines += [rf"\begin{{tabular}}{{{spec}}}", r"\toprule"]
        for k, hrow in enumerate(self.header):
            cells, rules, i = [], [], 1
            for text, span in hrow:
                if span > 1:
                    cells.append(rf"\multicolumn{{{span}}}{{c}}{{{_tex(text)}}}")
                    if k < len(self.header) - 1 and text:
                        rules.append(rf"\cmidrule(lr){{{i}-{i + span - 1}}}")
                else:
                    cells.append(_tex(text))
                i += span
            lines.append(" & ".join(cells) + r" \\")
            if rules:
                lines.append(" ".join(rules))
        lines.append(r"\midrule")
        for cells, bolds in zip(self.body, self.bold):
            lines.append(" & ".join(rf"\textbf{{{_tex(c)}}}" if b and c else _tex(c)
                                    for c, b in zip(cells, bolds)) + r" \\")
        lines += [r"\bottomrule", r"\end{tabular}"]
        if self.notes:
            lines.append(r"\par\smallskip\footnotesize " + " ".join(_tex(n) for n in self.notes))
        lines.append(r"\end{table}")
        return "\n".join(lines) + "\n"

    def to_html(self, max_cols: int = MAX_HTML_COLUMNS) -> str:
        """HTML tables: one, or several parts of at most `max_cols` value columns (each
        repeating the key columns) when the table is wider, so nothing is cut off."""
        out = []
        for part in self.column_parts(max_cols):
            out += ['<table class="t">', "<thead>"]
            for hrow in part.header:
                out.append("<tr>" + "".join(
                    f'<th colspan="{s}">{html.escape(t)}</th>' if s > 1
                    else f"<th>{html.escape(t)}</th>" for t, s in hrow) + "</tr>")
            out.append("</thead><tbody>")
            for cells, bolds in zip(part.body, part.bold):
                out.append("<tr>" + "".join(
                    f"<td><b>{html.escape(c)}</b></td>" if b and c else f"<td>{html.escape(c)}</td>"
                    for c, b in zip(cells, bolds)) + "</tr>")
            out.append("</tbody></table>")
        if self.notes:
            out.append("".join(f'<p class="note">{html.escape(n)}</p>' for n in self.notes))
        return "\n".join(out)

    def column_parts(self, max_cols: int = MAX_HTML_COLUMNS) -> list[Table]:
        """The table cut between its column groups (the first header row's spans) into
        parts of at most `max_cols` value columns, each repeating the leading key columns
        (those with an empty group header). A table with one header row stays whole."""
        top = self.header[0]
        keys = 0
        while keys < len(top) and top[keys] == ("", 1):
            keys += 1
        groups = [(t, n) for t, n in top[keys:]]
        if len(self.header) < 2 or sum(n for _, n in groups) <= max_cols \
                or any(len(h) != keys + sum(n for _, n in groups) for h in self.header[1:]):
            return [self]
        pieces: list[tuple[str, int, int]] = []  # (group text, first value column, width)
        start = keys
        for text, n in groups:
            for off in range(0, n, max_cols):
                pieces.append((text, start + off, min(max_cols, n - off)))
            start += n
        parts, cur = [], []
        for piece in pieces:
            if cur and sum(w for _, _, w in cur) + piece[2] > max_cols:
                parts.append(cur)
                cur = []
            cur.append(piece)
        parts.append(cur)
        out = []
        for part in parts:
            cols = list(range(keys)) + [c for _, c0, w in part for c in range(c0, c0 + w)]
            header = [top[:keys] + [(t, w) for t, _, w in part]]
            header += [[h[c] for c in cols] for h in self.header[1:]]
            out.append(Table(self.name, self.title, header, [[r[c] for c in cols] for r in self.body],
                             [[b[c] for c in cols] for b in self.bold], self.data))
        return out

    def save(self, folder: Path, stem: str) -> list[Path]:
        """Write stem.md, stem.tex and stem.csv into `folder`; returns the paths."""
        folder.mkdir(parents=True, exist_ok=True)
        paths = [folder / f"{stem}.md", folder / f"{stem}.tex", folder / f"{stem}.csv"]
        paths[0].write_text(f"### {self.title}\n\n{self.to_markdown()}\n", encoding="utf-8")
        paths[1].write_text(self.to_latex(label=f"tab:{stem}"), encoding="utf-8")
        self.data.to_csv(paths[2], index=False)
        return paths


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
        "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}",
        "±": r"$\pm$", UP: r"$^{\uparrow}$", DOWN: r"$^{\downarrow}$", "Δ": r"$\Delta$",
        "−": "-", "–": "--", "≤": r"$\le$", "≥": r"$\ge$", "²": r"$^2$", "·": r"$\cdot$",
        "α": r"$\alpha$", "†": r"$^\dagger$", "→": r"$\rightarrow$",
        "<": r"$<$", ">": r"$>$", "§": r"\S{}", "≈": r"$\approx$", "×": r"$\times$",
        "∞": r"$\infty$"}


def _tex(s: str) -> str:
    return "".join(_TEX.get(ch, ch) for ch in s)


def fmt_pm(mean: float, std: float, digits: int = 1) -> str:
    if not np.isfinite(mean):
        return "–"
    if not np.isfinite(std):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def _num(x: float) -> str:
    """A paper number as printed: one decimal, two where the paper gives two (95.78)."""
    return f"{x:.2f}" if round(x, 1) != round(x, 2) else f"{x:.1f}"


def fmt_p(p: float) -> str:
    if not np.isfinite(p):
        return "–"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def fmt_ci(lo: float, hi: float) -> str:
    """A CI of a difference: '[+1.0, +3.5]'; unbounded ends as ∞; '–' when absent."""
    if np.isnan(lo) or np.isnan(hi):
        return "–"

    def end(x: float) -> str:
        return ("−∞" if x < 0 else "+∞") if np.isinf(x) else f"{x:+.1f}"

    return f"[{end(lo)}, {end(hi)}]"


def significant(r: pd.Series) -> bool:
    """A comparison line is significant: tested (enough paired seeds) and Holm p < ALPHA."""
    return bool(np.isfinite(r["p_holm"]) and r["p_holm"] < ALPHA)


def primary(cells: pd.DataFrame) -> pd.DataFrame:
    """One line per (row, dataset, column): the row's primary comparison (or none)."""
    return cells[cells["primary"].astype(bool)]


def _marker(r: pd.Series) -> str:
    return (UP if r["delta"] > 0 else DOWN) if significant(r) else ""


def main_table(cells: pd.DataFrame, rows: list[str], runs: dict[str, int],
               notes: list[str]) -> Table:
    """SPEC §5 layout: rows = model variants, columns = per dataset accuracy per test
    split and attention AUC; mean ± std, best per column bold, ↑/↓ = significant."""
    layout = [(d, [c for c in [*TEST_SPLITS, AUC_COLUMN]
                   if c in set(cells.loc[cells["dataset"] == d, "column"])])
              for d in sorted(cells["dataset"].unique())]
    header = [[("", 1), ("", 1)] + [(dataset_name(d), len(cs)) for d, cs in layout],
              [("Model", 1), ("n", 1)] + [(column_name(c), 1) for _, cs in layout for c in cs]]
    cells = primary(cells)
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
             "dataset); bold = best in column; "
             f"{UP}/{DOWN} = significantly higher/lower than the row's first baseline, the row "
             "differing from it in one axis only (exact sign-flip test over ≥ "
             f"{stats.MIN_PAIRED_SEEDS} shared seeds, Holm-adjusted p < {ALPHA})."] + notes
    return Table("main", "Accuracy and attention AUC (SPEC §5 layout)", header, body, bold,
                 wide, notes)


def paper_table(cells: pd.DataFrame, rows: list[str], reduced: set[str]) -> Table | None:
    """Our number beside the paper's, with the difference, for every cell with a reference."""
    cells = primary(cells)
    c = cells[np.isfinite(cells["paper"].to_numpy(dtype=float))]
    if c.empty:
        return None
    rank = {r: i for i, r in enumerate(rows)}
    c = c.sort_values(["row", "dataset"], key=lambda s: s.map(rank) if s.name == "row" else s,
                      kind="stable")
    header = [[("Model", 1), ("Dataset", 1), ("Column", 1), ("Ours", 1), ("Paper", 1),
               ("Δ (ours − paper)", 1), ("Source", 1)]]
    body, bold = [], []
    for _, x in c.iterrows():
        paper = _num(x["paper"]) + (f" ± {_num(x['paper_std'])}"
                                    if np.isfinite(x["paper_std"]) else "")
        body.append([x["row"], dataset_name(x["dataset"]) + (" †" if x["dataset"] in reduced
                                                              else ""),
                     column_name(x["column"]), fmt_pm(x["mean"], x["std"]), paper,
                     f"{x['diff_paper']:+.1f}", x["paper_source"]])
        bold.append([False] * 7)
    notes = ["Paper numbers: Knyazev et al. 2019, workshop table (SPEC §5) or, where it exists, "
             "the final version (ChebyGIN). Δ in percentage points."]
    if reduced:
        notes.append("† trained on a dataset recipe that differs from the paper's (data_params): "
                      "not comparable.")
    data = c[["row", "dataset", "column", "n", "mean", "std", "paper", "paper_std",
              "diff_paper", "paper_source"]]
    return Table("paper", "Our numbers beside the paper's", header, body, bold, data, notes,
                 align="lllrrrl")


def stats_table(cells: pd.DataFrame) -> Table:
    """Every cell's n, mean ± std, 95% CI and its one-axis comparisons (one line each)."""
    header = [[("Model", 1), ("Dataset", 1), ("Column", 1), ("n", 1), ("mean ± std", 1),
               ("95% CI", 1), ("vs (one axis)", 1), ("pairs", 1), ("Δ [95% CI]", 1),
               ("p", 1), ("p Holm", 1)]]
    body, bold = [], []
    for _, x in cells.iterrows():
        has = x["n_pairs"] > 0
        vs = f"{x['axis']}={x['base_value']}" if x["axis"] else "–"
        body.append([x["row"], dataset_name(x["dataset"]), column_name(x["column"]),
                     str(x["n"]), fmt_pm(x["mean"], x["std"]),
                     f"[{x['ci_lo']:.1f}, {x['ci_hi']:.1f}]" if np.isfinite(x["ci_lo"]) else "–",
                     vs,
                     str(x["n_pairs"]) if x["axis"] else "–",
                     f"{x['delta']:+.1f} {fmt_ci(x['delta_lo'], x['delta_hi'])}" if has else "–",
                     fmt_p(x["p"]), fmt_p(x["p_holm"])])
        bold.append([False] * 10 + [significant(x)])
    notes = [f"CI: percentile bootstrap of the mean ({stats.N_BOOT:,} resamples, seed "
             f"{stats.SEED}; only from {stats.MIN_PAIRED_SEEDS} runs on). vs: the baseline row, "
             "which differs from this row only in that axis (its value shown). Δ: mean paired "
             "difference over shared seeds (runs of one seed averaged); p: exact paired "
             "sign-flip (permutation) test of Δ, and the 95% CI of Δ is that test inverted, so "
             "it excludes 0 exactly when p < 0.05; p Holm: adjusted over every tested "
             "comparison of the study (bold < 0.05). Comparisons with fewer than "
             f"{stats.MIN_PAIRED_SEEDS} shared seeds show Δ only; with n pairs p ≥ 2/2^n, so the "
             "CI stays unbounded (±∞) below 6 pairs."]
    return Table("stats", "Statistics per cell", header, body, bold, cells, notes,
                 align="lllrrrlrrrr")


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
