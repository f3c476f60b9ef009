"""Statistics of the report: mean +- std, CIs of a mean, a paired test, Holm, exponential fit.

- `mean_std`: sample mean and standard deviation (ddof = 1, as "mean +- std over runs").
- `mean_ci` (alias `bootstrap_ci`, its historical name): Student-t CI of the mean. It holds
  its level at the 5-10 seeds a study has, on normal and on skewed, bounded accuracy-like
  data (tests/test_analysis_stats.py simulates it); the percentile bootstrap it replaces
  covered the mean only 84% / 90% of the time at n = 5 / 10 for a nominal 95%.
- `sign_flip`: the one paired test of the report, an exact paired permutation (sign-flip)
  test of the mean difference, and the CI that inverts it: 0 lies outside the CI exactly
  when p < alpha, so the interval and the p-value can never disagree.
- `corrected_t` (`paired_folds`): the paired test of a k-fold cross-validated study, over
  folds: the corrected resampled t-test of Nadeau & Bengio (2003), whose variance counts
  the overlap of the folds' training sets.
- `holm`: Holm-Bonferroni step-down adjustment of a family of p-values.
- `exp_fit`: least-squares fit of y = a * exp(b * x) + c (the paper's "accuracy grows
  exponentially with attention AUC"): grid over b with a, c solved linearly, then
  refined by `scipy.optimize.curve_fit`; `exp_fit_support` says whether data can carry it.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

N_BOOT = 10_000  # random sign patterns of a sign-flip test beyond MAX_EXACT pairs
MAX_DRAWS = 500_000  # cap on patterns x sample size per test (B shrinks, >= MIN_BOOT)
MIN_BOOT = 1_000  # fewest random sign patterns
SEED = 0  # every random sign-flip test starts from this seed
MIN_PAIRED_SEEDS = 5  # fewer shared seeds: no p-value, CI, marker or finding for a comparison
MAX_EXACT = 16  # sign-flip test enumerates all 2^n sign patterns up to this many pairs
MIN_CORRELATION_POINTS = 10  # fewest runs for a correlation or fit to be stated as a finding
MIN_FIT_POINTS = 10  # fewest points for an exponential fit to be drawn
MIN_FIT_SPAN = 0.10  # the x values (AUC, fractions) must span at least this much
MIN_FIT_DISTINCT = 5  # ... and take at least this many distinct values


def _clean(x: object) -> np.ndarray:
    a = np.asarray(x, dtype=float).ravel()
    return a[np.isfinite(a)]


def mean_std(x: object) -> tuple[float, float]:
    """Mean and sample std (ddof = 1) of the finite values; std is NaN for one value."""
    a = _clean(x)
    if a.size == 0:
        return math.nan, math.nan
    return float(a.mean()), float(a.std(ddof=1)) if a.size > 1 else math.nan


def n_resamples(n: int, n_boot: int = N_BOOT) -> int:
    """Random draws for a sample of size n: `n_boot`, or fewer (at least MIN_BOOT) when
    n * n_boot > MAX_DRAWS (the cap `sign_flip` puts on its random sign patterns)."""
    return int(max(min(n_boot, MIN_BOOT), min(n_boot, MAX_DRAWS // max(n, 1))))


def mean_ci(x: object, level: float = 0.95) -> tuple[float, float]:
    """Student-t CI of the mean of the finite values: mean -+ t_{n-1, (1+level)/2} s / sqrt(n).

    (NaN, NaN) with fewer than two values (one value has no spread to build an interval
    from); a sample of equal values gives the point (its value, its value)."""
    a = _clean(x)
    if a.size < 2:
        return math.nan, math.nan
    m = float(a.mean())
    if np.all(a == a[0]):
        return m, m
    from scipy import stats as sps

    half = float(sps.t.ppf(0.5 + level / 2, a.size - 1)) * float(a.std(ddof=1)) \
        / math.sqrt(a.size)
    return m - half, m + half


def bootstrap_ci(x: object, level: float = 0.95, n_boot: int = N_BOOT,
                 seed: int = SEED) -> tuple[float, float]:
    """The report's CI of a mean, under its historical name: now `mean_ci`, a Student-t
    interval (no resampling; `n_boot` and `seed` are accepted for callers and ignored).
    The percentile bootstrap it used to be is too narrow at small n (84% coverage at n = 5
    for a nominal 95%)."""
    del n_boot, seed
    return mean_ci(x, level)


def _flip_set_means(d: np.ndarray, n_perm: int, seed: int) -> tuple[np.ndarray, int, int]:
    """Means of d over the sets A of flipped signs: (sorted means of the non-empty sets,
    empty sets drawn, denominator). Exact (every non-empty subset, denominator 2^n) for
    n <= MAX_EXACT; otherwise `n_perm` random sets, denominator n_perm + 1."""
    n = d.size
    if n <= MAX_EXACT:
        sums, sizes = np.zeros(1), np.zeros(1, dtype=np.int64)
        for x in d:  # subset sums by doubling: 2^n entries, the empty set first
            sums, sizes = np.concatenate([sums, sums + x]), np.concatenate([sizes, sizes + 1])
        return np.sort(sums[1:] / sizes[1:]), 0, 2 ** n
    rng = np.random.default_rng(seed)
    b = max(MIN_BOOT, min(n_perm, MAX_DRAWS // n))
    flip = rng.integers(0, 2, size=(b, n), dtype=np.int8).astype(bool)
    sizes = flip.sum(axis=1)
    keep = sizes > 0
    return np.sort((flip[keep] @ d) / sizes[keep]), int((~keep).sum()), b + 1


def sign_flip(d: object, alpha: float = 0.05, n_perm: int = N_BOOT,
              seed: int = SEED) -> tuple[float, float, float]:
    """(p, CI low, CI high) of the exact paired permutation (sign-flip) test of mean(d) = 0.

    Under the null the signs of the paired differences are exchangeable. Flipping the set
    A of signs moves the sum at least as far up as observed iff mean_A(d - delta) <= 0, so
    p_up(delta) = (1 + #{A : mean_A(d) <= delta}) / 2^n (the identity counted once), p_down
    alike, and p = min(1, 2 min(p_up(0), p_down(0))). The (1 - alpha) CI is every delta
    with p(delta) > alpha: order statistics of the subset means. Hence 0 is outside the CI
    iff p < alpha. With n pairs p >= 2 / 2^n, and the CI is unbounded while 2 / 2^n > alpha.
    """
    a = _clean(d)
    if a.size == 0:
        return math.nan, math.nan, math.nan
    means, empty, total = _flip_set_means(a, n_perm, seed)
    tol = 1e-9 * max(1.0, float(np.abs(a).max()))
    below = int(np.searchsorted(means, tol, side="right"))  # subset means <= 0
    above = means.size - int(np.searchsorted(means, -tol, side="left"))  # subset means >= 0
    p = min(1.0, 2 * (1 + empty + min(below, above)) / total)
    k = math.floor(alpha * total / 2 - 1 - empty + 1e-9) + 1  # fewest counts not rejected
    if k <= 0:
        return p, -math.inf, math.inf
    return p, float(means[k - 1]), float(means[means.size - k])


def min_p(n: int) -> float:
    """Smallest two-sided sign-flip p reachable with n non-zero pairs: 2 / 2^n."""
    return min(1.0, 2.0 / 2 ** n) if n > 0 else math.nan


SIGN_FLIP = "sign-flip"  # `Paired.test` of the paired test over seeds
CORRECTED_T = "corrected t (folds)"  # `Paired.test` of the paired test over CV folds


def corrected_t(d: object, folds: int, alpha: float = 0.05) -> tuple[float, float, float]:
    """(p, CI low, CI high) of the corrected resampled t-test of mean(d) = 0 over the k
    per-fold differences `d` of a `folds`-fold cross-validation (Nadeau & Bengio 2003,
    Machine Learning 52, "Inference for the generalization error").

    The folds' training sets overlap (any two share (folds - 2) / (folds - 1) of their
    graphs), so the per-fold differences are correlated and s^2 / k understates the
    variance of their mean; the corrected variance is (1/k + n_test/n_train) s^2 with
    n_test/n_train = 1 / (folds - 1), s^2 the sample variance (ddof 1) of d. Then
    t = mean(d) / sqrt(var) with k - 1 degrees of freedom, p two-sided, and the (1 - alpha)
    CI mean(d) -+ t_{k-1, 1-alpha/2} sqrt(var): it excludes 0 exactly when p < alpha.
    NaN with fewer than two finite values; equal differences give p = 1 (all 0) or 0 and
    the point CI (their value, their value).

    Repeated k-fold CV (r partitions, e.g. `data.split_seed: seed`): `d` holds all r x k
    per-test-fold differences, and the same formula is the corrected repeated k-fold CV test
    of Bouckaert & Frank (PAKDD 2004): variance (1/(r k) + n_test/n_train) s^2, r k - 1
    degrees of freedom.
    """
    a = _clean(d)
    k = a.size
    if k < 2:
        return math.nan, math.nan, math.nan
    if isinstance(folds, bool) or not (folds >= 2 and int(folds) == folds):
        raise ValueError(f"folds must be an integer >= 2 (the k of k-fold CV), got {folds!r}")
    m = float(a.mean())
    if np.all(a == a[0]):
        return (1.0 if m == 0 else 0.0), m, m
    from scipy import stats as sps

    se = float(a.std(ddof=1)) * math.sqrt(1 / k + 1 / (int(folds) - 1))
    p = float(2 * sps.t.sf(abs(m) / se, k - 1))
    half = float(sps.t.ppf(1 - alpha / 2, k - 1)) * se
    return min(1.0, p), m - half, m + half


@dataclass(frozen=True)
class Paired:
    """A paired comparison of a row with its baseline over shared seeds (or CV folds)."""

    n: int  # shared seeds (`paired`) or shared folds (`paired_folds`)
    delta: float  # mean difference (row - baseline)
    ci_lo: float  # CI of the mean difference, the inversion of the test
    ci_hi: float
    p: float  # two-sided p of the test
    test: str = SIGN_FLIP  # which test: SIGN_FLIP or CORRECTED_T


def paired(variant: object, baseline: object, alpha: float = 0.05, n_perm: int = N_BOOT,
           seed: int = SEED) -> Paired:
    """Compare two aligned arrays (one value per shared seed; NaN pairs dropped)."""
    v, b = np.asarray(variant, dtype=float), np.asarray(baseline, dtype=float)
    keep = np.isfinite(v) & np.isfinite(b)
    d = v[keep] - b[keep]
    if d.size == 0:
        return Paired(0, math.nan, math.nan, math.nan, math.nan)
    p, lo, hi = sign_flip(d, alpha, n_perm, seed)
    return Paired(int(d.size), float(d.mean()), lo, hi, p)


def paired_folds(variant: object, baseline: object, folds: int, alpha: float = 0.05) -> Paired:
    """Compare two aligned arrays of a `folds`-fold cross-validation (one value per shared
    test fold, a fold of one partition: the mean over the seeds both ran; NaN pairs dropped) by
    `corrected_t`."""
    v, b = np.asarray(variant, dtype=float), np.asarray(baseline, dtype=float)
    keep = np.isfinite(v) & np.isfinite(b)
    d = v[keep] - b[keep]
    if d.size == 0:
        return Paired(0, math.nan, math.nan, math.nan, math.nan, CORRECTED_T)
    p, lo, hi = corrected_t(d, folds, alpha)
    return Paired(int(d.size), float(d.mean()), lo, hi, p, CORRECTED_T)


def holm(p: object) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (NaN entries stay NaN and are not counted).

    Sort the m finite p ascending; adjusted p_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)).
    """
    a = np.asarray(p, dtype=float)
    out = np.full(a.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(a))
    m = ok.size
    if m == 0:
        return out
    order = ok[np.argsort(a[ok], kind="stable")]
    adj = np.minimum(1.0, (m - np.arange(m)) * a[order])
    out[order] = np.maximum.accumulate(adj)
    return out


@dataclass(frozen=True)
class ExpFit:
    """y = a * exp(b * x) + c fitted by least squares."""

    a: float
    b: float
    c: float
    r2: float  # coefficient of determination of the fit
    n: int  # points fitted
    method: str  # "curve_fit", "grid" (refinement failed) or "none"

    def __call__(self, x: object) -> np.ndarray:
        return self.a * np.exp(self.b * np.asarray(x, dtype=float)) + self.c

    def describe(self) -> str:
        if self.method == "none":
            return "no exponential fit"
        sign = "+" if self.c >= 0 else "−"
        return (f"acc = {self.a:.3g}·exp({self.b:.3g}·AUC) {sign} {abs(self.c):.3g} "
                f"(R² = {self.r2:.2f}, n = {self.n})")


def _r2(y: np.ndarray, yhat: np.ndarray) -> float:
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - float(np.sum((y - yhat) ** 2)) / ss_tot if ss_tot > 0 else math.nan


def _profile_rss(xc: np.ndarray, y: np.ndarray, b: float) -> tuple[float, float, float]:
    """For a fixed b, the least-squares a, c of y = a exp(b xc) + c are a simple linear
    regression of y on e = exp(b xc): (rss, a, c)."""
    e = np.exp(b * xc)
    ec, yc = e - e.mean(), y - y.mean()
    var = float(ec @ ec)
    a = float(ec @ yc) / var if var > 0 else 0.0
    c = float(y.mean() - a * e.mean())
    r = yc - a * ec
    return float(r @ r), a, c


def exp_fit(x: object, y: object) -> ExpFit:
    """Least-squares fit of y = a exp(b x) + c.

    b is first located on a grid (for each b, a and c are a linear least-squares
    problem), then all three are refined with `scipy.optimize.curve_fit` (analytic
    Jacobian). Falls back to the grid optimum if the refinement fails; no fit with
    fewer than 3 points or constant x or y."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(xa) & np.isfinite(ya)
    xa, ya = xa[keep], ya[keep]
    n = int(xa.size)
    if n < 3 or np.ptp(xa) == 0 or np.ptp(ya) == 0:
        return ExpFit(math.nan, math.nan, math.nan, math.nan, n, "none")
    x0, scale = float(xa.mean()), float(np.ptp(xa))
    xc = xa - x0  # fit a' exp(b (x - x0)) + c, a = a' exp(-b x0): no overflow
    grid = np.linspace(-40.0, 40.0, 161) / scale
    sub = np.linspace(0, n - 1, min(n, 2_000)).astype(int)  # locating b needs no more points
    _, _, _, b1 = min((_profile_rss(xc[sub], ya[sub], b) + (b,) for b in grid if b != 0),
                      key=lambda t: t[0])
    best = _profile_rss(xc, ya, b1)
    _, a1, c1 = best
    method = "grid"
    try:
        from scipy import optimize

        def f(t, a, b, c):
            return a * np.exp(b * t) + c

        def jac(t, a, b, c):
            e = np.exp(b * t)
            return np.column_stack([e, a * t * e, np.ones_like(t)])

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (a2, b2, c2), _ = optimize.curve_fit(f, xc, ya, p0=(a1, b1, c1), jac=jac,
                                                 maxfev=2_000)
        if np.all(np.isfinite([a2, b2, c2])) and abs(b2) * scale <= 80:
            rss2 = float(np.sum((ya - f(xc, a2, b2, c2)) ** 2))
            if rss2 <= best[0]:
                a1, b1, c1, method = a2, b2, c2, "curve_fit"
    except (RuntimeError, ValueError, FloatingPointError):
        pass
    a = a1 * math.exp(-b1 * x0)
    yhat = a1 * np.exp(b1 * xc) + c1
    return ExpFit(float(a), float(b1), float(c1), _r2(ya, yhat), n, method)


def exp_fit_support(x: object) -> str:
    """Why the x values (AUC, fractions) cannot carry a 3-parameter exponential fit, or ""
    when they can: at least MIN_FIT_POINTS points, MIN_FIT_DISTINCT distinct values and a
    span of MIN_FIT_SPAN (a curve through a narrow cloud is extrapolated noise)."""
    a = _clean(x)
    if a.size < MIN_FIT_POINTS:
        return f"{a.size} points (a fit needs ≥ {MIN_FIT_POINTS})"
    if np.unique(a).size < MIN_FIT_DISTINCT:
        return f"{np.unique(a).size} distinct AUC values (a fit needs ≥ {MIN_FIT_DISTINCT})"
    if np.ptp(a) < MIN_FIT_SPAN:
        return (f"AUC spans {100 * np.ptp(a):.1f} points (a fit needs ≥ "
                f"{100 * MIN_FIT_SPAN:.0f})")
    return ""


def pearson(x: object, y: object) -> tuple[float, float, int]:
    """Pearson r, its two-sided p, and n over the finite pairs (NaN with < 3 or constant)."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(xa) & np.isfinite(ya)
    xa, ya = xa[keep], ya[keep]
    if xa.size < 3 or np.ptp(xa) == 0 or np.ptp(ya) == 0:
        return math.nan, math.nan, int(xa.size)
    from scipy import stats as sps

    r, p = sps.pearsonr(xa, ya)
    return float(r), float(p), int(xa.size)
