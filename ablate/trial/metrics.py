"""Metrics of both papers: accuracy, attention AUC, ratio kept, FT, NNZ, Dist, Ent.

Attention metrics take alpha and ground truth per node (or per segment) with
a mask of valid entries, as NumPy arrays or tensors of shape (B, N).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

MASS_THRESHOLDS = tuple(round(t, 2) for t in np.linspace(0.05, 0.95, 19))  # GT-mass curve points


def _np(a) -> np.ndarray:
    return a.detach().cpu().numpy() if isinstance(a, Tensor) else np.asarray(a)


def predictions(out: Tensor, regression: bool) -> Tensor:
    """Predicted labels: the rounded count (regression) or the arg-max class."""
    return torch.round(out) if regression else out.argmax(-1)


def accuracy(pred, y) -> float:
    """Fraction of exact label matches (SPEC §4)."""
    pred, y = _np(pred), _np(y)
    return float((pred.astype(np.float64) == y.astype(np.float64)).mean()) if len(y) else math.nan


def attention_auc(alpha, gt) -> float:
    """ROC AUC of alpha against (gt > 0), pooled over all given nodes (SPEC §4); NaN if undefined.

    Computed as the Mann-Whitney statistic with tied scores counted 1/2, which is the
    trapezoidal ROC AUC of `sklearn.metrics.roc_auc_score` (several times faster here).
    """
    alpha, labels = _np(alpha).ravel(), _np(gt).ravel() > 0
    if labels.all() or not labels.any():
        return math.nan
    ranks = average_ranks(alpha.astype(np.float64))
    n_pos = int(labels.sum())
    n_neg = len(labels) - n_pos
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def average_ranks(a: np.ndarray) -> np.ndarray:
    """1-based ranks of `a`, tied values sharing the mean of their ranks. (n,) -> (n,)."""
    _, inverse, counts = np.unique(a, return_inverse=True, return_counts=True)
    last = np.cumsum(counts)  # rank of the last member of each tie group
    return (last - (counts - 1) / 2.0)[inverse]


def ratio_kept(mask_before, mask_after) -> np.ndarray:
    """Per graph N_kept / N for one pooling layer (SPEC §4)."""
    before = _np(mask_before).sum(-1)
    return _np(mask_after).sum(-1) / np.maximum(before, 1)


def focus_true(alpha, gt, mask) -> tuple[int, int]:
    """FT counts: (graphs whose top-attended valid entry has gt > 0, graphs with any gt > 0)."""
    alpha, gt, mask = _np(alpha), _np(gt), _np(mask).astype(bool)
    has_gt = ((gt > 0) & mask).any(-1)
    top = np.where(mask, alpha, -np.inf).argmax(-1)
    hit = gt[np.arange(len(top)), top] > 0
    return int((hit & has_gt).sum()), int(has_gt.sum())


def gt_mass(alpha, gt, mask) -> np.ndarray:
    """Per graph the attention mass on ground-truth nodes, sum_i alpha_i [gt_i > 0]."""
    alpha, gt, mask = _np(alpha), _np(gt), _np(mask).astype(bool)
    return (alpha * ((gt > 0) & mask)).sum(-1)


def mass_curve(mass) -> list[dict]:
    """{t, fraction} of graphs with attention mass on ground truth >= t (per graph `gt_mass`),
    for every t of `MASS_THRESHOLDS`: the store's `gt_mass_curve` (a list of structs)."""
    mass = _np(mass)
    return [{"t": t, "fraction": float((mass >= t).mean()) if len(mass) else math.nan}
            for t in MASS_THRESHOLDS]


def nnz(alpha, mask, eps: float = 0.01) -> float:
    """NNZ: mean fraction of entries with alpha_j > 0.01 (Pandey et al.)."""
    alpha, mask = _np(alpha), _np(mask).astype(bool)
    return float((((alpha > eps) & mask).sum(-1) / np.maximum(mask.sum(-1), 1)).mean())


def dist_to_onehot(alpha, mask) -> float:
    """Dist: mean over rows of min_i ||alpha - e_i||_2 (Pandey et al.)."""
    alpha, mask = _np(alpha).astype(np.float64), _np(mask).astype(bool)
    a = np.where(mask, alpha, 0.0)
    sq = (a * a).sum(-1)
    # ||a - e_i||^2 = ||a||^2 - 2 a_i + 1, minimal at the largest a_i
    d2 = sq - 2 * np.where(mask, a, -np.inf).max(-1) + 1
    return float(np.sqrt(np.maximum(d2, 0)).mean())


def entropy(alpha, mask) -> float:
    """Ent: mean Shannon entropy -sum alpha log alpha of each row (natural log)."""
    alpha, mask = _np(alpha).astype(np.float64), _np(mask).astype(bool)
    a = np.where(mask & (alpha > 0), alpha, 1.0)
    return float((-(np.where(mask, alpha, 0.0) * np.log(a)).sum(-1)).mean())
