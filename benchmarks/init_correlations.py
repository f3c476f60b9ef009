"""The init study's correlations, as the paper states them, with 95% confidence intervals.

    python benchmarks/init_correlations.py results/        # reads results/init/trials/

Prints Pearson r (two-sided p, 95% CI from `scipy.stats.pearsonr(...).confidence_interval()`,
n runs) of accuracy vs attention AUC (pooled over the test graphs, as the paper's AUC) per
test split, and of attention AUC vs cos(p_init, p_opt); the paper reports r ~ 0.93 and r ~ 0.41 (SPEC §3).
"""

from __future__ import annotations

import argparse

import numpy as np
from scipy import stats

from ablate.runner.execute.store import read_trials


def pearson_ci(x, y) -> tuple[float, float, float, float, int]:
    """r, two-sided p, and scipy's 95% interval of r (Fisher z) over the n finite pairs."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    res = stats.pearsonr(x, y)
    ci = res.confidence_interval(confidence_level=0.95)
    return float(res.statistic), float(res.pvalue), float(ci.low), float(ci.high), int(x.size)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="the results folder holding init/")
    ap.add_argument("--study", default="init")
    args = ap.parse_args()
    df = read_trials(args.results, args.study)
    ok = df[df.status == "ok"]
    auc = "attn_auc_pooled_l0" if "attn_auc_pooled_l0" in ok else "attn_auc_l0"
    print(f"{ok.seed.nunique()} inits (seeds) of {df.trial_id.nunique()} trials; AUC column {auc}")
    print(f"{'pair':40s} {'r':>6s} {'p':>9s} {'95% CI':>16s} {'n':>4s}  paper")
    rows = [(f"accuracy {s} vs AUC", ok[ok.split == s], "accuracy", auc, "0.93")
            for s in ("test_orig", "test_large", "test_largec") if (ok.split == s).any()]
    orig = ok[ok.split == "test_orig"]
    rows.append(("AUC vs cos(p_init, p_opt)", orig, auc, "cos_p_init", "0.41"))
    for name, d, a, b, paper in rows:
        r, p, lo, hi, n = pearson_ci(d[b], d[a])
        print(f"{name:40s} {r:6.2f} {p:9.2g} {f'[{lo:.2f}, {hi:.2f}]':>16s} {n:4d}  {paper}")


if __name__ == "__main__":
    main()
