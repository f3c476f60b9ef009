"""Automatically computed findings: three to five sentences a researcher would write.

Each candidate is computed from the study's cell statistics (`tables.cell_stats`) and
the numbers the figures computed (exponential fits, correlations); candidates are
taken in priority order: the largest paired effect on a generalisation split, the
largest effect on attention AUC, the best model per dataset, the accuracy-AUC
relation, the init-AUC relation, agreement with the paper, and a power caveat.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import stats
from analysis.reference import AUC_COLUMN
from analysis.tables import ALPHA, column_name, dataset_name, fmt_p

GENERALISATION = ("test_large", "test_largec", "test_noisy", "test_noisyc")
PAPER_R_ACC_AUC = 0.93  # SPEC §3: accuracy vs attention AUC
PAPER_R_AUC_COS = 0.41  # SPEC §3: attention AUC vs cos(p_init, p_opt)


def _what(column: str) -> str:
    return "attention AUC" if column == AUC_COLUMN else f"{column_name(column)} accuracy"


def _effect(x: pd.Series) -> str:
    verb = "raises" if x["delta"] > 0 else "lowers"
    sig = "significant" if np.isfinite(x["p_holm"]) and x["p_holm"] < ALPHA else "not significant"
    p = fmt_p(x["p_wilcoxon"])
    return (f"{x['row']} {verb} {dataset_name(x['dataset'])} {_what(x['column'])} by "
            f"{abs(x['delta']):.1f} points over {x['baseline']} "
            f"(95% CI [{x['delta_lo']:+.1f}, {x['delta_hi']:+.1f}], Wilcoxon "
            f"p {'' if p.startswith('<') else '= '}{p}, Holm p {_p_eq(x['p_holm'])}, "
            f"{x['n_pairs']} paired seeds; {sig}).")


def _p_eq(p: float) -> str:
    s = fmt_p(p)
    return s if s.startswith("<") else f"= {s}"


def _largest_effect(cells: pd.DataFrame, columns: tuple[str, ...]) -> pd.Series | None:
    c = cells[(cells["n_pairs"] > 0) & cells["column"].isin(columns)
              & np.isfinite(cells["delta"].to_numpy(dtype=float))]
    if c.empty:
        return None
    sig = c[c["p_holm"] < ALPHA]
    pool = sig if not sig.empty else c
    return pool.loc[pool["delta"].abs().idxmax()]


def effect_findings(cells: pd.DataFrame) -> list[str]:
    """The largest paired effect on a generalisation split and on attention AUC."""
    out = []
    splits = tuple(c for c in GENERALISATION if c in set(cells["column"].unique())) or \
        tuple(c for c in cells["column"].unique() if c != AUC_COLUMN)
    for cols in (splits, (AUC_COLUMN,)):
        x = _largest_effect(cells, cols)
        if x is not None:
            out.append(_effect(x))
    return out


def best_findings(cells: pd.DataFrame) -> list[str]:
    """The best model per dataset on its hardest (lowest-mean) test split."""
    out = []
    for d, g in cells[cells["column"] != AUC_COLUMN].groupby("dataset"):
        hard = g.groupby("column")["mean"].mean().idxmin()
        h = g[g["column"] == hard]
        if h["row"].nunique() < 2:
            continue
        x = h.loc[h["mean"].idxmax()]
        ref = (f"; the paper reports {x['paper']:.1f}" if np.isfinite(x["paper"]) else "")
        out.append(f"On {dataset_name(d)} {column_name(hard)} (its hardest split) the best model "
                   f"is {x['row']}: {x['mean']:.1f} ± {x['std']:.1f}% over {x['n']} runs "
                   f"(95% CI [{x['ci_lo']:.1f}, {x['ci_hi']:.1f}]){ref}.")
    return out[:2]


def fit_findings(fits: dict[str, dict]) -> list[str]:
    """Accuracy vs attention AUC: correlation and the exponential fit, largest panel."""
    good = {k: v for k, v in fits.items() if v.get("n", 0) >= 5 and np.isfinite(v["pearson_r"])}
    if not good:
        return []
    key = max(good, key=lambda k: (good[k]["n"], k))
    f = good[key]
    d, sp = key.split("/")
    shape = (f"fit acc = {f['a']:.3g}·exp({f['b']:.3g}·AUC) {'+' if f['c'] >= 0 else '−'} "
             f"{abs(f['c']):.3g} (R² = {f['r2']:.2f})" if f["method"] != "none"
             else "no exponential fit")
    r = f["pearson_r"]
    how = ("rises with" if r >= 0.5 else "is only weakly related to" if abs(r) < 0.5
           else "falls with")
    return [f"Accuracy {how} attention AUC on {dataset_name(d)} {column_name(sp)}: "
            f"Pearson r = {r:.2f} over {f['n']} runs (paper: r ≈ {PAPER_R_ACC_AUC}); {shape}."]


def init_findings(info: dict[str, dict]) -> list[str]:
    """Attention AUC vs cos(p_init, p_opt) (the init study)."""
    out = []
    for key, v in info.items():
        if key.endswith("/auc") and v["n"] >= 5 and np.isfinite(v["pearson_r"]):
            out.append(f"A better initial attention projection gives better attention on "
                       f"{dataset_name(key.split('/')[0])}: AUC vs cos(p_init, p_opt) Pearson "
                       f"r = {v['pearson_r']:.2f} (p {_p_eq(v['pearson_p'])}, n = {v['n']}; "
                       f"paper: r ≈ {PAPER_R_AUC_COS}).")
    return out[:1]


def paper_findings(cells: pd.DataFrame, tolerance: float = 5.0) -> list[str]:
    """How many cells are within `tolerance` points of the paper, and the largest gap."""
    c = cells[np.isfinite(cells["paper"].to_numpy(dtype=float))]
    if c.empty:
        return []
    close = int((c["diff_paper"].abs() <= tolerance).sum())
    x = c.loc[c["diff_paper"].abs().idxmax()]
    return [f"{close} of {len(c)} cells with a paper number are within ±{tolerance:g} points of "
            f"it; the largest gap is {x['row']} on {dataset_name(x['dataset'])} "
            f"{column_name(x['column'])}: {x['mean']:.1f} vs {x['paper']:.1f} "
            f"({x['diff_paper']:+.1f})."]


def power_findings(cells: pd.DataFrame) -> list[str]:
    """A caveat when no paired test can reach significance with the seeds run."""
    n = cells.loc[cells["n_pairs"] > 0, "n_pairs"]
    if n.empty or stats.min_wilcoxon_p(int(n.max())) < ALPHA:
        return []
    return [f"With at most {int(n.max())} shared seeds per comparison no Wilcoxon test can reach "
            f"p < {ALPHA} (smallest possible p = {stats.min_wilcoxon_p(int(n.max())):.3f}): "
            "run at least 6 seeds per variant before calling a difference significant."]


def findings(cells: pd.DataFrame, fig_info: dict[str, dict], limit: int = 5) -> list[str]:
    """Three to five findings in priority order (fewer only when the data has no more)."""
    effects = effect_findings(cells) if not cells.empty else []
    out: list[str] = effects[:1]
    out += fit_findings(fig_info.get("acc_vs_auc", {}).get("fits", {}))
    out += init_findings(fig_info.get("init_cos", {}))
    if not cells.empty:
        out += power_findings(cells)
        out += best_findings(cells)[:1]
        out += effects[1:]
        out += paper_findings(cells)
        out += best_findings(cells)[1:]
    return out[:limit]
