"""COLORS: count the green nodes of random graphs (SPEC §1 "COLORS").

Follows Knyazev, Taylor & Amer (NeurIPS 2019, §4 and appendix) and the recipe of
the authors' `generate_data.py`: Erdős–Rényi G(n, m) graphs with
m = floor((u + 1) n), u ~ U(0, 1), capped at n(n - 1)/2; node colours one-hot over
`n_colors` channels with channel 1 = green; label = number of green nodes
(0..max_label, a float32 regression target); ground-truth attention 1/N_green on
green nodes (all zeros when there is none). Splits:

- ``train`` / ``val`` / ``test_orig``: one pool of graphs with n in
  [n_min, n_max], split by a random permutation (as the reference does);
- ``test_large``: n in [n_min_large, n_max_large];
- ``test_largec``: as ``test_large``, but every non-green node gets a random
  binary vector over all feature channels whose green channel is 0 (unseen colours).

Decisions where SPEC is silent (documented here, kept by the tests):

- Node counts are stratified: every n of a split's range gets ``N // sizes``
  graphs, the remainder goes to randomly chosen sizes (n is uniform).
- Labels are balanced per size by round-robin over shuffled cycles of the valid
  labels 0..min(max_label, n). A label whose unique graphs run out for a size
  (e.g. n = 4 with 4 greens has only 22 distinct graphs) is dropped for that size
  after `_RETRIES` duplicate draws in a row, and the other labels fill the quota.
- Uniqueness is over the whole dataset (all splits): two graphs are the same when
  n, the edge set (as labelled graphs, like the reference) and the features agree.
- Features are padded with zero channels to ``feature_dim``; it grows to
  ``n_colors + 1`` when smaller, so that TEST-LARGEC always has at least one
  channel unseen in training (default: 3 colours in 4 channels).
- Random streams: ``numpy.random.default_rng((seed, k))`` with k = 0 for the
  train/val/test_orig pool, 1 for test_large and 2 for test_largec.
"""

from __future__ import annotations

import numpy as np
from tqdm import tqdm

from ablate.data.graphs import GraphSet
from ablate.errors import ConfigError

GREEN = 1  # index of the green channel (SPEC §1)
_RETRIES = 50  # duplicate draws in a row before a (size, label) pair counts as exhausted


def generate(
    n_train: int = 500,
    n_val: int = 2500,
    n_test: int = 2500,
    n_min: int = 4,
    n_max: int = 25,
    n_min_large: int = 26,
    n_max_large: int = 200,
    n_colors: int = 3,
    max_label: int = 10,
    feature_dim: int = 4,
    seed: int = 111,
    progress: bool = False,
) -> dict[str, GraphSet]:
    """All COLORS splits: train, val, test_orig, test_large, test_largec (SPEC §1)."""
    if n_colors < 2:
        raise ConfigError(f"n_colors must be >= 2 (green and at least one other), got {n_colors}")
    if max_label < 0:
        raise ConfigError(f"max_label must be >= 0, got {max_label}")
    for lo, hi in ((n_min, n_max), (n_min_large, n_max_large)):
        if not 1 <= lo <= hi:
            raise ConfigError(f"invalid node range [{lo}, {hi}]")
    if min(n_train, n_val, n_test) < 0:
        raise ConfigError("split sizes must be >= 0")
    dim = effective_feature_dim(n_colors, feature_dim)
    seen: set[bytes] = set()
    bar = tqdm(total=n_train + n_val + 3 * n_test, desc="colors", disable=not progress,
               leave=False)
    try:
        make = dict(n_colors=n_colors, max_label=max_label, dim=dim, seen=seen, bar=bar)
        rng = np.random.default_rng((seed, 0))
        pool = _generate_split(rng, n_train + n_val + n_test, n_min, n_max, new_colors=False,
                               **make)
        order = rng.permutation(len(pool))
        cuts = np.cumsum([n_train, n_val])
        splits = {
            "train": pool.subset(order[: cuts[0]]),
            "val": pool.subset(order[cuts[0]: cuts[1]]),
            "test_orig": pool.subset(order[cuts[1]:]),
        }
        for k, (name, new_colors) in enumerate((("test_large", False), ("test_largec", True)), 1):
            rng = np.random.default_rng((seed, k))
            gs = _generate_split(rng, n_test, n_min_large, n_max_large, new_colors=new_colors,
                                 **make)
            splits[name] = gs.subset(rng.permutation(len(gs)))
    finally:
        bar.close()
    return splits


def effective_feature_dim(n_colors: int, feature_dim: int) -> int:
    """Feature channels actually used: max(feature_dim, n_colors + 1), room for LARGEC colours."""
    return max(int(feature_dim), int(n_colors) + 1)


def gnm_num_edges(n: int, u: float) -> int:
    """Edge count m = floor((u + 1) n), capped at n(n - 1)/2 (SPEC §1, G(n, m))."""
    return min(int(np.floor((u + 1.0) * n)), n * (n - 1) // 2)


def green_gt(x: np.ndarray) -> np.ndarray:
    """Ground truth 1/N_green on green nodes, 0 elsewhere, all 0 without green (SPEC §1)."""
    g = x[:, GREEN] > 0
    k = int(g.sum())
    return g.astype(np.float32) / k if k else np.zeros(len(x), np.float32)


def _size_counts(rng: np.random.Generator, total: int, lo: int, hi: int) -> np.ndarray:
    """Graphs per node count n in [lo, hi]: total // sizes each, remainder to random sizes."""
    sizes = hi - lo + 1
    counts = np.full(sizes, total // sizes, dtype=np.int64)
    counts[rng.choice(sizes, total % sizes, replace=False)] += 1
    return counts


def _generate_split(
    rng: np.random.Generator,
    total: int,
    lo: int,
    hi: int,
    *,
    n_colors: int,
    max_label: int,
    dim: int,
    new_colors: bool,
    seen: set[bytes],
    bar: tqdm,
) -> GraphSet:
    """`total` unique graphs, sizes stratified over [lo, hi], labels round-robin per size."""
    xs, edges, ys, gts = [], [], [], []
    for n, count in zip(range(lo, hi + 1), _size_counts(rng, total, lo, hi)):
        iu, ju = np.triu_indices(n, k=1)
        labels = list(range(min(max_label, n) + 1))
        made = 0
        while made < count:
            if not labels:
                raise ConfigError(f"cannot draw {count} unique COLORS graphs with n = {n}; "
                                  "lower the split sizes or widen the node range")
            cycle = rng.permutation(labels)
            for label in cycle:
                for _ in range(_RETRIES):
                    pairs, x = _draw_graph(rng, n, int(label), n_colors, dim, new_colors)
                    key = _graph_key(n, pairs, x)
                    if key not in seen:
                        break
                else:  # this (size, label) has run out of unique graphs
                    labels.remove(int(label))
                    continue
                seen.add(key)
                xs.append(x)
                edges.append(_both_directions(iu[pairs], ju[pairs], n))
                ys.append(float(label))
                gts.append(green_gt(x))
                made += 1
                bar.update(1)
                if made == count:
                    break
    if not xs:
        return _empty(dim, np.float32)
    return GraphSet.from_graphs(xs, edges, np.asarray(ys, np.float32), gts)


def _empty(dim: int, y_dtype) -> GraphSet:
    """A split with no graphs (a split size of 0)."""
    z = np.zeros(1, np.int64)
    return GraphSet(x=np.zeros((0, dim), np.float32), gt=np.zeros(0, np.float32), node_ptr=z,
                    edge_index=np.zeros((2, 0), np.int64), edge_ptr=z.copy(),
                    y=np.zeros(0, y_dtype))


def _draw_graph(
    rng: np.random.Generator, n: int, n_green: int, n_colors: int, dim: int, new_colors: bool
) -> tuple[np.ndarray, np.ndarray]:
    """One G(n, m) graph (sorted upper-triangle pair ids) with `n_green` green nodes (SPEC §1)."""
    m = gnm_num_edges(n, rng.random())
    pairs = np.sort(rng.choice(n * (n - 1) // 2, size=m, replace=False))
    green = np.zeros(n, dtype=bool)
    green[rng.choice(n, size=n_green, replace=False)] = True
    x = np.zeros((n, dim), dtype=np.float32)
    others = ~green
    if new_colors:  # unseen colours: random binary vectors, never green
        x[others] = rng.integers(0, 2, size=(n - n_green, dim))
        x[:, GREEN] = 0
    else:  # a random non-green colour among channels {0..n_colors-1} \ {GREEN}
        c = rng.integers(0, n_colors - 1, size=n - n_green)
        c += c >= GREEN
        x[np.flatnonzero(others), c] = 1
    x[green, GREEN] = 1
    return pairs, x


def _graph_key(n: int, pairs: np.ndarray, x: np.ndarray) -> bytes:
    """Canonical bytes of (n, sorted edge pair ids, binary features) for the uniqueness set."""
    return (n.to_bytes(4, "little") + pairs.astype(np.uint32).tobytes()
            + np.packbits(x > 0).tobytes())


def _both_directions(i: np.ndarray, j: np.ndarray, n: int) -> np.ndarray:
    """(2, 2m) edge index of undirected pairs (i, j), both directions, sorted row-major."""
    src = np.concatenate([i, j])
    dst = np.concatenate([j, i])
    order = np.argsort(src * n + dst, kind="stable")
    return np.stack([src[order], dst[order]]).astype(np.int64)
