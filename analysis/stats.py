"""Statistics of the report: mean +- std, bootstrap CIs, paired tests, Holm, exponential fit.

- `mean_std`: sample mean and standard deviation (ddof = 1, as "mean +- std over runs").
- `bootstrap_ci`: percentile bootstrap CI of the mean (fixed seed: reports are reproducible).
- `paired_bootstrap`: CI of the mean paired difference and a two-sided p-value from the
  null-centred bootstrap (Efron & Tibshirani 1993, Alg. 16.2).
- `wilcoxon_p`: two-sided Wilcoxon signed-rank test (exact for small samples).
- `holm`: Holm-Bonferroni step-down adjustment of a family of p-values.
- `exp_fit`: least-squares fit of y = a * exp(b * x) + c (the paper's "accuracy grows
  exponentially with attention AUC"): grid over b with a, c solved linearly, then
  refined by `scipy.optimize.curve_fit`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

N_BOOT = 10_000  # bootstrap resamples
MAX_DRAWS = 500_000  # cap on resamples x sample size per estimate (B shrinks, >= MIN_BOOT)
MIN_BOOT = 1_000  # fewest resamples: the endpoints' Monte Carlo error stays < 0.1 SE
SEED = 0  # every bootstrap starts from this seed


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
    """Resamples for a sample of size n: `n_boot`, or fewer (at least MIN_BOOT) when
    n * n_boot > MAX_DRAWS. For such n the CI is narrow and B = 1,000 already puts
    the percentile endpoints within ~0.1 standard errors of their B -> inf limit."""
    return int(max(min(n_boot, MIN_BOOT), min(n_boot, MAX_DRAWS // max(n, 1))))


def _boot_means(a: np.ndarray, n_boot: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, a.size, size=(n_resamples(a.size, n_boot), a.size), dtype=np.int32)
    return a[idx].mean(axis=1)


def bootstrap_ci(x: object, level: float = 0.95, n_boot: int = N_BOOT,
                 seed: int = SEED) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean: resample with replacement, take the quantiles."""
    a = _clean(x)
    if a.size == 0:
        return math.nan, math.nan
    if a.size == 1 or np.all(a == a[0]):
        return float(a[0]), float(a[0])
    means = _boot_means(a, n_boot, seed)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


@dataclass(frozen=True)
class Paired:
    """A paired comparison of a variant with its baseline over shared seeds."""

    n: int  # shared seeds
    delta: float  # mean difference (variant - baseline)
    ci_lo: float  # bootstrap CI of the mean difference
    ci_hi: float
    p_boot: float  # two-sided p, null-centred paired bootstrap
    p_wilcoxon: float  # two-sided p, Wilcoxon signed-rank


def paired_bootstrap(d: object, level: float = 0.95, n_boot: int = N_BOOT,
                     seed: int = SEED) -> tuple[float, float, float]:
    """(CI low, CI high, p) of the mean of paired differences `d`.

    CI: percentile bootstrap of mean(d). p: resample the centred differences
    d - mean(d) (the null of no mean difference) and count |mean*| >= |mean(d)|,
    with the +1 correction: p = (1 + #) / (1 + B).
    """
    a = _clean(d)
    if a.size == 0:
        return math.nan, math.nan, math.nan
    lo, hi = bootstrap_ci(a, level, n_boot, seed)
    if a.size < 2:
        return lo, hi, math.nan
    obs = a.mean()
    null = _boot_means(a - obs, n_boot, seed)
    p = (1 + np.sum(np.abs(null) >= abs(obs) - 1e-12)) / (1 + null.size)
    return lo, hi, float(min(1.0, p))


def wilcoxon_p(d: object) -> float:
    """Two-sided Wilcoxon signed-rank p of paired differences (zeros dropped; exact when
    n <= 50 without ties). 1 when every difference is zero, NaN without data."""
    a = _clean(d)
    if a.size == 0:
        return math.nan
    if np.all(a == 0):
        return 1.0
    from scipy import stats as sps  # imported on first use: a bad-input exit stays fast

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(sps.wilcoxon(a, zero_method="wilcox", alternative="two-sided").pvalue)


def paired(variant: object, baseline: object, level: float = 0.95, n_boot: int = N_BOOT,
           seed: int = SEED) -> Paired:
    """Compare two aligned arrays (one value per shared seed; NaN pairs dropped)."""
    v, b = np.asarray(variant, dtype=float), np.asarray(baseline, dtype=float)
    keep = np.isfinite(v) & np.isfinite(b)
    d = v[keep] - b[keep]
    if d.size == 0:
        return Paired(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    lo, hi, p_boot = paired_bootstrap(d, level, n_boot, seed)
    return Paired(int(d.size), float(d.mean()), lo, hi, p_boot, wilcoxon_p(d))


def min_wilcoxon_p(n: int) -> float:
    """Smallest two-sided exact Wilcoxon p reachable with n pairs: 2 / 2^n."""
    return min(1.0, 2.0 / 2 ** n) if n > 0 else math.nan


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
