"""Paired differences over seeds as the confidence sequences take them: checked, one line each.

`analysis.sequences` and `analysis.betting` read d_i = metric(row, seed i) - metric(baseline,
seed i) in [-1, 1] (metrics in [0, 1]); anything else is a one-line ValueError.
"""

from __future__ import annotations

import numpy as np

_TOL = 1e-9  # differences this far outside [-1, 1] are rounding and clipped


def check_alpha(alpha: float) -> float:
    """alpha as a float in (0, 1), else a one-line ValueError."""
    a = float(alpha)
    if not (0.0 < a < 1.0):  # also rejects NaN
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    return a


def check_differences(d: object) -> np.ndarray:
    """Paired differences as float, 1-D (one sequence) or 2-D (sequences along the last axis)."""
    a = np.asarray(d, dtype=float)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim > 2:
        raise ValueError(f"d must be 1-D (one sequence) or 2-D (rows of sequences), got {a.ndim}-D")
    if a.size == 0 or a.shape[-1] == 0:
        raise ValueError("d is empty: a confidence sequence needs at least one paired difference")
    if not np.all(np.isfinite(a)):
        raise ValueError("d contains NaN or inf: drop the seeds without a paired value first")
    worst = float(np.abs(a).max())
    if worst > 1.0 + _TOL:
        raise ValueError(f"paired differences must lie in [-1, 1] (metrics in [0, 1]), "
                         f"got |d| = {worst:.6g}")
    return np.clip(a, -1.0, 1.0)
