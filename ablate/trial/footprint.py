"""Host memory one pack of graph trials needs, from its prepared dataset's sizes.

The runner declares it to Ray as the trial's ``memory`` resource, so Ray never starts more
trials on a node than its memory holds (`ablate.runner.execute.driver`). It adds up what a worker
holds at a trial's peak (`ablate.trial.batches`, `ablate.trial.evaluate`, `ablate.trial.weak`):

- the worker itself: a Ray Tune trial worker with torch, PyG and ablate imported, after its
  first training step (`WORKER_BYTES`);
- the prepared file, memory-mapped: every page of it may be read during a trial;
- what stays collated: the training split where it fits (`collated_entries`), else one batch;
  the validation batches kept for the curves; weak supervision's per-member targets;
- the largest of the phases that follow one another (`working_set`):
  - a training step on the largest training batch: the (B, N, N) tensors the layers keep for
    the backward pass (`train_units`, counted from the layers' forward passes: most for PyG's
    DenseGATConv, 11 for 3 layers measured), per member;
  - evaluating: the largest batch's (N, N) float32 tensors of its adjacency's size
    (`batch_bytes`: A and the stacked propagation operator while it is made, or the float64
    derivation of a point graph's adjacency), and the activations of the members evaluated
    together, over the batch with the most nodes (`eval_nodes`: on COLLAB a batch of a
    thousand small graphs outweighs the one holding the largest graph; `node_units` tensors a
    node of the input's width);
  - leave-one-out attention where a test split has ground truth: the batch's adjacency and
    operator, and one chunk of removal copies (`loo_bytes`, `ablate.trial.pack_loo`);
  - weak supervision's model B scoring the training split by leave-one-out: its evaluation
    batches and one chunk of removal copies (model B and its batches are gone afterwards);
- what the heap keeps of earlier phases (`HEAP_KEPT`), and `SLACK`.

Training batches are padded to their own largest graph, so a dense layer's (B, N, N) tensors
change size from step to step. Those under `ARENA_CHUNK` live in a thread's heaps, which keep
what a step frees (`tune_allocator`: nothing is trimmed while training), and a later step
whose tensors do not fit the pieces that earlier, differently sized steps left takes fresh
heap pages beside them: where `train_units` counts one set, the training phase counts
`HEAP_STEPS` more (`train_kept`). The peak follows the order in which sizes come and what the
heap held before, so it varies from run to run: COLLAB's dense_gat trained on every graph
(batches of 32 padded to up to 492 nodes, a set of `train_units` 355 MB) peaked at 1468 to
1896 MB (median 1588) in five runs of the same trial through the runner, declared 1280 MB (the
first) and 1792 MB (the other four) before this term (`benchmarks/bench_memory_dense.py`,
benchmarks/results/cpu-2026-12-02-memory-dense/).

A Tune trial runs in a thread (its function trainable's), whose glibc arena maps a tensor of
`ARENA_CHUNK` or more and unmaps it when it is freed: such tensors count while alive. Smaller
ones live in the arena's heaps, which keep freed pages (`ablate.trial.setup.tune_allocator`)
until `ablate.trial.batches.release_free_heap` gives back what it can.

Measured with Ray 2.60, torch 2.13, glibc 2.36 on a CPU, in Tune trial workers: 396 MB after
the imports, 494 MB after a first small trial (median of 3 workers,
`benchmarks/bench_worker_base.py`, benchmarks/results/cpu-2026-11-28-worker-base/); study=tu's
D&D-200 rows (one epoch) peaked at 1311 MB (global pool) and 1294 MB (weak supervision),
declared 1792 MB (benchmarks/results/cpu-2026-11-27-memory-real/bench_memory_after.log): the test split's
5,748-node graph as 6 tensors of 132 MB (ChebyNet, K = 3) while its operator is made, as
`operator_units` counts them. Before the lifetimes in `ablate.models.layers`,
`ablate.trial.evaluate` and `ablate.trial.weak` were fixed, 10 and 13 of them were alive
(the operator's temporaries, the previous batch's operator, the pooled graph's), and the
rows peaked at 2198 MB and 2825 MB, declared 2048 MB. `tests/test_footprint.py` checks the
counts and the estimate against the peak of trials with one large graph;
`tests/test_host_memory.py` checks that Ray runs no more trials than the declared memory
fits; `benchmarks/bench_memory.py` sets both beside real trials at full size.
"""

from __future__ import annotations

import math

import numpy as np

from ablate.config import TrialConfig
from ablate.models.backbones import is_dense
from ablate.trial.batches import EVAL_ENTRIES, size_groups  # EVAL_ENTRIES: an evaluation batch's
from ablate.trial.weak import CHUNK_ENTRIES as LOO_ENTRIES  # a leave-one-out chunk's entries
from ablate.trial.weak import LOO_MAX_NODES  # evaluation's leave-one-out skips larger graphs

WORKER_BYTES = 576 << 20  # a trial worker before its data (494 MB measured, see above)
F32 = 4
POINT_UNITS = 8  # point graphs' adjacency made in float64: (N, N, 2) differences and squares
PAD = 1.25  # padded (N, N) entries of size-sorted evaluation batches over the sum of N^2
ARENA_CHUNK = 64 << 20  # a thread's arena maps tensors from this size on (glibc's heap size)
HEAP_KEPT = 64 << 20  # what release_free_heap cannot give back: the top of a thread's heap
HEAP_STEPS = 2  # freed sets of a dense training step's (B, N, N) tensors the heaps keep
SLACK = 1.25  # allocator fragmentation and what this sum leaves out


def operator_units(K: int) -> int:
    """(B, N, N) float32 tensors alive at once while a batch's propagation operator is made,
    its adjacency A included (`ablate.models.layers.stacked_operator`): A and the operator made
    in place for K = 1; A, the K - 1 Chebyshev terms of orders >= 1 and the stacked operator
    (K blocks) for K > 1. Pooling releases its input graph's operator (`Graph.with_mask`):
    a pooled model needs no more."""
    return 2 if K == 1 else 2 * K


# (B, N, N) float32 tensors alive at once while a dense layer runs in evaluation, A included
# (`ablate.models.backbones`): A, the induced adjacency (`Graph.adjacency`), and the layer's own:
# DenseGCNConv's adjacency with self-loops and its normalised copy, DenseGATConv's attention
# scores through leaky ReLU, mask and softmax; the others read the adjacency only. Counted from
# their code, checked against the tensors alive (`tests/test_dense_layers.py`).
DENSE_UNITS = {"dense_gcn": 6, "dense_gat": 6, "dense_gin": 3, "dense_graph": 3, "dense_sage": 3}
USER_LAYER_UNITS = 6  # a user's layer: not known here; counted as the most of PyG's five
GAT_HEADS = 1  # `backbones.build_conv` builds DenseGATConv(in, out): one attention head


def train_units(cfg: TrialConfig) -> int:
    """(B, N, N) float32 tensors of a training batch's size alive at once through a training
    step, forward and backward, its adjacency A included. The paper's family: the operator
    (`operator_units`; made once, kept for the backward pass). DenseGATConv keeps for its
    backward, per layer, the scores before leaky ReLU and the softmax's output ((B, N, N, H)
    each) and the adjacency's `== 0` mask (bool: a quarter, a half counted); DenseGCNConv its
    normalised adjacency (and a quarter); then 3 more while the last layer's backward runs
    (the adjacency with self-loops, the gradients through its (N, N) steps) and A. The
    others keep none of their own (`DENSE_UNITS`). A user's layer: as DenseGATConv.
    Measured (`tests/test_footprint.py`): 11.1 (GAT), 7.2 (GCN) of 3 layers; 5.4 + 2.4 a layer."""
    K = cfg.K or 1
    if not is_dense(cfg.backbone):
        return operator_units(K)
    layers = len(cfg.filters)
    if cfg.backbone == "dense_gcn":
        return 4 + math.ceil(layers * 5 / 4)
    if cfg.backbone == "dense_gat" or cfg.backbone not in DENSE_UNITS:
        return 4 + math.ceil(layers * (2 * GAT_HEADS + 0.5))
    return DENSE_UNITS[cfg.backbone]


def train_kept(cfg: TrialConfig, entries: int, train: dict | None = None) -> int:
    """Sets of a training step's (B, N, N) tensors (`train_units`, `entries` each) the heaps
    keep beside the step's own: for PyG's dense layers whose tensors a heap holds (under
    `ARENA_CHUNK`), up to `HEAP_STEPS`, one fewer than the training split's distinct graph
    sizes whose padded steps weigh at least half the largest's (steps of one size reuse the
    pieces the last one freed; steps of other sizes take fresh pages beside them); `HEAP_STEPS`
    where the split's `sizes` are unknown. None for the paper's family (its steps on D&D:
    covered, see above)."""
    if not is_dense(cfg.backbone) or F32 * entries >= ARENA_CHUNK:
        return 0
    if not train or "sizes" not in train:
        return HEAP_STEPS
    n = np.asarray(train["sizes"], np.int64).reshape(-1, 2)[:, 0]
    big = int(np.count_nonzero(2 * n * n >= int(n.max(initial=0)) ** 2))
    return min(HEAP_STEPS, max(big - 1, 0))


def node_units(cfg: TrialConfig) -> int:
    """Per node, tensors of the widest layer's width alive at once (the batch's features apart):
    2K + 2 for the paper's family and a user's layer; DenseGINConv's MLP input: A X, (1 + eps) X
    and their sum, at the input's width; PyG's others project first (1.3 measured: 2)."""
    if cfg.backbone == "dense_gin":
        return 3
    if cfg.backbone in DENSE_UNITS:
        return 2
    return 2 * (cfg.K or 1) + 2


def eval_nodes(split: dict, batch: int, entries: int = EVAL_ENTRIES) -> int:
    """Padded nodes of the split's evaluation batch that holds the most: its graphs sorted by
    size and cut as `batches.size_groups` cuts them (`batch` graphs, `entries` padded
    adjacency entries), from the split's `sizes`; small graphs fill a batch (COLLAB's test
    split: 1,081 graphs of up to 43 nodes, 46,483, where `entries // max_nodes` says 4,065).
    A footprint without sizes: that of the largest graph's batch."""
    if "sizes" not in split:
        return entries // max(split["max_nodes"], 1)
    sizes = np.repeat(*np.asarray(split["sizes"], np.int64).reshape(-1, 2).T)
    return max([len(g) * int(sizes[g[-1]]) for g in size_groups(sizes, batch, entries)] or [0])


def dense_units(cfg: TrialConfig) -> int | None:
    """(B, N, N) tensors of a batch's size alive at once in a dense layer of `cfg`'s backbone
    (`DENSE_UNITS`); None for the paper's family (`operator_units` counts it)."""
    if not is_dense(cfg.backbone):
        return None
    return DENSE_UNITS.get(cfg.backbone, USER_LAYER_UNITS)


def batch_bytes(entries: int, K: int, points: bool, units: int | None = None) -> int:
    """Bytes of (B, N, N) tensors resident at an evaluation batch's peak (`entries`: its
    adjacency's): `operator_units`, and for K > 1 L and T_0, freed just before the operator is
    made, whose pages a heap keeps when they are under `ARENA_CHUNK`; or, before the operator,
    the float64 derivation of a point graph's adjacency (`ablate.data.kernel.adjacency_batch`).
    `units`: a dense layer's (`dense_units`) instead of the family's operator."""
    unit = F32 * entries
    if units is not None:
        return max(units * unit, POINT_UNITS * unit if points else 0)
    freed = 2 * unit if K > 1 and unit < ARENA_CHUNK else 0
    return max(operator_units(K) * unit + freed, POINT_UNITS * unit if points else 0)


def loo_bytes(n: int, K: int, width: int, graphs: int, units: int | None = None) -> int:
    """Bytes of one leave-one-out chunk of a split's (`graphs`) graphs of `n` nodes: the
    copies' adjacency and operator (`batch_bytes` of their N^3 entries) and their activations
    (2K + 2 per node and channel). Graphs per chunk as `ablate.trial.weak.copies_entries`
    and `pack_loo` count them: their N^3 (K + 1) + N^2 width entries fill `LOO_ENTRIES`."""
    per_graph = max(1, min(graphs, LOO_ENTRIES // max(1, n ** 3 * (K + 1) + n * n * width)))
    return (batch_bytes(per_graph * n ** 3, K, False, units)
            + F32 * (2 * K + 2) * per_graph * n * n * width)


def pack_bytes(cfgs: list[TrialConfig], data: dict, precollate_entries: int,
               keep_entries: int) -> int:
    """Bytes of host memory a worker needs to run `cfgs` (one pack, one dataset recipe) on a
    CPU, from the recipe's `ablate.data.cache.footprint` `data`; `precollate_entries` and
    `keep_entries`: how many entries `TrainBatches` and `eval_batches` keep collated."""
    return int(WORKER_BYTES + data["bytes"]
               + SLACK * working_set(cfgs, data, precollate_entries, keep_entries))


def working_set(cfgs: list[TrialConfig], data: dict, precollate_entries: int,
                keep_entries: int) -> int:
    """Bytes the pack's trials add to their worker at their peak (`pack_bytes` less the worker
    and the prepared file, before `SLACK`)."""
    cfg = cfgs[0]
    K = cfg.K or 1
    members = sum(len(c.seeds) for c in cfgs)
    splits = data["splits"]
    train = splits["train"]
    width = max([s["channels"] for s in splits.values()] + list(cfg.filters) + [cfg.hidden or 0])
    kept = _kept(train, precollate_entries, cfg.batch_size)
    if "val" in splits:
        kept += _eval_kept(splits["val"], keep_entries)
    if cfg.supervision == "weak":  # per-member targets of the training nodes
        kept += F32 * members * train["nodes"]
    biggest = max(s["max_nodes"] for s in splits.values())
    entries = max(EVAL_ENTRIES, biggest * biggest)  # the largest evaluation batch's adjacency
    # nodes of the evaluation batch with the most (small graphs), or of the largest graph's
    nodes = max([entries // max(biggest, 1)] + [eval_nodes(s, cfg.test_batch_size)
                                                 for k, s in splits.items() if k != "train"])
    channels = max(s["channels"] for s in splits.values())
    points = any(s["points"] for s in splits.values())
    # a test split small enough is kept collated while it is evaluated (`EvalBatches`)
    evaluated = max([_eval_kept(s, keep_entries) for k, s in splits.items()
                     if k not in ("train", "val")] or [0])
    units = dense_units(cfg)
    phases = [evaluated + batch_bytes(entries, K, points, units) + F32 * nodes * channels
              + F32 * nodes * width * node_units(cfg) * min(members, 8)]
    # a training step: the batch's copy, its (B, N, N) tensors and activations kept for backward
    b, n = min(cfg.batch_size, train["graphs"]), train["max_nodes"]
    step = F32 * b * n * n * train_units(cfg) * min(members, 8)
    phases.append(F32 * b * n * (n + channels) + step + step * train_kept(cfg, b * n * n, train)
                  + F32 * b * n * width * node_units(cfg) * min(members, 8))
    tests = [s for k, s in splits.items() if k not in ("train", "val") and s.get("gt", True)]
    if not cfg.pool_layers and cfg.loo_auc and tests:  # the batch's A and operator stay
        n = min(LOO_MAX_NODES, max(s["max_nodes"] for s in tests))
        g = max(s["graphs"] for s in tests)
        phases.append(evaluated + F32 * (K + 1) * EVAL_ENTRIES
                      + max(loo_bytes(m, K, width, g, units) for m in range(1, n + 1)))
    if cfg.supervision == "weak":  # model B: the training split by leave-one-out
        phases.append(_eval_kept(train, keep_entries) + max(
            loo_bytes(m, K, width, train["graphs"], units)
            for m in range(1, train["max_nodes"] + 1)))
    return int(kept + max(phases) + HEAP_KEPT)


def _kept(split: dict, limit: int, batch: int) -> int:
    """Bytes of a split kept collated (`collated_entries`), or of one batch of it when the
    split is larger than `limit` entries (`batch` graphs; 0: none kept)."""
    n, c = split["max_nodes"], split["channels"]
    per_graph = n * (c + 4) if split["points"] else n * (n + c + 2)
    if split["graphs"] * per_graph <= limit:
        return F32 * split["graphs"] * per_graph
    return F32 * batch * per_graph


def _eval_kept(split: dict, limit: int) -> int:
    """Bytes of a split's evaluation batches kept collated (`batches.EvalBatches`): point
    graphs' features and centroids; edge graphs' adjacency and features where their padded
    adjacency fits `limit` entries (else each batch is made when read: the phases count it)."""
    nodes = PAD * split["nodes"]
    if split["points"]:
        return int(F32 * nodes * (split["channels"] + 4))
    if PAD * split["sum_n2"] > limit:
        return 0
    return int(F32 * (PAD * split["sum_n2"] + nodes * (split["channels"] + 2)))
