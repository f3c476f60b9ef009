"""SLIC as a given scikit-image release ran it, rebuilt on the installed package's kernels.

The authors' MNIST-75SP superpixels (bknyaz/graph_attention_pool, `extract_superpixels.py`)
were made with scikit-image 0.15. Its Python wrapper around the SLIC kernels has changed
since, in three ways that matter for 28x28 digits (scikit-image's history; docs/recipes.md):

- segment sizes of the connectivity step: area / the number of segments ASKED for up to
  0.16, area / the number of grid seeds actually PLACED from 0.17 on (PR #3850); the
  minimum and maximum sizes are 0.5 and 3 times that;
- from 0.19 the image is min-max rescaled to [0, 1] before clustering (PR #5518);
- from 0.19 a float32 image is clustered in float32; 0.15 computed in double.

The clustering kernel (`_slic_cython`) and the connectivity kernel
(`_enforce_label_connectivity_cython`) are the same code in every release since (0.15's
with labels from 0: `start_label=0`); both take the seeds, the step and the sizes as
arguments, so each release's rules are rebuilt here on the installed kernels and no old
release is pinned. `SLIC_RULES`: "v0.15" (the authors', the recipe default) and "v0.19"
(what `skimage.segmentation.slic` does today for a float64 grayscale image, and what this
project used before issue 26). The image is always clustered in double.

`segments(img, n, rule)` is one SLIC call; `superpixel_labels(img, ...)` is the authors'
request loop (ask for 95 segments, one fewer until at most 75 come back), which clusters
each distinct seed grid once: the clustering depends on `n` only through its grid, the
connectivity step (cheap) on `n` itself under 0.15's rule.
"""

from __future__ import annotations

import numpy as np

from ablate.errors import choice_error

SLIC_RULES = ("v0.15", "v0.19")  # the authors' scikit-image; today's wrapper (0.19 and later)
COMPACTNESS = 0.25  # the authors' value for MNIST
MAX_ITER = 10  # k-means iterations (scikit-image's default in every release)
MIN_SIZE_FACTOR, MAX_SIZE_FACTOR = 0.5, 3.0  # connectivity: segment size bounds


def check_rule(rule: str) -> None:
    """`ConfigError` naming the valid rules unless `rule` is one of `SLIC_RULES`."""
    if rule not in SLIC_RULES:
        raise choice_error("slic", rule, SLIC_RULES)


def _prepared(img: np.ndarray, rule: str, compactness: float) -> np.ndarray:
    """(1, H, W, 1) double image scaled by 1 / compactness, as the kernels take it; min-max
    rescaled first under the 0.19 rule (in the order of operations scikit-image uses)."""
    image = np.array(img, dtype=np.float64)
    if rule == "v0.19":
        imin, imax = image.min(), image.max()
        image -= imin
        if imax != imin:
            image /= imax - imin
    return np.ascontiguousarray(image[np.newaxis, :, :, np.newaxis] * (1.0 / compactness))


def _grid(shape: tuple[int, int, int], n: int) -> tuple[slice, ...]:
    """The seed grid scikit-image places for `n` segments (one slice per axis)."""
    from skimage.util import regular_grid

    return tuple(regular_grid(shape, n))


def _cluster(image: np.ndarray, grid: tuple[slice, ...]) -> np.ndarray:
    """SLIC's k-means from the seeds of `grid`: (1, H, W) labels 0..k-1 (not yet connected)."""
    from ablate.compat import slic_kernels

    _slic_cython, _ = slic_kernels()
    zyx = np.mgrid[: image.shape[0], : image.shape[1], : image.shape[2]]
    seeds = np.stack([g[grid].ravel() for g in zyx], axis=1)
    segments = np.zeros((len(seeds), 3 + image.shape[3]), np.float64)  # [z, y, x, colour]
    segments[:, :3] = seeds
    step = float(max(int(s.step) if s.step is not None else 1 for s in grid))
    return _slic_cython(image, None, segments, step, MAX_ITER, np.ones(3, np.float64), False,
                        start_label=0, ignore_color=False)


def _placed(grid: tuple[slice, ...], shape: tuple[int, int, int]) -> int:
    """How many seeds `grid` places in an image of `shape`."""
    return int(np.prod([len(range(*s.indices(d))) for s, d in zip(grid, shape)]))


def _sizes(area: int, asked: int, placed: int, rule: str) -> tuple[int, int]:
    """Connectivity's (min, max) segment size: from the segments asked for (0.15) or the
    seeds placed (0.19)."""
    size = area / (asked if rule == "v0.15" else placed)
    return int(MIN_SIZE_FACTOR * size), int(MAX_SIZE_FACTOR * size)


def _connected(labels: np.ndarray, min_size: int, max_size: int) -> np.ndarray:
    from ablate.compat import slic_kernels

    _, _enforce_label_connectivity_cython = slic_kernels()
    return _enforce_label_connectivity_cython(labels, min_size, max_size, start_label=0)


def segments(img: np.ndarray, n: int, rule: str = "v0.15",
             compactness: float = COMPACTNESS) -> np.ndarray:
    """(H, W) labels 0..k-1 of one SLIC call asking for `n` segments under `rule`."""
    check_rule(rule)
    image = _prepared(img, rule, compactness)
    shape = image.shape[:3]
    grid = _grid(shape, n)
    labels = _cluster(image, grid)
    return _connected(labels, *_sizes(int(np.prod(shape)), n, _placed(grid, shape), rule))[0]


def superpixel_labels(img: np.ndarray, start: int = 95, at_most: int = 75,
                      rule: str = "v0.15", compactness: float = COMPACTNESS) -> np.ndarray:
    """(H, W) labels 0..k-1 of the authors' loop: ask SLIC for `start` segments, then one fewer
    each time, until at most `at_most` come back (SPEC 1).

    The same result as calling `segments` for n = start, start - 1, ...: each distinct seed
    grid is clustered once, and a (grid, sizes) pair already tried is skipped.
    """
    check_rule(rule)
    image = _prepared(img, rule, compactness)
    shape = image.shape[:3]
    area = int(np.prod(shape))
    clustered: dict[tuple, tuple[np.ndarray, int]] = {}
    tried: set[tuple] = set()
    labels = None
    for n in range(start, 0, -1):
        grid = _grid(shape, n)
        key = tuple((s.start, s.step) for s in grid)
        if key not in clustered:
            clustered[key] = (_cluster(image, grid), _placed(grid, shape))
        raw, placed = clustered[key]
        sizes = _sizes(area, n, placed, rule)
        if (key, sizes) in tried:
            continue
        tried.add((key, sizes))
        labels = _connected(raw, *sizes)
        if len(np.unique(labels)) <= at_most:
            return labels[0]
    assert labels is not None
    return labels[0]  # unreachable for images of >= 1 pixel: one seed gives one segment
