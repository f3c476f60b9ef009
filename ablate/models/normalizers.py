"""Attention normalisers over the valid entries of each row: softmax, sparsemax, spherical.

Shared by graph attention pooling (over the nodes of each graph) and the
focus-classify model of the selective-dependence study (over the segments of
each mosaic), following Pandey, Vashisht & Ramaswamy. Every function takes
scores z (B, N) and a bool mask (B, N) and returns alpha (B, N) that sums to 1
over the masked-in entries of each row and is exactly 0 elsewhere.
"""

from __future__ import annotations

import torch
from torch import Tensor

NORMALIZERS = ("softmax", "sparsemax", "spherical")


def masked_softmax(z: Tensor, mask: Tensor) -> Tensor:
    """Softmax alpha_i = exp(z_i) / sum_j exp(z_j) over the masked-in entries."""
    z = z.masked_fill(~mask, float("-inf"))
    alpha = torch.softmax(z, dim=-1)
    return torch.nan_to_num(alpha, nan=0.0)  # rows with no valid entry


def sparsemax(z: Tensor, mask: Tensor) -> Tensor:
    """Sparsemax: Euclidean projection of z onto the simplex (Martins & Astudillo, 2016)."""
    n_valid = mask.sum(-1, keepdim=True)  # (B, 1)
    zs, _ = torch.sort(z.masked_fill(~mask, float("-inf")), dim=-1, descending=True)
    k = torch.arange(1, z.shape[-1] + 1, device=z.device, dtype=z.dtype)  # (N,)
    in_range = k <= n_valid  # (B, N)
    zs = torch.where(in_range, zs, torch.zeros_like(zs))
    cumsum = _running_sum(zs)
    support = (1 + k * zs > cumsum) & in_range  # (B, N)
    k_z = support.sum(-1, keepdim=True).clamp(min=1)  # (B, 1) support size
    tau = (cumsum.gather(-1, k_z - 1) - 1) / k_z.to(z.dtype)  # (B, 1) threshold
    alpha = torch.clamp(z - tau, min=0)
    return alpha * mask.to(z.dtype)


def _running_sum(zs: Tensor) -> Tensor:
    """`zs.cumsum(-1)`; on CUDA as a product with an upper-triangular matrix of ones, since
    CUDA's floating-point cumsum has no deterministic variant (deterministic algorithms,
    `ablate.trial.setup.deterministic_cuda`, refuse it) and cuBLAS products are deterministic
    with its fixed workspace. N <= a few thousand nodes: the N x N matrix is small."""
    if not zs.is_cuda:
        return zs.cumsum(-1)
    return triangular_running_sum(zs)


def triangular_running_sum(zs: Tensor) -> Tensor:
    """`zs.cumsum(-1)` as a product with an upper-triangular matrix of ones, in float64: a
    float32 product may run in TF32 (10-bit mantissa) where `allow_tf32` is on, which would
    move sparsemax's support; float64 products never do."""
    N = zs.shape[-1]
    upper = torch.ones(N, N, dtype=torch.float64, device=zs.device).triu_()
    return (zs.to(torch.float64) @ upper).to(zs.dtype)


def spherical_softmax(z: Tensor, mask: Tensor, eps: float = 1e-12) -> Tensor:
    """Spherical softmax alpha_i = z_i^2 / sum_j z_j^2 (Vincent et al., 2015)."""
    m = mask.to(z.dtype)
    sq = (z * z + eps) * m
    return sq / sq.sum(-1, keepdim=True).clamp(min=eps)


def normalize(z: Tensor, mask: Tensor, kind: str) -> Tensor:
    """Dispatch to the normaliser named `kind` (one of NORMALIZERS)."""
    if kind == "softmax":
        return masked_softmax(z, mask)
    if kind == "sparsemax":
        return sparsemax(z, mask)
    if kind == "spherical":
        return spherical_softmax(z, mask)
    raise ValueError(f"unknown normalizer {kind!r}; valid choices: {', '.join(NORMALIZERS)}")
