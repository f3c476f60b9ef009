"""The MNIST-75SP edge kernel: complete graphs weighted by the distance of superpixel centroids.

SPEC section 1 and the reference's `compute_adjacency_matrix_images`:
A_ij = exp(-||c_i - c_j|| / (0.1 pi)^2) with a zero diagonal, the distance being the
PLAIN Euclidean distance (not its square, though the form looks like a Gaussian kernel).
Prepared MNIST-75SP graphs store only their centroids (`ablate.data.graphs.GraphSet.coord`);
`adjacency` gives one graph's matrix (NumPy, the public `Data` view), `adjacency_batch` a
padded batch's (torch, where the batch trains or is evaluated), with the same bits.
"""

from __future__ import annotations

import numpy as np

SIGMA = 0.1  # adjacency bandwidth: A_ij = exp(-d_ij / (SIGMA * pi)^2)


def adjacency(coord: np.ndarray) -> np.ndarray:
    """Dense A_ij = exp(-||c_i - c_j|| / (0.1 pi)^2) with zero diagonal (SPEC 1).

    The distance is the PLAIN Euclidean distance, not its square, exactly as in
    the reference code (`compute_adjacency_matrix_images`), even though the form
    looks like a Gaussian kernel.
    """
    from scipy.spatial.distance import cdist

    dist = cdist(coord, coord)
    a = np.exp(-dist / (SIGMA * np.pi) ** 2)
    np.fill_diagonal(a, 0.0)
    return a


def adjacency_batch(coord, mask):
    """`adjacency` of a padded batch of point graphs, on the batch's device (torch).

    coord (..., N, 2) float32 centroids, mask (..., N) bool -> A (..., N, N) float32, zero on
    the diagonal and padding. Computed in float64 and rounded once, as `adjacency` then its
    float32 storage did, so both give the same bits (`tests/test_data_storage.py`). No op
    here reads the host: it runs inside a captured CUDA graph.
    """
    import torch

    c = coord.to(torch.float64)
    dist = (c.unsqueeze(-2) - c.unsqueeze(-3)).pow(2).sum(-1).sqrt()  # (..., N, N)
    a = torch.exp(-dist / (SIGMA * np.pi) ** 2).to(torch.float32)
    n = mask.shape[-1]
    keep = mask.unsqueeze(-1) & mask.unsqueeze(-2) & ~torch.eye(n, dtype=torch.bool,
                                                                   device=mask.device)
    return a * keep.to(a.dtype)


def complete_edges(n: int) -> np.ndarray:
    """(2, n(n-1)) edge index of the complete graph on n nodes: every i != j, no self loops."""
    i, j = np.nonzero(~np.eye(n, dtype=bool))
    return np.stack([i, j]).astype(np.int64)
