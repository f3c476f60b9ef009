"""SLIC superpixel graphs of 28x28 grayscale images (MNIST-75SP, SPEC section 1).

Follows SPEC "MNIST-75SP" and the authors' `extract_superpixels.py` /
`MNIST75sp` code: each image in [0, 1] becomes <= 75 SLIC superpixels
(compactness 0.25, `n_segments` starting at 95 and lowered by one until at most
75 segments come back), with SLIC as scikit-image 0.15 ran it for the authors (the
recipe's `slic` rule, `ablate.data.slic`; "v0.19" is today's wrapper); every superpixel
is a node with its mean intensity and its centre of mass (row, col) / 28; the graph is
complete with weights A_ij = exp(-||c_i - c_j|| / (0.1 pi)^2) (zero diagonal;
`ablate.data.kernel`, derived from the centroids where batches are made, never stored);
the ground-truth
attention is proportional to the mean intensity of superpixels with intensity
>= 0.5, zero elsewhere, normalised to sum 1 (`gt="intensity"`, SPEC 1). The
reference's MNIST-75SP script runs its ChebyGIN (K > 1) ground-truth oracle with
another ground truth, uniform over every superpixel with mean intensity > 0
(`gt="any"`, the authors' `gt_attn_threshold = 0`); see docs/recipes.md.

`images_to_superpixels` converts many images on 2 worker processes (which leave
Ctrl-C and SIGTERM to the driver, end quietly with the pool and die with the driver);
`superpixel_graphs` turns the (intensity, centre) pairs into explicit edges, edge
weights and ground truth (the form the cache stored before it kept centroids only).
Feature assembly and standardisation live in `ablate.data.mnist`.
"""

from __future__ import annotations

import sys

import numpy as np

from ablate.data import slic
from ablate.data.graphs import normalize_gt
from ablate.data.kernel import adjacency, complete_edges
from ablate.data.pool import map_chunks

N_SEGMENTS_START = 95  # first n_segments asked of SLIC
MAX_SUPERPIXELS = 75  # lower n_segments until at most this many segments come back
SLIC_DEFAULT = "v0.15"  # the authors' scikit-image (their published data and checkpoints)
GT_THRESHOLD = 0.5  # superpixels at least this bright carry ground-truth attention
GT_VARIANTS = ("intensity", "any")  # SPEC default; the reference's oracle for K > 1 (I > 0)


def slic_segments(img: np.ndarray, rule: str = SLIC_DEFAULT) -> np.ndarray:
    """(H, W) SLIC labels 0..k-1 of a grayscale image with <= MAX_SUPERPIXELS segments (SPEC 1):
    the reference loop `n = 95; while count > 75: n -= 1` under the SLIC `rule`
    (`ablate.data.slic.SLIC_RULES`)."""
    return slic.superpixel_labels(img, N_SEGMENTS_START, MAX_SUPERPIXELS, rule)


def image_superpixels(img: np.ndarray,
                       rule: str = SLIC_DEFAULT) -> tuple[np.ndarray, np.ndarray]:
    """Mean intensity (N,) and centre of mass (N, 2) = (row, col) / 28 of each superpixel, in
    SLIC label order."""
    img = np.asarray(img, dtype=np.float64)
    labels = slic_segments(img, rule)
    _, inv = np.unique(labels.ravel(), return_inverse=True)
    n = int(inv.max()) + 1
    count = np.bincount(inv, minlength=n)
    rows, cols = np.indices(img.shape)
    intensity = np.bincount(inv, weights=img.ravel(), minlength=n) / count
    # centre of mass normalised by the image size (28 for MNIST), as in the reference
    r = np.bincount(inv, weights=rows.ravel(), minlength=n) / count / img.shape[0]
    c = np.bincount(inv, weights=cols.ravel(), minlength=n) / count / img.shape[1]
    return intensity.astype(np.float32), np.stack([r, c], axis=1).astype(np.float32)


def gt_attention(intensity: np.ndarray, gt: str = "intensity") -> np.ndarray:
    """Ground-truth attention of one image's superpixels, normalised to sum 1 (SPEC 1).

    gt="intensity": alpha_i ~ I_i on superpixels with I_i >= 0.5, else 0 (SPEC default).
    gt="any": alpha_i ~ [I_i > 0], uniform over every non-black superpixel (the reference
    script's ground-truth oracle for ChebyGIN, K > 1).
    """
    intensity = np.asarray(intensity, dtype=np.float32)
    if gt == "any":
        return normalize_gt((intensity > 0).astype(np.float32))
    if gt != "intensity":
        raise ValueError(f"unknown ground truth {gt!r}; valid choices: {', '.join(GT_VARIANTS)}")
    return normalize_gt(np.where(intensity >= GT_THRESHOLD, intensity, 0.0))


def superpixel_graphs(
    superpixels: list[tuple[np.ndarray, np.ndarray]],
    gt: str = "intensity",
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Complete-graph edges, edge weights A_ij and ground truth (`gt_attention`) of every graph."""
    edges, weights, gts = [], [], []
    for intensity, coord in superpixels:
        e = complete_edges(len(intensity))
        edges.append(e)
        weights.append(adjacency(coord)[e[0], e[1]].astype(np.float32))
        gts.append(gt_attention(intensity, gt))
    return edges, weights, gts


def _chunk_superpixels(task: tuple[np.ndarray, str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Worker task: superpixels of a chunk of images under a SLIC rule."""
    images, rule = task
    return [image_superpixels(img, rule) for img in images]


def _bar(**kwargs: object):
    """A tqdm bar that starts no monitor thread (tqdm starts one even for a disabled bar): with
    it alive the pool would never fork (`ablate.data.pool.start_method`). Only this bar's
    class goes without; the caller's own tqdm bars keep theirs."""
    from tqdm.auto import tqdm

    class Bar(tqdm):
        monitor_interval = 0

    return Bar(**kwargs)


def images_to_superpixels(
    images: np.ndarray,
    progress: bool = False,
    workers: int = 2,
    chunksize: int = 200,
    desc: str = "superpixels",
    rule: str = SLIC_DEFAULT,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(intensity, centre) of every image of an (n, H, W) array in [0, 1], in order, with SLIC
    under `rule`.

    Chunks of `chunksize` images go to a pool of `workers` processes (serial
    when `workers <= 1`, when there is at most one chunk, or inside a daemonic
    process that may not fork). A tqdm bar goes to stderr when `progress`.
    """
    slic.check_rule(rule)
    images = np.asarray(images)
    chunks = [(images[i:i + chunksize], rule) for i in range(0, len(images), chunksize)]
    bar = _bar(total=len(images), desc=desc, file=sys.stderr, disable=not progress, unit="img")
    out: list[tuple[np.ndarray, np.ndarray]] = []
    try:
        for res in map_chunks(_chunk_superpixels, chunks, workers):
            out.extend(res)
            bar.update(len(res))
    finally:
        bar.close()
    return out
