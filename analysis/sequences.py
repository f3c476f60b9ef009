"""Anytime-valid confidence sequences for a paired difference over seeds (issue 43).

A study compares each row (a model variant) with its one-axis baseline, paired by seed:
d_i = metric(row, seed i) - metric(baseline, seed i), with the metric in [0, 1] (accuracy,
AUC), so d_i lies in [-1, 1]. Adaptive seed allocation runs a few seeds of every row and
then looks after every round of added seeds; the interval it looks at must hold its level
*although* it is looked at after every round and the comparison stops as soon as it is
decided. A confidence sequence (CS) gives that: a (1 - alpha) CS (lo_t, hi_t), t = 1, 2, ...
contains the true mean difference at every t simultaneously with probability >= 1 - alpha,
so it holds at any data-dependent stopping time. A t-test or a fixed-n CI looked at after
every round does not (`simulate` measures how far it errs).

Library decision. The issue asked to prefer a library by the methods' authors. `confseq`
0.0.11 (Howard, Waudby-Smith, Ramdas; PyPI sdist only, no wheels) does not build here: its
CMake needs the Boost C++ headers (``Could NOT find Boost (missing: Boost_INCLUDE_DIR)``),
which PyPI cannot provide, and its build pins pybind11 2.6, which does not compile against
Python 3.11 even with Boost installed; `expectation` has only version 0.0.2, and pip finds
no distribution of it for Python 3.11 (benchmarks/results/cpu-2026-11-27-adaptive/
library_install.log). Neither can be installed by the README's commands on a fresh machine,
so the two sequences are implemented here from the papers' formulas (no code copied):

(a) `prpl_eb_cs`: the predictable plug-in empirical-Bernstein CS ("PrPl-EB") of
    I. Waudby-Smith and A. Ramdas, "Estimating means of bounded random variables by
    betting", J. R. Stat. Soc. B 86(1):1-27, 2024 (arXiv:2010.09686), Theorem 2, for
    observations X_i in [0, 1]:
        mu_t = (1/2 + sum_{i<=t} X_i) / (t + 1),      mu_0 = 1/2
        s2_t = (1/4 + sum_{i<=t} (X_i - mu_i)^2) / (t + 1),   s2_0 = 1/4
        lambda_t = min(sqrt(2 log(2/alpha) / (s2_{t-1} t log(1 + t))), c)   (predictable)
        v_i = 4 (X_i - mu_{i-1})^2,   psi_E(l) = (-log(1 - l) - l) / 4
        C_t = sum lambda_i X_i / sum lambda_i
              +- (log(2/alpha) + sum v_i psi_E(lambda_i)) / sum lambda_i
    with the truncation c = 3/4 (the paper suggests 1/2 or 3/4; seed differences have a
    small spread, so lambda_t sits at c and 3/4 decides sooner: a 30-point difference at
    about 38 seeds against 56 with 1/2, benchmarks/adaptive_sim.py), intersected with
    [0, 1] and over t (the running intersection, which the paper notes is also a CS). It is
    applied to X = (d + 1) / 2 and mapped back by d = 2 X - 1. Exact: valid at every
    sample size for any distribution on [-1, 1] (no normality, no asymptotics).
(b) `asymptotic_cs`: the asymptotic CS of I. Waudby-Smith, D. Arbour, R. Sinha,
    E. H. Kennedy and A. Ramdas, "Time-uniform central limit theory and asymptotic
    confidence sequences", Ann. Statist. 52(6), 2024 (arXiv:2103.06476), Theorem 2.2: the
    two-sided Robbins normal-mixture boundary with the running sample variance,
        mean_t +- s_t sqrt(2 (t rho^2 + 1) / (t^2 rho^2) log(sqrt(t rho^2 + 1) / alpha)),
    with rho^2 = (-2 log alpha + log(-2 log alpha + 1)) / t_star (the paper's choice that
    makes the boundary tightest near t = t_star). s_t^2 is the sample variance with
    ddof = 1 (the paper's 1/t differs by t/(t-1), identical asymptotically, wider here).
    Valid only approximately: its coverage tends to 1 - alpha as the first time looked at
    grows (the paper's definition of an asymptotic CS), and at a few seeds the sample
    variance is too often small: counted from t = 2, the adaptive rule (start 3, step 2,
    max 30) declares a false difference in 20-21% of null studies at alpha = 0.05, nearly
    as often as a naive t-test (23-24%). So the sequence starts at `t_min` =
    ASYMPTOTIC_T_MIN = 10 seeds by default: 3.3-3.6% measured at alpha = 0.05 (4.1-4.5%
    from 8 seeds, 6.5-6.9% from 5), but 0.9-1.0% at alpha = 0.005, twice that alpha, so at
    a Bonferroni share of many comparisons it needs a longer start (0.5% from 15 seeds).
    Numbers: benchmarks/results/cpu-2026-11-27-adaptive/simulation.json.

Multiplicity: `per_comparison_alpha(alpha, m)` is Bonferroni, alpha / m for each of the m
comparisons of a study. For confidence sequences it keeps the family-wise error (any
comparison's CS misses its mean at any time) <= alpha under any dependence between the
comparisons and for any stopping rules: each CS fails with probability <= alpha / m over
its whole path, and the union bound needs nothing more.

Decision (`decide`, at the last index): "equivalent" when -equivalence <= lo and
hi <= equivalence (every value the CS allows is inside the margin the user called
negligible, even if it excludes 0), else "greater" when lo > 0, "less" when hi < 0 (a
difference, with its sign), else "open".
"""

from __future__ import annotations

import math
import warnings
from typing import Literal

import numpy as np

from analysis.paired_input import check_alpha as _check_alpha
from analysis.paired_input import check_differences as _check_d

Decision = Literal["greater", "less", "equivalent", "open"]
DEFAULT_C = 0.75  # PrPl-EB truncation of lambda_t (Waudby-Smith & Ramdas suggest 1/2 or 3/4)
ASYMPTOTIC_T_MIN = 10  # seeds before the asymptotic CS says anything (measured, see above)


def _running(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.maximum.accumulate(lo, axis=-1), np.minimum.accumulate(hi, axis=-1)


def _prpl_eb_unit(x: np.ndarray, alpha: float, c: float) -> tuple[np.ndarray, np.ndarray]:
    """PrPl-EB CS for x in [0, 1] along the last axis, not yet intersected."""
    t = np.arange(1, x.shape[-1] + 1, dtype=float)
    mu = (0.5 + np.cumsum(x, axis=-1)) / (t + 1)  # mu_1 .. mu_n
    s2 = (0.25 + np.cumsum((x - mu) ** 2, axis=-1)) / (t + 1)  # s2_1 .. s2_n
    lead = [(0, 0)] * (x.ndim - 1) + [(1, 0)]
    mu_prev = np.pad(mu[..., :-1], lead, constant_values=0.5)  # mu_0 .. mu_{n-1}
    s2_prev = np.pad(s2[..., :-1], lead, constant_values=0.25)  # s2_0 .. s2_{n-1}
    log_term = math.log(2.0 / alpha)
    with np.errstate(divide="ignore"):
        lam = np.sqrt(2.0 * log_term / (s2_prev * t * np.log1p(t)))
    lam = np.minimum(lam, c)
    v = 4.0 * (x - mu_prev) ** 2
    psi = (-np.log1p(-lam) - lam) / 4.0
    lam_sum = np.cumsum(lam, axis=-1)
    center = np.cumsum(lam * x, axis=-1) / lam_sum
    margin = (log_term + np.cumsum(v * psi, axis=-1)) / lam_sum
    return np.clip(center - margin, 0.0, 1.0), np.clip(center + margin, 0.0, 1.0)


def prpl_eb_cs(d: object, alpha: float = 0.05, *, c: float = DEFAULT_C) -> tuple[np.ndarray, np.ndarray]:
    """Exact (1 - alpha) confidence sequence for the mean paired difference (PrPl-EB).

    `d`: the paired differences in seed order, each in [-1, 1] (1-D; or 2-D, one sequence
    per row). Returns (lo, hi) of d's shape: (lo[t-1], hi[t-1]) is the interval after t
    seeds, already intersected with every earlier one (so it only shrinks). What it means:
    with probability >= 1 - alpha the true mean difference lies inside (lo_t, hi_t) for
    every t at once, whatever the distribution on [-1, 1] and however many times one looks,
    so stopping when it excludes 0 keeps the false-difference rate <= alpha. It is exact
    and therefore wide at few seeds: its half-width is at least 2 log(2/alpha) / (c t)
    whatever the spread (0.33 at t = 30, alpha = 0.05, c = 3/4), so within 30 seeds it
    can decide no difference smaller than about 33 points.
    `c` in (0, 1): the truncation of the bets lambda_t (the paper suggests 1/2 or 3/4).
    """
    alpha = _check_alpha(alpha)
    if not (0.0 < float(c) < 1.0):
        raise ValueError(f"c must be in (0, 1), got {c!r}")
    a = _check_d(d)
    lo, hi = _running(*_prpl_eb_unit((a + 1.0) / 2.0, alpha, float(c)))
    return 2.0 * lo - 1.0, 2.0 * hi - 1.0


def rho_squared(alpha: float, t_star: float) -> float:
    """rho^2 that makes the normal-mixture boundary about tightest at t = t_star:
    (-2 log alpha + log(-2 log alpha + 1)) / t_star (Waudby-Smith et al. 2024)."""
    alpha = _check_alpha(alpha)
    if not (float(t_star) >= 1.0):
        raise ValueError(f"t_star must be >= 1 (the number of seeds to tune for), got {t_star!r}")
    k = -2.0 * math.log(alpha)
    return (k + math.log(k + 1.0)) / float(t_star)


def normal_mixture_width(t: object, alpha: float, t_star: float) -> np.ndarray:
    """Half-width of the asymptotic CS per unit standard deviation at times t:
    sqrt(2 (t rho^2 + 1) / (t^2 rho^2) log(sqrt(t rho^2 + 1) / alpha))."""
    r2 = rho_squared(alpha, t_star)
    tt = np.asarray(t, dtype=float)
    return np.sqrt(2.0 * (tt * r2 + 1.0) / (tt ** 2 * r2) * np.log(np.sqrt(tt * r2 + 1.0) / alpha))


def asymptotic_cs(d: object, alpha: float = 0.05, t_star: float = 30, *,
                  t_min: int = ASYMPTOTIC_T_MIN) -> tuple[np.ndarray, np.ndarray]:
    """Approximate (1 - alpha) confidence sequence for the mean paired difference.

    The asymptotic CS of Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas (Ann. Statist. 2024):
    running mean -+ running sample std x the normal-mixture width, tuned to be tightest at
    `t_star` seeds (e.g. the study's `max`). Returns (lo, hi) of d's shape (1-D, or 2-D with
    one sequence per row), clipped to [-1, 1] and intersected over t. Before `t_min` seeds
    (at least 2: one seed has no spread; 10 by default) the interval is the whole [-1, 1]:
    "not enough seeds to say". What it means: like `prpl_eb_cs`, a band meant to hold at
    every t at once, but its level is only approximate (a central-limit argument): much
    narrower than PrPl-EB at 10-30 seeds, and it may miss the mean somewhat more often than
    alpha there, more so at small alpha (measured with `simulate`: benchmarks/adaptive_sim.py).
    """
    alpha = _check_alpha(alpha)
    a = _check_d(d)
    if int(t_min) != t_min or t_min < 2:
        raise ValueError(f"t_min must be an integer >= 2 (one seed has no spread), got {t_min!r}")
    n = a.shape[-1]
    t = np.arange(1, n + 1, dtype=float)
    shift = a[..., :1]  # centring keeps the running variance exact for nearly constant d
    z = a - shift
    s1, s2 = np.cumsum(z, axis=-1), np.cumsum(z * z, axis=-1)
    mean = shift + s1 / t
    with np.errstate(divide="ignore", invalid="ignore"):
        var = np.maximum(s2 - s1 * s1 / t, 0.0) / (t - 1)
        half = np.sqrt(var) * normal_mixture_width(t, alpha, t_star)
    lo, hi = np.clip(mean - half, -1.0, 1.0), np.clip(mean + half, -1.0, 1.0)
    early = t < t_min
    lo[..., early], hi[..., early] = -1.0, 1.0
    flat = var <= 0.0  # every difference so far equal: no spread to scale by (issue 54)
    lo[flat], hi[flat] = -1.0, 1.0
    return _running(lo, hi)


def decide(lo: object, hi: object, equivalence: float) -> Decision:
    """The decision at the last index of a CS (lo, hi), given an equivalence margin >= 0.

    "equivalent" (the whole interval inside [-equivalence, +equivalence]: any difference is
    smaller than the margin, which wins even when the interval excludes 0), else "greater"
    (lo > 0: the row's metric is higher than its baseline's), "less" (hi < 0), else "open"
    (more seeds needed)."""
    eq = float(equivalence)
    if not (math.isfinite(eq) and eq >= 0.0):
        raise ValueError(f"equivalence must be a finite margin >= 0, got {equivalence!r}")
    lo_a, hi_a = np.asarray(lo, dtype=float).ravel(), np.asarray(hi, dtype=float).ravel()
    if lo_a.size == 0 or hi_a.size == 0:
        raise ValueError("lo and hi are empty: there is no interval to decide on")
    l, h = float(lo_a[-1]), float(hi_a[-1])
    if math.isnan(l) or math.isnan(h):
        raise ValueError("lo or hi is NaN at the last index: there is no interval to decide on")
    if l >= -eq and h <= eq:
        return "equivalent"
    if l > 0.0:
        return "greater"
    if h < 0.0:
        return "less"
    return "open"


def per_comparison_alpha(alpha: float, m: int) -> float:
    """Multiplicity: Bonferroni alpha / m for each of a study's m comparisons.

    With a (1 - alpha / m) CS per comparison the chance that any of the m sequences ever
    misses its mean is <= alpha, under any dependence between the comparisons (they share
    baselines and seeds) and whatever rule stops each one: a union bound over m events of
    probability <= alpha / m each."""
    alpha = _check_alpha(alpha)
    if isinstance(m, bool) or int(m) != m or m < 1:
        raise ValueError(f"m must be a whole number of comparisons >= 1, got {m!r}")
    return alpha / int(m)


# --- adaptive studies, simulated -------------------------------------------------------------

RULES = ("betting", "prpl_eb", "asymptotic", "naive_t")
CODES = {"open": 0, "greater": 1, "less": 2, "equivalent": 3}


def looks(start: int, step: int, max_seeds: int) -> np.ndarray:
    """Seed counts at which an adaptive study looks: start, start + step, ..., and max."""
    if not (1 <= start <= max_seeds) or step < 1:
        raise ValueError(f"need 1 <= start <= max and step >= 1, got start={start}, step={step}, "
                         f"max={max_seeds}")
    n = list(range(start, max_seeds + 1, step))
    if n[-1] != max_seeds:
        n.append(max_seeds)
    return np.asarray(n)


def interval_codes(lo: np.ndarray, hi: np.ndarray, eq: float) -> np.ndarray:
    """`decide` on every entry: equivalent first, then greater / less, else open (0)."""
    out = np.zeros(lo.shape, dtype=np.int8)
    out[hi < 0] = CODES["less"]
    out[lo > 0] = CODES["greater"]
    out[(lo >= -eq) & (hi <= eq)] = CODES["equivalent"]
    return out


def _naive_codes(d: np.ndarray, at: np.ndarray, alpha: float) -> np.ndarray:
    from scipy import stats as sps

    out = np.zeros((d.shape[0], at.size), dtype=np.int8)
    for j, n in enumerate(at):
        if n < 2:
            continue
        with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
            warnings.simplefilter("ignore")  # constant rows: scipy warns and gives NaN
            res = sps.ttest_1samp(d[:, :n], 0.0, axis=1)
        sig = np.asarray(res.pvalue) < alpha
        stat = np.asarray(res.statistic)
        out[sig & (stat > 0), j] = CODES["greater"]
        out[sig & (stat < 0), j] = CODES["less"]
    return out


def first_decisions(codes: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per study: the decision code at the first look that decided (0 if none) and seeds used."""
    decided = codes != 0
    any_ = decided.any(axis=1)
    j = np.where(any_, decided.argmax(axis=1), at.size - 1)
    return np.where(any_, codes[np.arange(codes.shape[0]), j], 0), at[j]


def _summary(code: np.ndarray, seeds: np.ndarray, true_sign: int) -> dict[str, float]:
    diff = (code == CODES["greater"]) | (code == CODES["less"])
    right = code == (CODES["greater"] if true_sign > 0 else CODES["less"]) if true_sign else \
        np.zeros(code.shape, dtype=bool)
    n = float(code.size)
    return {
        "difference_rate": float(diff.sum() / n),  # any "greater" / "less"
        "false_difference_rate": float((diff & ~right).sum() / n),  # none true, or wrong sign
        "right_sign_rate": float(right.sum() / n),
        "equivalent_rate": float((code == CODES["equivalent"]).sum() / n),
        "decided_by_max": float((code != 0).sum() / n),  # decided at or before max seeds
        "open_at_max": float((code == 0).sum() / n),  # "undecided at max"
        "mean_seeds": float(seeds.mean()),
    }


def adaptive(d: np.ndarray, *, alpha: float = 0.05, start: int = 3, step: int = 2,
             max_seeds: int = 30, equivalence: float = 0.02, t_star: float | None = None,
             t_min: int = ASYMPTOTIC_T_MIN, true_sign: int = 0, c: float = DEFAULT_C,
             rules: tuple[str, ...] = RULES, bet_c: float | None = None
             ) -> dict[str, dict[str, float]]:
    """Run the adaptive rule on given paired differences, one study per row of `d`
    (n_studies x >= max_seeds, in seed order): look after start, start + step, ..., max
    seeds; a comparison stops at its first decision. Per rule ("betting": the hedged-capital
    sequence of `analysis.betting`, truncation `bet_c`, its default if None; "prpl_eb", "asymptotic",
    "naive_t": a paired t-test after every round, stopping at p < alpha, never
    "equivalent"): the share of studies with a difference, a false difference (none is
    true, `true_sign` = 0, or the sign is wrong), the right sign, "equivalent", decided by
    max, open at max, and the mean seeds used."""
    alpha = _check_alpha(alpha)
    a = _check_d(d)
    if a.ndim != 2 or a.shape[1] < max_seeds:
        raise ValueError(f"d must be n_studies x >= {max_seeds} paired differences, got {a.shape}")
    a = a[:, :max_seeds]
    at = looks(start, step, max_seeds)
    out: dict[str, dict[str, float]] = {}
    for rule in rules:
        if rule == "betting":
            from analysis import betting

            codes = betting.decision_codes(a, at, alpha, equivalence,
                                           betting.BET_C if bet_c is None else bet_c)
        elif rule == "prpl_eb":
            lo, hi = prpl_eb_cs(a, alpha, c=c)
            codes = interval_codes(lo[:, at - 1], hi[:, at - 1], equivalence)
        elif rule == "asymptotic":
            lo, hi = asymptotic_cs(a, alpha, max_seeds if t_star is None else t_star, t_min=t_min)
            codes = interval_codes(lo[:, at - 1], hi[:, at - 1], equivalence)
        elif rule == "naive_t":
            codes = _naive_codes(a, at, alpha)
        else:
            raise ValueError(f"unknown rule {rule!r}: one of {', '.join(RULES)}")
        out[rule] = _summary(*first_decisions(codes, at), true_sign)
    return out


def draw_differences(rng: np.random.Generator, n_studies: int, n_seeds: int, diff: float,
                     spread: float, mean: float = 0.7) -> np.ndarray:
    """Paired differences of simulated studies: row accuracy ~ N(mean + diff, spread^2),
    baseline ~ N(mean, spread^2), independent per seed, each clipped to [0, 1]."""
    base = np.clip(rng.normal(mean, spread, (n_studies, n_seeds)), 0.0, 1.0)
    row = np.clip(rng.normal(mean + diff, spread, (n_studies, n_seeds)), 0.0, 1.0)
    return row - base


def simulate(n_studies: int, diff: float, spread: float, *, alpha: float = 0.05, start: int = 3,
             step: int = 2, max_seeds: int = 30, equivalence: float = 0.02,
             t_star: float | None = None, t_min: int = ASYMPTOTIC_T_MIN, mean: float = 0.7, seed: int = 0,
             c: float = DEFAULT_C, rules: tuple[str, ...] = RULES) -> dict[str, dict[str, float]]:
    """Draw `n_studies` adaptive comparisons (row mean `mean` + `diff`, baseline `mean`,
    both with seed spread `spread`, see `draw_differences`) and run `adaptive` on them.
    With diff = 0 the "false_difference_rate" of each rule is its error rate under no true
    difference, which a CS keeps <= alpha and the naive t-test does not."""
    rng = np.random.default_rng(seed)
    d = draw_differences(rng, n_studies, max_seeds, diff, spread, mean)
    return adaptive(d, alpha=alpha, start=start, step=step, max_seeds=max_seeds,
                    equivalence=equivalence, t_star=t_star, t_min=t_min,
                    true_sign=int(np.sign(diff)), c=c, rules=rules)
