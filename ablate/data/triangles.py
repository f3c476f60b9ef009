"""TRIANGLES: count the triangles of random graphs (SPEC §1 "TRIANGLES").

Follows Knyazev, Taylor & Amer (NeurIPS 2019, §4 and appendix) and the recipe of
the authors' `generate_data.py`: Erdős–Rényi G(n, m) graphs with
m = floor((u + 1) n), u ~ U(0, 1), capped at n(n - 1)/2; label = trace(A^3)/6,
the number of triangles, kept only in 1..n_classes with equal counts per class
(rejection sampling with per-class quotas); node features one-hot degree
(max_degree + 1 channels); ground-truth attention T_i / sum_j T_j with
T_i = (A^3)_ii / 2 the triangles through node i. Splits:

- ``train`` / ``val`` / ``test_orig``: one class-balanced pool with n in
  [n_min, n_max], divided per class by a random permutation (as the reference);
- ``test_large``: class balanced, n in [n_min_large, n_max_large].

Candidates are drawn in fixed-size chunks of dense NumPy adjacency arrays (grouped
by n, batched matmul for the A^3 diagonal) and accepted in draw order, so the
output depends only on the parameters. Decisions where SPEC is silent:

- ``y`` is the int64 class label, i.e. the triangle count itself (1..n_classes).
- Graphs whose maximum degree exceeds ``max_degree`` are rejected (the reference
  measured 13 over its splits; rejecting keeps the one-hot degree width fixed).
- A split of N graphs gets N // n_classes per class, the first N % n_classes
  classes one more.
- Uniqueness is over the whole dataset (all splits), as labelled graphs
  (same n and adjacency matrix), like the reference.
- Random streams: ``numpy.random.default_rng((seed, k))`` with k = 0 for the
  train/val/test_orig pool and 1 for test_large.
"""

from __future__ import annotations

import numpy as np
from tqdm import tqdm

from ablate.data.colors import gnm_num_edges
from ablate.data.graphs import GraphSet
from ablate.errors import ConfigError

_CHUNK = 4096  # candidates drawn per chunk (fixed: it shapes the random stream)
_MAX_FRUITLESS_CHUNKS = 200  # chunks in a row with no accepted graph before giving up


def generate(
    n_train: int = 30000,
    n_val: int = 5000,
    n_test: int = 5000,
    n_min: int = 4,
    n_max: int = 25,
    n_min_large: int = 26,
    n_max_large: int = 100,
    n_classes: int = 10,
    max_degree: int = 13,
    seed: int = 111,
    progress: bool = False,
) -> dict[str, GraphSet]:
    """All TRIANGLES splits: train, val, test_orig, test_large (SPEC §1)."""
    if n_classes < 1:
        raise ConfigError(f"n_classes must be >= 1, got {n_classes}")
    if max_degree < 2:
        raise ConfigError(f"max_degree must be >= 2 for any triangle, got {max_degree}")
    for lo, hi in ((n_min, n_max), (n_min_large, n_max_large)):
        if not 3 <= lo <= hi:
            raise ConfigError(f"invalid node range [{lo}, {hi}] (a triangle needs n >= 3)")
    if min(n_train, n_val, n_test) < 0:
        raise ConfigError("split sizes must be >= 0")
    seen: set[bytes] = set()
    bar = tqdm(total=n_train + n_val + 2 * n_test, desc="triangles", disable=not progress,
               leave=False)
    try:
        rng = np.random.default_rng((seed, 0))
        parts = [class_quotas(n, n_classes) for n in (n_train, n_val, n_test)]
        pool = _generate_split(rng, sum(parts), n_min, n_max, max_degree, seen, bar)
        # divide every class of the pool between the splits by a random permutation
        chosen: list[list[np.ndarray]] = [[], [], []]
        for c in range(n_classes):
            idx = rng.permutation(np.flatnonzero(pool.y == c + 1))
            cuts = np.cumsum([p[c] for p in parts])
            for s, block in enumerate(np.split(idx, cuts[:-1])):
                chosen[s].append(block)
        splits = {}
        for name, blocks in zip(("train", "val", "test_orig"), chosen):
            idx = np.concatenate(blocks)
            splits[name] = pool.subset(rng.permutation(idx))
        rng = np.random.default_rng((seed, 1))
        large = _generate_split(rng, class_quotas(n_test, n_classes), n_min_large, n_max_large,
                                max_degree, seen, bar)
        splits["test_large"] = large.subset(rng.permutation(len(large)))
    finally:
        bar.close()
    return splits


def class_quotas(total: int, n_classes: int) -> np.ndarray:
    """Graphs per class 1..n_classes: total // n_classes each, the first remainder ones +1."""
    q = np.full(n_classes, total // n_classes, dtype=np.int64)
    q[: total % n_classes] += 1
    return q


def triangle_stats(adj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-node triangles T_i = (A^3)_ii / 2 and count trace(A^3)/6 of (B, n, n) 0/1 arrays."""
    a = np.asarray(adj, dtype=np.float32)
    closed = np.einsum("bij,bij->bi", a @ a, a)  # (A^3)_ii = sum_j (A^2)_ij A_ji, A symmetric
    per_node = np.rint(closed / 2).astype(np.int64)
    return per_node, per_node.sum(axis=1) // 3


def _draw_adjacency(rng: np.random.Generator, n: int, count: int) -> np.ndarray:
    """(count, n, n) float32 adjacency of G(n, m) graphs, m = floor((u + 1) n) (SPEC §1)."""
    n_pairs = n * (n - 1) // 2
    m = np.array([gnm_num_edges(n, u) for u in rng.random(count)], dtype=np.int64)
    perm = rng.permuted(np.tile(np.arange(n_pairs, dtype=np.int64), (count, 1)), axis=1)
    take = np.arange(n_pairs) < m[:, None]  # first m pair ids of a random permutation
    g = np.repeat(np.arange(count), m)
    iu, ju = np.triu_indices(n, k=1)
    p = perm[take]
    adj = np.zeros((count, n, n), dtype=np.float32)
    adj[g, iu[p], ju[p]] = 1
    adj[g, ju[p], iu[p]] = 1
    return adj


def _generate_split(
    rng: np.random.Generator,
    quotas: np.ndarray,
    lo: int,
    hi: int,
    max_degree: int,
    seen: set[bytes],
    bar: tqdm,
) -> GraphSet:
    """Unique graphs with n uniform in [lo, hi] until every class c + 1 has quotas[c] of them."""
    quotas = np.asarray(quotas, dtype=np.int64)
    n_classes = len(quotas)
    have = np.zeros(n_classes, dtype=np.int64)
    xs, edges, ys, gts = [], [], [], []
    fruitless = 0
    while (have < quotas).any():
        sizes = rng.integers(lo, hi + 1, size=_CHUNK)
        accepted = 0
        # label every candidate of the chunk, one batched computation per node count
        results: dict[int, tuple] = {}
        for n in np.unique(sizes):
            where = np.flatnonzero(sizes == n)
            adj = _draw_adjacency(rng, int(n), len(where))
            per_node, tri = triangle_stats(adj)
            deg = adj.sum(axis=2).astype(np.int64)
            open_class = np.zeros(n_classes + 2, dtype=bool)
            open_class[1: n_classes + 1] = have < quotas
            ok = open_class[np.clip(tri, 0, n_classes + 1)] & (deg.max(axis=1) <= max_degree)
            iu, ju = np.triu_indices(int(n), k=1)
            bits = np.packbits(adj[:, iu, ju] > 0, axis=1)
            prefix = int(n).to_bytes(4, "little")
            for k in np.flatnonzero(ok):
                results[int(where[k])] = (prefix + bits[k].tobytes(), adj[k], per_node[k],
                                          int(tri[k]), deg[k])
        for i in sorted(results):  # accept in draw order, so n stays uniform within classes
            key, adj, per_node, label, deg = results[i]
            if have[label - 1] >= quotas[label - 1]:
                continue
            n = len(adj)
            if key in seen:
                continue
            seen.add(key)
            x = np.zeros((n, max_degree + 1), dtype=np.float32)
            x[np.arange(n), deg] = 1  # one-hot node degree
            xs.append(x)
            edges.append(np.stack(np.nonzero(adj)).astype(np.int64))
            ys.append(label)
            gts.append(per_node / per_node.sum())
            have[label - 1] += 1
            accepted += 1
            bar.update(1)
        fruitless = 0 if accepted else fruitless + 1
        if fruitless >= _MAX_FRUITLESS_CHUNKS:
            missing = [c + 1 for c in range(n_classes) if have[c] < quotas[c]]
            raise ConfigError(f"cannot fill TRIANGLES classes {missing} with n in [{lo}, {hi}] "
                              f"and max degree {max_degree}; lower the split sizes")
    if not xs:
        z = np.zeros(1, np.int64)
        return GraphSet(x=np.zeros((0, max_degree + 1), np.float32), gt=np.zeros(0, np.float32),
                        node_ptr=z, edge_index=np.zeros((2, 0), np.int64), edge_ptr=z.copy(),
                        y=np.zeros(0, np.int64))
    return GraphSet.from_graphs(xs, edges, np.asarray(ys, np.int64), gts)
