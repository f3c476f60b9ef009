"""Adaptive seeds' decision rules in simulation: error rates and seeds needed (issue 54).

    nice -n 10 python benchmarks/adaptive_sim.py                  # 20,000 studies per line
    python benchmarks/adaptive_sim.py --studies 2000 --out /tmp/sim.json

Each simulated study is one comparison, paired by seed, run with the product's rounds
(`AdaptiveSeeds`' defaults: start 10, step 2, max 40, equivalence 1 point) and stopped at its first
decision, as `ablate.runner.plan.adaptive` does. Rules: the hedged-capital betting sequence
(`analysis/betting.py`, the default) and the asymptotic sequence (`asymptotic_cs`, t_min 10,
tuned to max), at alpha 0.05 and at the Bonferroni share of 13 comparisons (`study=supervision`).

Error lines (SPEC.md "Comparing rows over seeds"): every rule must keep its errors <= alpha on
  - the Gaussian null: row and baseline N(0.7, s^2) clipped to [0, 1], s = 0.126 (COLORS
    global-pool LARGE-C) and 0.037 (MNIST-75SP NOISY), `SPREAD_SOURCES`;
  - the skewed null: d = +0.05 w.p. 0.9, -0.45 w.p. 0.1 (mean 0);
  - zero spread: every d = 0 (two rows at 0.0 or 100.0);
  - a collapsing row: baseline N(0.9, 0.01^2), the row the same but 0.1 in 5% or 10% of seeds
    (true difference -4 or -8 points: "equivalent" and "greater" are both false).
Per line: the share saying a false "difference" (none true, or the wrong sign), a false
"equivalent" (the true difference outside the margin), "equivalent" at all, the share whose
sequence excluded the true mean at some look up to max (miss: what the guarantee bounds), the
mean seeds used and the share open at max.

Power lines: true differences of 90, 30 and 10 points (row N(0.5 + delta/2, s^2), baseline
N(0.5 - delta/2, s^2), clipped), looked at after every seed up to `POWER_MAX`: the median and
90th percentile of the seeds to a right-sign decision and the share decided by 30 seeds, next
to the floor no test of a bounded mean can beat, ln(2/alpha) / ln(1 + delta).
Writes JSON (default benchmarks/results/cpu-<date>-adaptive-sim/simulation.json) with the
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
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis import betting  # noqa: E402
from analysis.sequences import CODES, asymptotic_cs, first_decisions, interval_codes, looks  # noqa: E402

SPREADS = {"COLORS global-pool LARGE-C": 0.126, "MNIST-75SP NOISY": 0.037}
# where each spread was measured: the sample std of the seeds' accuracy in a kept record
# (tests/test_adaptive_study_bench.py checks SPREADS against these files)
SPREAD_SOURCES = {
    "COLORS global-pool LARGE-C": "cpu-2026-11-27-adaptive/supervision.json: row_spreads, ChebyGIN "
                                  "(ref. script) global pool, colors, test_largec (20 seeds)",
    "MNIST-75SP NOISY": "cpu-2026-11-27-mnist-train-reference/mnist_train_reference.jsonl: ours, "
                        "sup, 9,984 training graphs, NOISY at epoch 30 (3 seeds)"}
from ablate.runner.plan.adaptive_options import AdaptiveSeeds  # noqa: E402

START, STEP, MAX, EQUIVALENCE = (getattr(AdaptiveSeeds(), k) for k in ("start", "step", "max",
                                                                        "equivalence"))
COMPARISONS = 13  # study=supervision's one-axis comparisons: the Bonferroni share
ALPHAS = (0.05, 0.05 / COMPARISONS)
RULES = ("betting", "asymptotic")
POWER_DELTAS = (0.9, 0.3, 0.1)
POWER_MAX = 300
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "cpu-2026-12-02-adaptive-sim" / "simulation.json"


def _gauss(spread: float) -> Callable[[np.random.Generator, int, int], np.ndarray]:
    def draw(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
        a = np.clip(rng.normal(0.7, spread, (n, k)), 0, 1)
        return np.clip(rng.normal(0.7, spread, (n, k)), 0, 1) - a
    return draw


def _skewed(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    return np.where(rng.random((n, k)) < 0.9, 0.05, -0.45)


def _zero(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    return np.zeros((n, k))


def _collapse(p: float) -> Callable[[np.random.Generator, int, int], np.ndarray]:
    def draw(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
        base = np.clip(rng.normal(0.9, 0.01, (n, k)), 0, 1)
        row = np.clip(rng.normal(0.9, 0.01, (n, k)), 0, 1)
        return np.where(rng.random((n, k)) < p, 0.1, row) - base
    return draw


# (name, words, true mean difference, draw)
SCENARIOS = (
    [(f"gaussian_{s}", f"Gaussian null, seed spread {s} ({k})", 0.0, _gauss(s))
     for k, s in SPREADS.items()]
    + [("skewed", "skewed null: +0.05 w.p. 0.9, -0.45 w.p. 0.1", 0.0, _skewed),
       ("zero_spread", "zero spread: every difference 0", 0.0, _zero),
       ("collapse_5", "row 0.9 ± 0.01 collapsing to 0.1 in 5% of seeds", -0.04, _collapse(0.05)),
       ("collapse_10", "row 0.9 ± 0.01 collapsing to 0.1 in 10% of seeds", -0.08,
        _collapse(0.10))])


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def rule_codes(rule: str, d: np.ndarray, at: np.ndarray, alpha: float, max_seeds: int,
               true: float) -> tuple[np.ndarray, np.ndarray]:
    """Decision codes at the looks `at` and whether the sequence missed `true` by max."""
    if rule == "betting":
        codes = betting.decision_codes(d, at, alpha, EQUIVALENCE)
        x = (np.clip(d, -1, 1) + 1) / 2
        kp, kn = betting.capitals(x, (true + 1) / 2, betting.bets(x, alpha, betting.THETA),
                                  betting.bets(x, alpha, 1 - betting.THETA))
        bar = 1 / (betting.THETA * alpha)
        return codes, (kp[:, max_seeds - 1] >= bar) | (kn[:, max_seeds - 1] >= bar)
    lo, hi = asymptotic_cs(d, alpha, t_star=max_seeds)
    lo, hi = lo[:, at - 1], hi[:, at - 1]
    return interval_codes(lo, hi, EQUIVALENCE), ((lo > true) | (hi < true)).any(axis=1)


STOPPED = 9  # a code of this script's only: open, and no seeds up to MAX could decide it


def error_line(d: np.ndarray, true: float, alpha: float, rule: str) -> dict[str, float]:
    """One rule's rates on the studies `d` (studies x MAX seeds) whose mean is `true`. The
    betting default stops a comparison no seeds up to MAX could decide, as the runner does
    (`betting.undecidable`): it ends open there, its seeds counted to that look."""
    at = looks(START, STEP, MAX)
    codes, miss = rule_codes(rule, d, at, alpha, MAX, true)
    stopped = np.zeros(codes.shape, dtype=bool)
    if rule == "betting":
        stopped = (codes == 0) & betting.undecidable(d, at, alpha, EQUIVALENCE, MAX)
        codes = np.where(stopped, STOPPED, codes)
    code, seeds = first_decisions(codes, at)
    early = code == STOPPED
    code = np.where(early, 0, code)
    greater, less = code == CODES["greater"], code == CODES["less"]
    right = greater if true > 0 else less if true < 0 else np.zeros(code.shape, dtype=bool)
    equivalent = code == CODES["equivalent"]
    return {"false_difference": float(((greater | less) & ~right).mean()),
            "equivalent": float(equivalent.mean()),
            "false_equivalent": float(equivalent.mean()) if abs(true) > EQUIVALENCE else 0.0,
            "right_sign": float(right.mean()), "miss": float(miss.mean()),
            "mean_seeds": float(seeds.mean()), "open_at_max": float((code == 0).mean()),
            "stopped_early": float(early.mean())}


def power_line(d: np.ndarray, alpha: float, rule: str) -> dict[str, float | None]:
    """Seeds to a right-sign decision when looking after every seed (d's true mean > 0); the
    median (90th percentile) only when at least half (90%) decided by POWER_MAX."""
    at = np.arange(2, d.shape[1] + 1)
    codes, _ = rule_codes(rule, d, at, alpha, d.shape[1], float(d.mean()))
    code, seeds = first_decisions(codes, at)
    ok = code == CODES["greater"]
    got = seeds[ok]
    return {"median_seeds": float(np.median(got)) if ok.mean() >= 0.5 else None,
            "p90_seeds": float(np.quantile(seeds, 0.9)) if ok.mean() >= 0.9 else None,
            "decided_by_30": float((ok & (seeds <= 30)).mean()),
            "decided_by_default_max": float((ok & (seeds <= MAX)).mean()),
            "decided_by_max": float(ok.mean())}


def run(n_studies: int, seed: int = 0) -> dict:
    errors, power = [], []
    for si, (name, words, true, draw) in enumerate(SCENARIOS):
        d = draw(np.random.default_rng([seed, 1, si]), n_studies, MAX)
        for alpha in ALPHAS:
            errors.append({"scenario": name, "words": words, "true_difference": true,
                           "alpha": alpha, "rules": {r: error_line(d, true, alpha, r)
                                                     for r in RULES}})
    for si, (label, s) in enumerate(SPREADS.items()):
        for di, delta in enumerate(POWER_DELTAS):
            rng = np.random.default_rng([seed, 2, si, di])
            shape = (n_studies, POWER_MAX)
            d = (np.clip(rng.normal(0.5 + delta / 2, s, shape), 0, 1)
                 - np.clip(rng.normal(0.5 - delta / 2, s, shape), 0, 1))
            for alpha in ALPHAS:
                power.append({"spread_name": label, "spread": s, "delta": delta,
                              "mean_difference": float(d.mean()), "alpha": alpha,
                              "floor": betting.seed_floor(delta, alpha),
                              "rules": {r: power_line(d, alpha, r) for r in RULES}})
    return {"errors": errors, "power": power}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--studies", type=int, default=20_000, help="simulated studies per line")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    import scipy

    from ablate.trial.provenance import tree_state

    t0 = time.perf_counter()
    res = run(args.studies, args.seed)
    wall = time.perf_counter() - t0
    rec = {
        "what": "adaptive seeds (issue 54): error rates of the betting (default) and asymptotic "
                "sequences under nulls, skew, zero spread and collapsing seeds; seeds to decide",
        "commit": _git("rev-parse", "--short", "HEAD"),
        "git_dirty": tree_state(str(ROOT)),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__, "scipy": scipy.__version__,
                    "platform": platform.platform(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
        "settings": {"studies_per_line": args.studies, "seed": args.seed, "start": START,
                     "step": STEP, "max_seeds": MAX, "equivalence": EQUIVALENCE,
                     "comparisons": COMPARISONS, "alphas": list(ALPHAS), "bet_c": betting.BET_C,
                     "power_max": POWER_MAX, "spreads": SPREADS, "spread_source": SPREAD_SOURCES},
        **res,
        "wall_s": round(wall, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rec, indent=1) + "\n")
    print(f"{args.studies} studies per line, {wall:.0f} s")
    for e in res["errors"]:
        for r, v in e["rules"].items():
            print(f"{e['scenario']:22s} alpha {e['alpha']:.4f} {r:10s} "
                  + " ".join(f"{k} {x:.4f}" for k, x in v.items()))
    for p in res["power"]:
        for r, v in p["rules"].items():
            print(f"{p['spread_name'][:10]:10s} delta {p['delta']:.1f} alpha {p['alpha']:.4f} "
                  f"floor {p['floor']:3d} {r:10s} {v}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
