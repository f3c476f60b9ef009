"""Hedged-capital betting confidence sequence for a mean paired difference (issue 54).

I. Waudby-Smith and A. Ramdas, "Estimating means of bounded random variables by betting",
J. R. Stat. Soc. B 86(1):1-27, 2024 (arXiv:2010.09686), Theorem 3 (hedged capital), with
the choices of the authors' `confseq` package (`betting.py: hedged_cs`, read for its
defaults; written here from the paper's definitions, no code copied):

- a paired difference d in [-1, 1] is mapped to x = (d + 1) / 2 in [0, 1];
- for a candidate mean m of x, two capital processes start at 1 and multiply each seed by
      K+ : 1 + l+_i(m) (x_i - m),      K- : 1 - l-_i(m) (x_i - m);
- the bets are predictable plug-ins (computed from the seeds before i only):
      mu_i = (1/2 + sum_{j<=i} x_j) / (i + 1),  s2_i = (1/4 + sum_{j<=i} (x_j - mu_j)^2) / (i + 1)
      l_i = sqrt(2 log(1 / (alpha theta)) / (s2_{i-1} i log(1 + i))),  s2_0 = 1/4
  truncated at c / m for K+ and c / (1 - m) for K- (c < 1 keeps both capitals positive);
- m stays in the set at seed t while max(theta K+_t(m), (1 - theta) K-_t(m)) < 1 / alpha,
  theta = 1/2; the set is intersected over time (running intersection).

Both capitals are monotone in m (each factor 1 + min(l, c/m)(x - m) falls as m grows, each
1 - min(l, c/(1-m))(x - m) rises), so the set is an interval: its lower end is where K+
stops reaching 2 / alpha and its upper end where K- does. A decision needs the capitals at
three points only: m = 1/2 (d = 0: a difference, with its sign) and m = (1 -+ eq) / 2 (the
equivalence margins). Exact: valid at every number of seeds and under any stopping rule, for
any distribution on [-1, 1] (Ville's inequality on each capital, a nonnegative martingale
under its null).

Floor no test can beat: the null putting mass 1/(1 + delta) on delta and the rest on -1 has
mean 0 and gives n identical draws delta with probability (1 + delta)^-n, so excluding 0 needs
n >= ln(2 / alpha) / ln(1 + delta) (two-sided, `seed_floor`). These bets reach at most
1 + c delta per seed at m = 1/2, so they need n >= ln(2 / alpha) / ln(1 + c delta).
"""

from __future__ import annotations

import math

import numpy as np

from analysis.paired_input import check_alpha, check_differences

THETA = 0.5  # weight of the positive capital (the paper's and confseq's choice)
BET_C = 0.75  # truncation of the bets at c/m and c/(1-m) (confseq's default 1/2; see docs)
_BISECT = 50  # halvings of [0, 1] for the interval's ends: 2^-50, below float rounding of d


def bets(x: np.ndarray, alpha: float, theta: float = THETA) -> np.ndarray:
    """Predictable plug-in bets l_i (before truncation), along the last axis of x in [0, 1]:
    l_i = sqrt(2 log(1 / (alpha theta)) / (s2_{i-1} i log(1 + i))) (Waudby-Smith & Ramdas)."""
    t = np.arange(1, x.shape[-1] + 1, dtype=float)
    mu = (0.5 + np.cumsum(x, axis=-1)) / (t + 1)
    s2 = (0.25 + np.cumsum((x - mu) ** 2, axis=-1)) / (t + 1)
    lead = [(0, 0)] * (x.ndim - 1) + [(1, 0)]
    s2_prev = np.pad(s2[..., :-1], lead, constant_values=0.25)
    return np.sqrt(2.0 * math.log(1.0 / (alpha * theta)) / (s2_prev * t * np.log1p(t)))


def capitals(x: np.ndarray, m: object, lam_pos: np.ndarray, lam_neg: np.ndarray,
             c: float = BET_C) -> tuple[np.ndarray, np.ndarray]:
    """Running maxima over time of K+_t(m) and K-_t(m) (the running intersection: a mean
    rejected once stays rejected). `m` broadcasts against x[..., :1]."""
    m = np.asarray(m, dtype=float)
    with np.errstate(divide="ignore"):
        lp = np.minimum(lam_pos, c / m)
        ln = np.minimum(lam_neg, c / (1.0 - m))
    kp = np.cumprod(1.0 + lp * (x - m), axis=-1)
    kn = np.cumprod(1.0 - ln * (x - m), axis=-1)
    return np.maximum.accumulate(kp, axis=-1), np.maximum.accumulate(kn, axis=-1)


def _prepare(d: object, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    alpha = check_alpha(alpha)
    x = (check_differences(d) + 1.0) / 2.0
    return x, bets(x, alpha, THETA), bets(x, alpha, 1.0 - THETA)


def _check_c(c: float) -> float:
    if not 0.0 < float(c) < 1.0:
        raise ValueError(f"c must be in (0, 1), got {c!r}")
    return float(c)


def betting_cs(d: object, alpha: float = 0.05, *, c: float = BET_C
               ) -> tuple[np.ndarray, np.ndarray]:
    """Exact (1 - alpha) confidence sequence for the mean paired difference (hedged capital).

    `d`: paired differences in seed order, each in [-1, 1] (1-D, or 2-D with one sequence
    per row). Returns (lo, hi) of d's shape, already intersected over time: with probability
    >= 1 - alpha the true mean lies in (lo_t, hi_t) at every t at once. The ends are found by
    bisection on m (the capitals are monotone in m) to 2^-50."""
    c = _check_c(c)
    x, lp, ln = _prepare(d, alpha)
    bar = 1.0 / (THETA * alpha)  # theta K+ >= 1/alpha  <=>  K+ >= 2/alpha (theta = 1/2)
    bar_neg = 1.0 / ((1.0 - THETA) * alpha)
    shape = x.shape
    # per t, lo_t = sup{m: K+_t(m) >= bar}: bisection on every t at once (m along a new axis)
    lo_a, lo_b = np.zeros(shape), np.ones(shape)  # K+ rejects lo_a (or lo_a = 0), keeps lo_b
    hi_a, hi_b = np.zeros(shape), np.ones(shape)  # K- keeps hi_a, rejects hi_b (or = 1)
    idx = np.arange(shape[-1])
    for _ in range(_BISECT):
        mid_lo, mid_hi = (lo_a + lo_b) / 2, (hi_a + hi_b) / 2
        rej_lo = _reject_each(x, mid_lo, lp, ln, c, idx, bar, positive=True)
        rej_hi = _reject_each(x, mid_hi, lp, ln, c, idx, bar_neg, positive=False)
        lo_a, lo_b = np.where(rej_lo, mid_lo, lo_a), np.where(rej_lo, lo_b, mid_lo)
        hi_a, hi_b = np.where(rej_hi, hi_a, mid_hi), np.where(rej_hi, mid_hi, hi_b)
    lo, hi = lo_a, hi_b  # outward ends: never narrower than the set
    return 2.0 * lo - 1.0, 2.0 * hi - 1.0


def _reject_each(x: np.ndarray, m: np.ndarray, lp: np.ndarray, ln: np.ndarray, c: float,
                 idx: np.ndarray, bar: float, positive: bool) -> np.ndarray:
    """Whether the running-max capital at time t rejects m[..., t], for every t."""
    n = x.shape[-1]
    # capital paths for each candidate m_t: shape (..., n_candidates = n, n_time)
    kp, kn = capitals(x[..., None, :], m[..., :, None], lp[..., None, :], ln[..., None, :], c)
    k = kp if positive else kn
    return k[..., idx, idx] >= bar if n else np.zeros(m.shape, dtype=bool)


def _decision_capitals(d: np.ndarray, at: np.ndarray, alpha: float, equivalence: float,
                       c: float) -> tuple[np.ndarray, ...]:
    """The running-max capitals a decision reads, at the looks `at`: K+ and K- at m = 1/2
    (a sign), K+ at (1 - eq) / 2 and K- at (1 + eq) / 2 (equivalence)."""
    x, lp, ln = _prepare(d, alpha)
    j = np.asarray(at) - 1
    kp0, kn0 = capitals(x, 0.5, lp, ln, c)
    kp_lo, _ = capitals(x, (1.0 - equivalence) / 2.0, lp, ln, c)
    _, kn_hi = capitals(x, (1.0 + equivalence) / 2.0, lp, ln, c)
    return kp0[..., j], kn0[..., j], kp_lo[..., j], kn_hi[..., j]


def decision_codes(d: np.ndarray, at: np.ndarray, alpha: float, equivalence: float,
                   c: float = BET_C) -> np.ndarray:
    """Per row of d (studies x seeds) and look in `at` (seed counts): 0 open, 1 greater,
    2 less, 3 equivalent, from the capitals at m = 1/2 and the margins (1 -+ eq) / 2 only."""
    c = _check_c(c)
    bar = 1.0 / (THETA * alpha)
    kp0, kn0, kp_lo, kn_hi = _decision_capitals(d, at, alpha, equivalence, c)
    greater, less = kp0 >= bar, kn0 >= bar
    equivalent = (kp_lo >= bar) & (kn_hi >= bar)
    out = np.zeros(greater.shape, dtype=np.int8)
    out[less] = 2
    out[greater] = 1
    out[equivalent] = 3
    return out


def smallest_equivalence(seeds: int, alpha: float, c: float = BET_C) -> float:
    """The narrowest margin eq within which these bets can call two rows equivalent within
    `seeds` seeds, even when every paired difference is 0: at m = (1 - eq) / 2 and x = 1/2 a
    truncated bet wins at most 1 + (c / m)(eq / 2) = 1 + c eq / (1 - eq) a seed (the same
    for K- at (1 + eq) / 2), so both capitals reach 2 / alpha only when
    c eq / (1 - eq) >= g, g = exp(ln(2 / alpha) / seeds) - 1, i.e. eq >= g / (c + g)."""
    g = smallest_decidable(seeds, alpha, 1.0)
    return g / (float(c) + g)


def equivalence_seeds(equivalence: float, alpha: float, c: float = BET_C) -> int:
    """Fewest seeds these bets need to call two rows equivalent within ±`equivalence` (0-1
    scale), reached only when every paired difference is 0: ln(2 / alpha) / ln(1 + c eq /
    (1 - eq)), rounded up (`smallest_equivalence` inverted)."""
    if not 0.0 < equivalence < 1.0:
        raise ValueError(f"equivalence must be in (0, 1), got {equivalence!r}")
    alpha = check_alpha(alpha)
    win = float(c) * equivalence / (1.0 - equivalence)
    return math.ceil(math.log(2.0 / alpha) / math.log1p(win) - 1e-12)


def can_still_decide(d: object, remaining: int, alpha: float, equivalence: float,
                     c: float = BET_C) -> bool:
    """Whether `remaining` more paired differences, whatever they are, could still make the
    sequence decide after the differences `d` (1-D, in seed order): `undecidable` at the last
    look of d with max = len(d) + remaining, negated. False: no continuation can decide it
    (stopping it loses no decision)."""
    x = np.asarray(d, dtype=float)
    if x.ndim != 1 or remaining < 0:
        raise ValueError("d must be 1-D and remaining >= 0")
    if x.size == 0:
        return True
    at = np.array([x.size])
    if remaining == 0:  # no seeds left: only a decision already made
        return bool(decision_codes(x[None, :], at, alpha, equivalence, c)[0, 0])
    return not bool(undecidable(x[None, :], at, alpha, equivalence, x.size + remaining, c)[0, 0])


def undecidable(d: np.ndarray, at: np.ndarray, alpha: float, equivalence: float,
                max_seeds: int, c: float = BET_C) -> np.ndarray:
    """Per row of d (studies x seeds) and look in `at`: True where no values of the seeds left
    up to `max_seeds` could make the sequence decide. A truncated bet multiplies K+(m) by at
    most 1 + c (1 - m) / m a seed (x = 1) and K-(m) by at most 1 + c m / (1 - m) (x = 0), so
    a capital whose running maximum M has M F^left < 2 / alpha never reaches the bar: at
    m = 1/2 (F = 1 + c) that rules out 'greater' and 'less'; at the margins (1 -+ eq) / 2 (the
    same F for both) 'equivalent' needs both capitals, so it is out when either is. A look
    with no seeds left (at = max_seeds) is never marked: the study ends there anyway."""
    c = _check_c(c)
    bar = 1.0 / (THETA * alpha)
    left = max_seeds - np.asarray(at)
    kp0, kn0, kp_lo, kn_hi = _decision_capitals(d, at, alpha, equivalence, c)
    m = (1.0 - equivalence) / 2.0
    sign = np.maximum(kp0, kn0) * (1.0 + c) ** left >= bar
    same = np.minimum(kp_lo, kn_hi) * (1.0 + c * (1.0 - m) / m) ** left >= bar
    return ~(sign | same) & (left > 0)


def seed_floor(delta: float, alpha: float) -> int:
    """Fewest seeds ANY level-alpha test of a bounded mean needs to exclude 0 when every
    difference is delta: ln(2 / alpha) / ln(1 + delta), rounded up (two-sided)."""
    if not 0.0 < delta <= 1.0:
        raise ValueError(f"delta must be in (0, 1], got {delta!r}")
    return math.ceil(math.log(2.0 / alpha) / math.log1p(delta) - 1e-12)


def smallest_decidable(seeds: int, alpha: float, c: float = BET_C) -> float:
    """The smallest difference delta that these bets can call nonzero within `seeds` seeds
    even when every paired difference equals it: at m = 1/2 a bet wins at most 1 + c delta a
    seed, so K+ reaches 2 / alpha only when seeds >= ln(2 / alpha) / ln(1 + c delta), i.e.
    delta >= (exp(ln(2 / alpha) / seeds) - 1) / c (may exceed 1: then nothing is decidable).
    With c = 1 this is the floor of any level-alpha test of a bounded mean (`seed_floor`)."""
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds!r}")
    alpha = check_alpha(alpha)
    return math.expm1(math.log(2.0 / alpha) / seeds) / float(c)

