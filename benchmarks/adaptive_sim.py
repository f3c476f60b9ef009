"""Adaptive seed allocation with confidence sequences, simulated at scale (issue 43).

    nice -n 10 python benchmarks/adaptive_sim.py                 # 20,000 studies per setting
    python benchmarks/adaptive_sim.py --studies 2000 --out /tmp/sim.json

Each simulated study compares one row with its baseline, paired by seed: accuracies
N(0.7 + diff, spread^2) and N(0.7, spread^2), independent per seed, clipped to [0, 1]. The
adaptive rule looks after 3, 5, ..., 29 and 30 seeds and stops a comparison at its first
decision (analysis/sequences.py: `adaptive`). For every true difference (0, 1, 3, 10, 30
points) and seed spread measured in this project (`SPREAD_SOURCES`: COLORS ChebyGIN global-pool
LARGE-C, 0.126 over 20 seeds of `study=supervision`; MNIST-75SP NOISY, 0.037 over 3 seeds of
ours at 9,984 training graphs), it records for each
rule: the false-"difference" rate (no true difference, or the wrong sign), the right-sign
rate, "equivalent" (margin 2 points), decided by max / open at max, and mean seeds used.

Rules: the exact PrPl-EB CS (c = 3/4, the default, and c = 1/2), the asymptotic CS counted
from t_min = 2, 5, 8 and 10 seeds (10 is the default), and the naive paired t-test after
every round (stop at p < alpha). Also at the Bonferroni level of ten comparisons
(alpha = 0.005), and how many seeds the exact PrPl-EB needs when `max` is 60, 100 or 200.
Writes JSON (default benchmarks/results/cpu-2026-11-27-adaptive/simulation.json) with the
commit, `tree_state` as git_dirty, and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.sequences import adaptive, draw_differences, per_comparison_alpha  # noqa: E402

SPREADS = {"COLORS global-pool LARGE-C": 0.126, "MNIST-75SP NOISY": 0.037}
# where each spread was measured: the sample std of the seeds' accuracy in a kept record
# (tests/test_adaptive_study_bench.py checks SPREADS against these files)
SPREAD_SOURCES = {
    "COLORS global-pool LARGE-C": "cpu-2026-11-27-adaptive/supervision.json: row_spreads, ChebyGIN "
                                  "(ref. script) global pool, colors, test_largec (20 seeds)",
    "MNIST-75SP NOISY": "cpu-2026-11-27-mnist-train-reference/mnist_train_reference.jsonl: ours, "
                        "sup, 9,984 training graphs, NOISY at epoch 30 (3 seeds)"}
DIFFS = (0.0, 0.01, 0.03, 0.10, 0.30)
START, STEP, MAX = 3, 2, 30
EQUIVALENCE = 0.02
MEAN = 0.7
# (name, rule, keyword arguments of `adaptive`)
VARIANTS = (
    ("prpl_eb", "prpl_eb", {"c": 0.75}),
    ("prpl_eb_c0.5", "prpl_eb", {"c": 0.5}),
    ("asymptotic_tmin2", "asymptotic", {"t_min": 2}),
    ("asymptotic_tmin5", "asymptotic", {"t_min": 5}),
    ("asymptotic_tmin8", "asymptotic", {"t_min": 8}),
    ("asymptotic", "asymptotic", {"t_min": 10}),
    ("naive_t", "naive_t", {}),
)
LONG_MAX = (60, 100, 200)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def _rules(d: np.ndarray, alpha: float, true_sign: int, max_seeds: int = MAX,
           variants=VARIANTS) -> dict[str, dict[str, float]]:
    out = {}
    for name, rule, kw in variants:
        out[name] = adaptive(d, alpha=alpha, start=START, step=STEP, max_seeds=max_seeds,
                             equivalence=EQUIVALENCE, true_sign=true_sign, rules=(rule,), **kw)[rule]
    return out


def run(n_studies: int, seed: int = 0) -> dict:
    grid, long = [], []
    m = 10
    alphas = (0.05, per_comparison_alpha(0.05, m))
    for si, (label, spread) in enumerate(SPREADS.items()):
        for di, diff in enumerate(DIFFS):
            rng = np.random.default_rng([seed, si, di])
            d = draw_differences(rng, n_studies, max(LONG_MAX), diff, spread, MEAN)
            sign = int(np.sign(diff))
            for alpha in alphas:
                grid.append({"spread_name": label, "spread": spread, "diff": diff, "alpha": alpha,
                             "rules": _rules(d[:, :MAX], alpha, sign)})
            if diff >= 0.10:
                for mx in LONG_MAX:
                    long.append({"spread_name": label, "spread": spread, "diff": diff, "alpha": 0.05,
                                 "max_seeds": mx,
                                 "rules": _rules(d[:, :mx], 0.05, sign, mx, VARIANTS[:2])})
    return {"grid": grid, "prpl_eb_longer": long, "bonferroni_m": m}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--studies", type=int, default=20_000, help="simulated studies per setting")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path,
                    default=ROOT / "benchmarks" / "results" / "cpu-2026-11-27-adaptive" / "simulation.json")
    args = ap.parse_args()
    import scipy

    from ablate.trial.provenance import tree_state

    t0 = time.perf_counter()
    res = run(args.studies, args.seed)
    wall = time.perf_counter() - t0
    rec = {
        "what": "adaptive seed allocation (issue 43): error rate, decisions and seeds used of the "
                "exact PrPl-EB CS, the asymptotic CS and the naive t-test after every round",
        "commit": _git("rev-parse", "--short", "HEAD"),
        "git_dirty": tree_state(str(ROOT)),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__, "scipy": scipy.__version__,
                    "platform": platform.platform(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
        "settings": {"studies_per_setting": args.studies, "seed": args.seed, "start": START,
                     "step": STEP, "max_seeds": MAX, "equivalence": EQUIVALENCE,
                     "mean_accuracy": MEAN, "t_star": MAX, "spreads": SPREADS,
                     "spread_source": {**SPREAD_SOURCES, "model": "the sample std of a row's seed "
                                       "accuracies; row and baseline independent per seed"},
                     "variants": {n: {"rule": r, **kw} for n, r, kw in VARIANTS}},
        **res,
        "wall_s": round(wall, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rec, indent=1) + "\n")
    names = [n for n, _, _ in VARIANTS]
    print(f"{args.studies} studies per setting, {wall:.0f} s; columns: false-difference rate / "
          "right sign / mean seeds / open at max")
    for row in res["grid"]:
        print(f"{row['spread_name'][:12]:12s} diff {row['diff']:.2f} alpha {row['alpha']:.3f}")
        for n in names:
            r = row["rules"][n]
            print(f"    {n:18s} {r['false_difference_rate']:.4f} {r['right_sign_rate']:.3f} "
                  f"{r['mean_seeds']:5.1f} {r['open_at_max']:.3f}")
    for row in res["prpl_eb_longer"]:
        for n, r in row["rules"].items():
            print(f"{row['spread_name'][:12]:12s} diff {row['diff']:.2f} max {row['max_seeds']:3d} "
                  f"{n:14s} right {r['right_sign_rate']:.3f} seeds {r['mean_seeds']:.1f}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
