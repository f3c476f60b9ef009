"""The figures of a study (seaborn style, Agg backend), each saved as PNG and SVG, and
`all_figures`, which draws every one the study's data supports, in forked processes if asked.

- `acc_vs_auc`: accuracy vs attention AUC per run, coloured by the axis the study
  varies (else by variant), with the exponential fit acc = a exp(b AUC) + c per panel
  where the data can carry one (the paper: "accuracy grows exponentially with
  attention correctness"); `init_cos`: attention AUC and accuracy vs cos(p_init, p_opt)
  (paper Figure 2). Both in `analysis.figure_scatter`; Pearson r (with its 95% CI and n)
  and fits only with the data the tables need for a statistic, the panels without them
  named in the caption with the reason.
- `dynamics`: validation accuracy and AUC per epoch, median and interquartile band
  over runs, by init quality (tertiles of cos(p_init, p_opt)) or by variant
  (paper Figures 3-4; runs left out, such as attention runs whose cosine is undefined,
  named in the caption); `sdc_dynamics`: the SDC runs' FTPT/FFPT/FTPF/FFPF fractions per
  epoch. Both in `analysis.figure_curves`.
- `ratio_kept`: ratio of nodes kept per pooling layer vs threshold; `acc_by_size`: test
  accuracy vs graph size (N bins), TEST-ORIG vs TEST-LARGE; `gt_mass`: fraction of graphs
  whose ground-truth nodes get attention mass >= t (an SDC-style curve). All three in
  `analysis.figure_binned`.

Every figure function returns the `Figure`s it wrote, or [] when the study has no data
for it. The shared style (`PercentTicks` for percentage axes, integer epoch ticks,
palettes, saving) is `analysis.figure_style`. The names that were defined here before
the module was split stay importable from here.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.figure_binned import GT_MASS_CAPTION, acc_by_size, gt_mass, ratio_kept
from analysis.figure_curves import SDC_FRACTIONS, dynamics, sdc_dynamics
from analysis.figure_scatter import acc_vs_auc, init_cos
from analysis.figure_style import (
    DENSE_POINTS,
    DPI,
    MARKER_SIZE,
    MARKERS,
    MAX_HUE,
    RASTER_POINTS,
    Figure,
    PercentTicks,
    epoch_axis,
    percent_axis,
)

__all__ = [
    "DENSE_POINTS", "DPI", "GT_MASS_CAPTION", "MARKERS", "MARKER_SIZE", "MAX_HUE",
    "RASTER_POINTS", "SDC_FRACTIONS", "Figure", "PercentTicks", "acc_by_size", "acc_vs_auc",
    "all_figures", "dynamics", "epoch_axis", "gt_mass", "init_cos", "percent_axis",
    "ratio_kept", "sdc_dynamics",
]

_TASKS: list = []  # (function, args) of the figures being drawn; read by forked workers


def _draw(i: int) -> tuple[list[Figure], float]:
    """Draw the i-th task of _TASKS; its figures and the seconds it took."""
    import time

    fn, args = _TASKS[i]
    t0 = time.perf_counter()
    return fn(*args), time.perf_counter() - t0


def all_figures(ok: pd.DataFrame, curves: pd.DataFrame, out: Path, study: str,
                variants: list[str], jobs: int = 1, hue: str | None = None) -> list[Figure]:
    """Every figure that the study's data supports; `hue` is the axis the accuracy-AUC
    scatter is coloured by (None: by variant); `jobs` > 1 draws them in that many forked
    processes (matplotlib is single-threaded; the data is shared by fork)."""
    global _TASKS
    _TASKS = [(acc_vs_auc, (ok, out, study, variants, hue)), (init_cos, (ok, out, study)),
              (dynamics, (ok, curves, out, study, variants)), (ratio_kept, (ok, out, study)),
              (acc_by_size, (ok, out, study, variants)), (gt_mass, (ok, out, study, variants))]
    results = None
    if jobs > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        try:
            ctx = mp.get_context("fork")
            with ProcessPoolExecutor(min(jobs, len(_TASKS)), mp_context=ctx) as pool:
                # the slowest figures first, so that the two workers finish together
                order = [0, 5, 2, 1, 3, 4]
                done = dict(zip(order, pool.map(_draw, order)))
            results = [done[i] for i in range(len(_TASKS))]
        except (ValueError, OSError, RuntimeError):
            results = None  # no fork on this platform, or a worker died: draw here
    if results is None:
        results = [_draw(i) for i in range(len(_TASKS))]
    _TASKS = []
    figs: list[Figure] = []
    for made, seconds in results:
        for f in made:
            f.info["seconds"] = seconds
        figs += made
    return figs
