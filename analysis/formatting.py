"""How the report prints things: dataset and split names, the significance arrows, and
numbers as mean ± std, p-values and confidence intervals of differences.

Tables, figures and findings all take their names and number formats from here, so a
dataset or split reads the same everywhere.
"""

from __future__ import annotations

import numpy as np

from analysis.reference import AUC_COLUMN

TEST_SPLITS = ("test_orig", "test_large", "test_largec", "test_noisy", "test_noisyc", "test")
SPLIT_NAMES = {"val": "VAL", "test_orig": "ORIG", "test_large": "LARGE",
               "test_largec": "LARGE-C", "test_noisy": "NOISY", "test_noisyc": "NOISY-C",
               "test": "TEST", AUC_COLUMN: "AUC"}
DATASET_NAMES = {"colors": "COLORS", "triangles": "TRIANGLES", "mnist_sp": "MNIST-75SP",
                 "digits_sp": "DIGITS-SP", "proteins": "PROTEINS", "dd": "D&D",
                 "collab": "COLLAB"}
UP, DOWN = "↑", "↓"
SAME = "≈"  # an adaptive study's sequence decided the rows equivalent within its margin


def dataset_name(d: str) -> str:
    return DATASET_NAMES.get(d, d.upper())


def column_name(c: str) -> str:
    return SPLIT_NAMES.get(c, c)


def fmt_pm(mean: float, std: float, digits: int = 1) -> str:
    if not np.isfinite(mean):
        return "–"
    if not np.isfinite(std):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def fmt_p(p: float) -> str:
    if not np.isfinite(p):
        return "–"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def fmt_interval(lo: float, hi: float) -> str:
    """A CI of a mean: '[14.0, 22.0]'; '–' when there is none."""
    return "–" if np.isnan(lo) or np.isnan(hi) else f"[{lo:.1f}, {hi:.1f}]"


def fmt_ci(lo: float, hi: float) -> str:
    """A CI of a difference: '[+1.0, +3.5]'; unbounded ends as ∞; '–' when absent."""
    if np.isnan(lo) or np.isnan(hi):
        return "–"

    def end(x: float) -> str:
        return ("−∞" if x < 0 else "+∞") if np.isinf(x) else f"{x:+.1f}"

    return f"[{end(lo)}, {end(hi)}]"
