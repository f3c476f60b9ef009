"""Automatically computed findings, and the banner of a store too thin for them: for the
graph-attention rows (`findings`, `thin_banner`) and the selective-dependence rows
(`sdc_findings`, `sdc_thin_banner`).

Each candidate is computed from the study's cell statistics (`cells.cell_stats`) and
the numbers the figures computed (exponential fits, correlations); candidates are
taken in priority order: the largest one-axis paired effect on a generalisation split,
the largest effect on attention AUC, the best model per dataset, the accuracy-AUC
relation, the init-AUC relation, agreement with the paper, and a power caveat.

Claims need data. A paired effect is stated only with at least
`stats.MIN_PAIRED_SEEDS` shared seeds (below that it has no p-value); "best model" and
paper-agreement sentences only use cells with that many seeds (under k-fold
cross-validation: folds, the paired test's unit there); a correlation is stated
only over at least `stats.MIN_CORRELATION_POINTS` runs from that many distinct seeds.
`thin_banner` says which rows and comparisons fall short. The SDC sentences use only
rows of the SDC table with that many runs; `sdc_thin_banner` names the others.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis import stats
from analysis.cells import ALPHA, primary, significant
from analysis.formatting import column_name, dataset_name, fmt_ci, fmt_p
from analysis.reference import AUC_COLUMN

GENERALISATION = ("test_large", "test_largec", "test_noisy", "test_noisyc")
PAPER_R_ACC_AUC = 0.93  # SPEC §3: accuracy vs attention AUC
PAPER_R_AUC_COS = 0.41  # SPEC §3: attention AUC vs cos(p_init, p_opt)
MAX_LISTED = 3  # examples named per seed count in the banner


def _what(column: str) -> str:
    return "attention AUC" if column == AUC_COLUMN else f"{column_name(column)} accuracy"


def _p_eq(p: float) -> str:
    s = fmt_p(p)
    return s if s.startswith("<") else f"= {s}"


SEQUENCE_WORDS = {"greater": "its confidence sequence decided it higher",
                  "less": "its confidence sequence decided it lower",
                  "equivalent": "its confidence sequence decided the rows equivalent",
                  "open": "its confidence sequence left it open",
                  "absent": "its confidence sequence had no such split",
                  "": "not a comparison its confidence sequence decided"}


def _effect(x: pd.Series) -> str:
    verb = "raises" if x["delta"] > 0 else "lowers"
    head = (f"Changing {x['axis']} from {x['base_value']} to {x['value']} ({x['row']} vs "
            f"{x['baseline']}, nothing else differs) {verb} {dataset_name(x['dataset'])} "
            f"{_what(x['column'])} by {abs(x['delta']):.1f} points")
    if "sequence" in x.index:  # adaptive seeds: fixed-n p-values do not survive the stopping
        return (f"{head} over {x['n_pairs']} paired seeds of an adaptive study; "
                f"{SEQUENCE_WORDS.get(x['sequence'], x['sequence'])}.")
    sig = "significant" if significant(x) else "not significant"
    ci = fmt_ci(x["delta_lo"], x["delta_hi"])
    cv = x.get("test") == stats.CORRECTED_T
    test, unit = ("corrected resampled t", "folds") if cv else ("sign-flip", "seeds")
    return (f"{head} (95% CI {ci}, {test} p {_p_eq(x['p'])}, Holm p {_p_eq(x['p_holm'])}, "
            f"{x['n_pairs']} paired {unit}; {sig}).")


def _tested(cells: pd.DataFrame) -> pd.DataFrame:
    """Comparison lines with a p-value (enough shared seeds)."""
    return cells[np.isfinite(cells["p"].to_numpy(dtype=float))]


def _largest_effect(cells: pd.DataFrame, columns: tuple[str, ...]) -> pd.Series | None:
    c = _tested(cells)
    c = c[c["column"].isin(columns)]
    if c.empty:
        return None
    sig = c[c.apply(significant, axis=1).to_numpy(dtype=bool)] if "sequence" in c.columns \
        else c[c["p_holm"] < ALPHA]
    pool = sig if not sig.empty else c
    return pool.loc[pool["delta"].abs().idxmax()]


def effect_findings(cells: pd.DataFrame) -> list[str]:
    """The largest tested one-axis effect on a generalisation split and on attention AUC."""
    out = []
    splits = tuple(c for c in GENERALISATION if c in set(cells["column"].unique())) or \
        tuple(c for c in cells["column"].unique() if c != AUC_COLUMN)
    for cols in (splits, (AUC_COLUMN,)):
        x = _largest_effect(cells, cols)
        if x is not None:
            out.append(_effect(x))
    return out


def _units(c: pd.DataFrame) -> pd.Series:
    """Each line's replicates: its cross-validation folds where it has them (the paired
    test's unit there), else its seeds."""
    if "folds" not in c.columns:
        return c["seeds"]
    folds = c["folds"].fillna(0).astype(int)
    return c["seeds"].where(folds == 0, folds)


def _seeded(cells: pd.DataFrame) -> pd.DataFrame:
    """Primary lines of cells with at least MIN_PAIRED_SEEDS seeds (folds, under CV)."""
    c = primary(cells)
    return c[_units(c) >= stats.MIN_PAIRED_SEEDS]


def best_findings(cells: pd.DataFrame) -> list[str]:
    """The best model per dataset on its hardest (lowest-mean) test split."""
    out = []
    c = _seeded(cells)
    for d, g in c[c["column"] != AUC_COLUMN].groupby("dataset"):
        hard = g.groupby("column")["mean"].mean().idxmin()
        h = g[g["column"] == hard]
        if h["row"].nunique() < 2:
            continue
        x = h.loc[h["mean"].idxmax()]
        ref = (f"; the paper reports {x['paper']:.1f}" if np.isfinite(x["paper"]) else "")
        out.append(f"On {dataset_name(d)} {column_name(hard)} (its hardest split) the highest mean "
                   f"is {x['row']}: {x['mean']:.1f} ± {x['std']:.1f}% over {x['n']} runs "
                   f"(95% CI [{x['ci_lo']:.1f}, {x['ci_hi']:.1f}]){ref}.")
    return out[:2]


def _enough_points(v: dict) -> bool:
    return (v.get("n", 0) >= stats.MIN_CORRELATION_POINTS
            and v.get("n_seeds", 0) >= stats.MIN_PAIRED_SEEDS and np.isfinite(v["pearson_r"]))


def fit_findings(fits: dict[str, dict]) -> list[str]:
    """Accuracy vs attention AUC: correlation and the exponential fit, largest panel."""
    good = {k: v for k, v in fits.items() if _enough_points(v)}
    if not good:
        return []
    key = max(good, key=lambda k: (good[k]["n"], k))
    f = good[key]
    d, sp = key.split("/")
    shape = (f"fit acc = {f['a']:.3g}·exp({f['b']:.3g}·AUC) {'+' if f['c'] >= 0 else '−'} "
             f"{abs(f['c']):.3g} (R² = {f['r2']:.2f})" if f["method"] != "none"
             else f"no exponential fit ({f.get('reason') or 'the fit failed'})")
    r = f["pearson_r"]
    how = ("rises with" if r >= 0.5 else "is only weakly related to" if abs(r) < 0.5
           else "falls with")
    return [f"Accuracy {how} attention AUC on {dataset_name(d)} {column_name(sp)}: "
            f"Pearson r = {r:.2f} over {f['n']} runs (paper: r ≈ {PAPER_R_ACC_AUC}); {shape}."]


def init_findings(info: dict[str, dict]) -> list[str]:
    """Attention AUC vs cos(p_init, p_opt) (the init study)."""
    out = []
    for key, v in info.items():
        if key.endswith("/auc") and _enough_points(v):
            out.append(f"Attention AUC vs cos(p_init, p_opt) on {dataset_name(key.split('/')[0])}: "
                       f"Pearson r = {v['pearson_r']:.2f} (p {_p_eq(v['pearson_p'])}, "
                       f"n = {v['n']} runs; paper: r ≈ {PAPER_R_AUC_COS}).")
    return out[:1]


def paper_findings(cells: pd.DataFrame, tolerance: float = 5.0) -> list[str]:
    """How many cells are within `tolerance` points of the paper, and the largest gap."""
    c = _seeded(cells)
    c = c[np.isfinite(c["paper"].to_numpy(dtype=float))]
    if c.empty:
        return []
    close = int((c["diff_paper"].abs() <= tolerance).sum())
    x = c.loc[c["diff_paper"].abs().idxmax()]
    return [f"{close} of {len(c)} cells with a paper number are within ±{tolerance:g} points of "
            f"it; the largest gap is {x['row']} on {dataset_name(x['dataset'])} "
            f"{column_name(x['column'])}: {x['mean']:.1f} vs {x['paper']:.1f} "
            f"({x['diff_paper']:+.1f})."]


def power_findings(cells: pd.DataFrame) -> list[str]:
    """A caveat when no tested comparison can reach significance with the seeds run: the
    sign-flip p itself, or Holm's adjustment over the m tests (its smallest value is
    m x the smallest p), cannot go below ALPHA. Lines of the corrected t over CV folds
    have no such floor and are left out; they are in Holm's family, but where all of them
    rank first a sign-flip line's factor is the number of sign-flip lines, so that number
    sets the floor, and the caveat then names the sign-flip lines alone."""
    tested = _tested(cells)
    flips = tested[tested["test"] != stats.CORRECTED_T] if "test" in tested.columns else tested
    n = flips["n_pairs"]
    if n.empty or "sequence" in cells.columns:  # adaptive seeds: the sequence decides
        return []
    n_max, m, m_all = int(n.max()), len(flips), len(tested)
    if stats.min_p(n_max) >= ALPHA:
        return [f"With at most {n_max} shared seeds per comparison no sign-flip test can reach "
                f"p < {ALPHA} (smallest possible p = {stats.min_p(n_max):.4f}) and the 95% "
                f"CIs of differences are unbounded: run at least {_seeds_for(1)} seeds per row "
                "before calling a difference significant."]
    floor = m * stats.min_p(n_max)
    if floor < ALPHA:
        return []
    need = _seeds_for(m)
    what, none = ((f"{m} tested comparisons", "no difference is marked") if m == m_all else
                  (f"{m} sign-flip comparisons of {m_all} tested", "no sign-flip comparison "
                   "is marked"))
    return [f"With at most {n_max} shared seeds per comparison and {what}, no Holm-adjusted "
            f"p can fall below {min(floor, 1.0):.3f} ({m} x 2/2^{n_max}), so {none} "
            f"significant however large: read the unadjusted p and the CIs of the differences, "
            f"or run at least {need} seeds per row (or compare fewer rows) for the ↑/↓ markers."]


def _seeds_for(m: int) -> int:
    """Fewest shared seeds n with m x min_p(n) < ALPHA: Holm over m tests can then mark one."""
    return math.ceil(math.log2(2 * m / ALPHA) + 1e-12)


def _by_count(counts: pd.Series, name, unit: str = "seed") -> str:
    """'2 seeds: A, B, C …; 3 seeds: D' from a Series of seed (`unit`) counts indexed by keys."""
    out = []
    for n, g in counts.groupby(counts, sort=True):
        names = [name(k) for k in g.index[:MAX_LISTED]]
        out.append(f"{len(g)} with {n} {unit}{'s' if n != 1 else ''} ({', '.join(names)}"
                   f"{' …' if len(g) > MAX_LISTED else ''})")
    return "; ".join(out)


def _unit(cv: pd.Series) -> str:
    """The replicate named in the banner: 'seed', 'fold' (every line cross-validated), or
    'replicate' where a study mixes them."""
    return "fold" if len(cv) and cv.all() else "seed" if not cv.any() else "replicate"


def thin_banner(cells: pd.DataFrame) -> str:
    """A warning naming the rows (per dataset) with fewer than MIN_PAIRED_SEEDS seeds (folds,
    under k-fold cross-validation) and the comparisons sharing fewer than that with their
    baseline; "" when there are none."""
    if cells.empty:
        return ""
    c = primary(cells)
    c = c.assign(_units=_units(c).to_numpy(),
                 _cv=(c["folds"] > 0).to_numpy() if "folds" in c.columns else False)
    seeds = c.groupby(["row", "dataset"], sort=False)["_units"].max()
    thin = seeds[seeds < stats.MIN_PAIRED_SEEDS]
    thin_cv = c.groupby(["row", "dataset"], sort=False)["_cv"].all()[thin.index]
    low = cells[(cells["n_pairs"] > 0) & (cells["n_pairs"] < stats.MIN_PAIRED_SEEDS)]
    pairs = low.groupby(["row", "baseline", "dataset"], sort=False)["n_pairs"].max()
    pairs_cv = (low["test"] == stats.CORRECTED_T) if "test" in low.columns \
        else pd.Series(False, index=low.index)
    parts = []
    if len(thin):
        unit = _unit(thin_cv)
        parts.append(f"{len(thin)} of {len(seeds)} rows (per dataset) have fewer than "
                     f"{stats.MIN_PAIRED_SEEDS} {unit}s: "
                     + _by_count(thin, lambda k: f"{k[0]} on {dataset_name(k[1])}", unit))
    if len(pairs):
        unit = _unit(pairs_cv)
        parts.append(f"{len(pairs)} one-axis comparisons share fewer than "
                     f"{stats.MIN_PAIRED_SEEDS} {unit}s with their baseline: "
                     + _by_count(pairs, lambda k: f"{k[0]} vs {k[1]} on {dataset_name(k[2])}",
                                 unit))
    if not parts:
        return ""
    return ("This store is too thin for claims. " + ". ".join(parts) + ". These numbers are "
            "shown without p-values, CIs of differences, significance markers or findings.")


def findings(cells: pd.DataFrame, fig_info: dict[str, dict], limit: int = 5) -> list[str]:
    """Three to five findings in priority order (fewer, or none, when the data has no more)."""
    effects = effect_findings(cells) if not cells.empty else []
    out: list[str] = effects[:1]
    out += fit_findings(fig_info.get("acc_vs_auc", {}).get("fits", {}))
    out += init_findings(fig_info.get("init_cos", {}))
    if not cells.empty:
        best = best_findings(cells)
        out += power_findings(cells)
        out += best[:1]
        out += effects[1:]
        out += paper_findings(cells)
        out += best[1:]
    return out[:limit]


def sdc_thin_banner(rows: pd.DataFrame) -> str:
    """A warning naming the rows of the SDC table (its numbers: key columns, then `runs`)
    with fewer than MIN_PAIRED_SEEDS runs; "" when there are none."""
    thin = rows[rows["runs"] < stats.MIN_PAIRED_SEEDS]
    if not len(thin):
        return ""
    keys = list(rows.columns[:rows.columns.get_loc("runs")])
    ex = "; ".join(", ".join(f"{k}={x[k]}" for k in keys) + f": {x['runs']} runs"
                   for _, x in thin.head(6).iterrows())
    return (f"This store is too thin for claims: {len(thin)} of {len(rows)} rows "
            f"have fewer than {stats.MIN_PAIRED_SEEDS} runs ({ex}). Their "
            "numbers are shown without findings.")


def sdc_findings(rows: pd.DataFrame) -> list[str]:
    """The most selective attention (highest FT) and the largest accuracy - FT gap, over the
    rows of the SDC table with at least MIN_PAIRED_SEEDS runs (none with fewer than two)."""
    d = rows[rows["runs"] >= stats.MIN_PAIRED_SEEDS]
    if not ({"ft_mean", "accuracy_mean"} <= set(d.columns) and len(d) > 1):
        return []
    keys = list(d.columns[:d.columns.get_loc("runs")])
    best = d.loc[d["ft_mean"].idxmax()]
    gap = d["accuracy_mean"] - d["ft_mean"]
    worst = d.loc[gap.idxmax()]
    return ["Most selective attention (highest FT): "
            + ", ".join(f"{k}={best[k]}" for k in keys)
            + f", FT {best['ft_mean']:.1f}% at accuracy {best['accuracy_mean']:.1f}%.",
            f"Accuracy does not imply interpretability: the largest accuracy − FT gap is "
            f"{gap.max():.1f} points (" + ", ".join(f"{k}={worst[k]}" for k in keys) + ")."]
