"""The host memory a graph trial declares to Ray (`ablate.trial.footprint`) against its real use.

The (N, N) tensors alive at once, counted exactly under a dispatch mode: while an operator
is made (`footprint.operator_units`), and over the evaluation of a pooled model. Then whole
trials, each in a fresh process and in a thread, as Ray Tune's function trainable runs them:
one epoch on small training graphs, then a test split whose largest graph (ChebyNet, K = 3)
makes the peak. A small trial runs first, as in a worker that has trained once (here its
first optimiser step alone maps ~70 MB of torch's code, which `WORKER_BYTES` holds), and what
the trial adds to its process is set beside `footprint.working_set`. Memory only, not time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ablate.config import TrialConfig, resolve
from ablate.data.cache import size_counts
from ablate.data.graphs import GraphSet
from ablate.models.layers import Graph
from ablate.trial import footprint
from ablate.trial.batches import eval_batches, precollate_limit
from ablate.trial.evaluate import evaluate
from ablate.trial.graph import run_seed
from ablate.trial.provenance import peak_rss_mb, reset_peak_rss
from ablate.trial.setup import prepare_process, seeded_model

ROOT = Path(__file__).resolve().parent.parent
BIG = 3000  # nodes of the test split's largest graph: its (N, N) float32 tensors are 36 MB each
NEXT = 2700  # the next one: the split is too large to keep collated, as D&D's test split
TRAIN_BIG = 1000  # DenseGATConv trained on a batch of 4 padded to it: (B, N, N) tensors of 16 MB
ROWS = {  # study=tu's D&D rows
    "global": {"pool_layers": ()},
    "weak": {"pool_layers": (2,), "supervision": "weak", "threshold": 0.001, "kl_weight": 1.0,
             "scorer": "fc", "init_dist": "normal"},
}


def _graphset(sizes: list[int], channels: int, seed: int) -> GraphSet:
    """Graphs of `sizes` nodes: a ring with random chords (6 edges per node), one-hot features."""
    rng = np.random.default_rng(seed)
    xs, edges = [], []
    for n in sizes:
        src = np.concatenate([np.arange(n), rng.integers(0, n, 2 * n)])
        dst = np.concatenate([(np.arange(n) + 1) % n, rng.integers(0, n, 2 * n)])
        keep = src != dst
        e = np.unique(np.stack([src[keep], dst[keep]], 1), axis=0).T
        edges.append(np.concatenate([e, e[::-1]], 1))
        xs.append(np.eye(channels, dtype=np.float32)[rng.integers(0, channels, n)])
    return GraphSet.from_graphs(xs, edges, list(rng.integers(0, 2, len(sizes))),
                                [np.zeros(n, np.float32) for n in sizes])


class _Live(TorchDispatchMode):
    """Peak bytes of the tensors that ops make while it is active, alive at once (per storage)."""

    def __init__(self):
        super().__init__()
        self.refs: dict[int, list[int]] = {}  # storage address -> [tensors alive, bytes]
        self.live = self.peak = 0

    def _gone(self, ptr: int) -> None:
        ref = self.refs[ptr]
        ref[0] -= 1
        if not ref[0]:
            self.live -= ref[1]
            del self.refs[ptr]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().nbytes():
                ptr = t.untyped_storage().data_ptr()
                ref = self.refs.setdefault(ptr, [0, t.untyped_storage().nbytes()])
                if not ref[0]:
                    self.live += ref[1]
                    self.peak = max(self.peak, self.live)
                ref[0] += 1
                weakref.finalize(t, self._gone, ptr)
        return out


def _adjacency(n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    A = torch.rand(1, n, n, generator=gen) < 0.05
    return torch.triu(A, 1).float() + torch.triu(A, 1).float().transpose(1, 2)


@pytest.mark.parametrize("K", [1, 2, 3, 4])
@pytest.mark.parametrize("aggregation", ["mean", "sum"])
def test_operator_units_are_the_tensors_alive_while_an_operator_is_made(K, aggregation):
    n = 400
    A = _adjacency(n, K)
    graph = Graph(A, torch.arange(n).unsqueeze(0) < n - 7)
    with _Live() as live:
        graph.operator(K, aggregation == "sum")
    unit = 4 * n * n  # A, made before, is one of the units
    assert (footprint.operator_units(K) - 1) * unit <= live.peak < footprint.operator_units(K) * unit


def test_evaluating_a_pooled_model_holds_one_batch_and_one_operator():
    """Batches of one graph each, the larger last: the previous batch and its operator are gone,
    and pooling released the operator of the graph it pooled (`Graph.with_mask`)."""
    cfg = resolve(TrialConfig(dataset="dd", backbone="chebynet", **ROWS["weak"]))
    gs = _graphset([900, 1000], 8, 3)
    model = seeded_model(cfg, 0, 8, 2, torch.device("cpu"))
    batches = eval_batches(gs, cfg.test_batch_size, max_entries=1, keep_entries=0)
    with _Live() as live:
        evaluate(model, batches, cfg)
    unit = 4 * 1000 * 1000
    assert live.peak < (footprint.operator_units(cfg.K) + 0.5) * unit  # activations: 0.3 units


class _Recorded:
    """Evaluation batches that remember (weakly) the adjacency of every batch they gave."""

    def __init__(self, batches):
        self.batches, self.refs, self.at_read = batches, [], []

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        import gc

        gc.collect()
        self.at_read.append([r() is not None for r in self.refs])  # none, once read
        ids, b = self.batches[i]
        self.refs.append(weakref.ref(b.A))
        return ids, b


@pytest.mark.parametrize("pack", [False, True])
def test_no_forward_finds_the_previous_batchs_adjacency(pack, monkeypatch):
    """Every forward of an evaluation, one seed or a pack of members, and every read of the
    next batch (`release_free_heap` runs before it): the batches read before are gone (their
    adjacency collated per read, as a large test split's)."""
    import gc

    from ablate.trial import packed
    from ablate.trial.members import Member, MemberStack

    cfg = resolve(TrialConfig(dataset="dd", backbone="chebynet", device="cpu", **ROWS["weak"]))
    gs = _graphset([30, 40, 50, 60], 8, 3)
    batches = _Recorded(eval_batches(gs, 1, max_entries=1, keep_entries=0))  # a graph a batch
    found = []
    init = Graph.__init__

    def spying(self, A, mask):
        gc.collect()
        found.append([r() is not None for r in batches.refs[:-1]])  # all but the current one
        init(self, A, mask)

    if pack:
        stack = MemberStack([Member(cfg, s) for s in (0, 1)], 8, 2, torch.device("cpu"))
        monkeypatch.setattr(Graph, "__init__", spying)
        packed.evaluate_members(stack, [0, 1], batches, cfg)
    else:
        model = seeded_model(cfg, 0, 8, 2, torch.device("cpu"))
        monkeypatch.setattr(Graph, "__init__", spying)
        evaluate(model, batches, cfg)
    assert len(batches.refs) >= 4 and found, found
    assert not any(any(f) for f in found), found
    assert not any(any(f) for f in batches.at_read), batches.at_read
    assert len(batches.refs) == len(batches)  # each batch read (collated) once, none twice


def _child(row: str) -> None:
    """Run one trial of `row` and print its peak memory beside the estimate (JSON)."""
    prepare_process()
    torch.set_num_threads(1)
    splits = {"train": _graphset([20 + i % 41 for i in range(40)], 8, 0),
              "val": _graphset([20 + i % 31 for i in range(8)], 8, 1),
              "test_large": _graphset([BIG, NEXT, 50, 60], 8, 2)}
    cfgs = {r: resolve(TrialConfig(dataset="dd", backbone="chebynet", epochs=1, device="cpu",
                                   **ROWS[r])) for r in ROWS}
    cfg = cfgs.get(row)
    if row == "dense_gat_train":  # one large training graph: a step's (B, N, N) tensors peak
        cfg = resolve(TrialConfig(dataset="dd", backbone="dense_gat", epochs=1, device="cpu",
                                  batch_size=4, pool_layers=()))
        splits = {"train": _graphset([TRAIN_BIG] + [20 + i % 41 for i in range(39)], 8, 0),
                  "val": splits["val"], "test_large": _graphset([50, 60, 70], 8, 2)}

    def in_thread(cfg: TrialConfig, splits: dict) -> None:
        trial = threading.Thread(target=run_seed, args=(cfg, splits, 0, torch.device("cpu")))
        trial.start()
        trial.join()

    in_thread(cfgs["global"], {**splits, "test_large": splits["val"]})
    data = {"bytes": sum(a.nbytes for gs in splits.values() for a in gs.arrays().values()),
            "splits": {k: {**gs.footprint(), "sizes": size_counts(gs.num_nodes)}
                       for k, gs in splits.items()}}  # as `cache.footprint` gives them
    limit = precollate_limit(torch.device("cpu"))
    need = footprint.working_set([cfg], data, limit, limit // 4)
    declared = footprint.pack_bytes([cfg], data, limit, limit // 4)
    with open("/proc/self/status") as f:
        base = next(int(x.split()[1]) for x in f if x.startswith("VmRSS:")) / 1024
    reset_peak_rss()
    in_thread(cfg, splits)
    print(json.dumps({"base_mb": base, "peak_mb": peak_rss_mb(), "need_mb": need / 2**20,
                      "slack": footprint.SLACK, "declared_mb": declared / 2**20}))


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux peak memory")
@pytest.mark.parametrize("row", [*sorted(ROWS), "dense_gat_train"])
def test_declared_memory_covers_a_trials_peak_and_not_absurdly_more(row):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, __file__, row], env=env, capture_output=True,
                         text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    grew = got["peak_mb"] - got["base_mb"]  # what the trial added to its process
    assert got["peak_mb"] <= got["declared_mb"], got
    assert grew <= got["slack"] * got["need_mb"], got
    assert grew >= got["need_mb"] / 2, got  # the estimate is not absurdly above the peak


if __name__ == "__main__":
    _child(sys.argv[1])


def test_a_test_split_kept_collated_while_evaluated_is_counted():
    """`EvalBatches` keeps a test split collated when its padded adjacency fits `keep_entries`:
    the evaluation phase holds all of it then, and the estimate counts it."""
    cfg = resolve(TrialConfig(dataset="dd", backbone="chebynet", device="cpu", **ROWS["global"]))
    splits = {"train": _graphset([20] * 8, 8, 0), "val": _graphset([20] * 4, 8, 1),
              "test_large": _graphset([120] * 60, 8, 2)}
    data = {"bytes": 0, "splits": {k: gs.footprint() for k, gs in splits.items()}}
    big, none = 1 << 30, 0
    assert eval_batches(splits["test_large"], 10, keep_entries=big).kept is not None
    assert eval_batches(splits["test_large"], 10, keep_entries=none).kept is None
    grew = (footprint.working_set([cfg], data, 1 << 30, big)
            - footprint.working_set([cfg], data, 1 << 30, none))
    val_kept = footprint._eval_kept(data["splits"]["val"], big)
    assert grew - val_kept >= 4 * 60 * 120 * 120  # the test split's adjacency, at least


def test_heaps_keep_freed_dense_steps_only_where_training_steps_differ_in_size():
    """A dense layer's training steps of one padded size reuse what the last one freed; steps
    of several large sizes leave freed sets beside each other (COLLAB's dense_gat peaks:
    docs/performance.md). Unknown sizes count the most."""
    cfg = resolve(TrialConfig(dataset="dd", backbone="dense_gat", device="cpu", pool_layers=()))
    one = {"sizes": [[20, 39], [1000, 1]]}
    many = {"sizes": [[20, 39], [750, 2], [800, 1], [1000, 1]]}  # 750: over half 1000^2
    two = {"sizes": [[20, 39], [500, 3], [1000, 1]]}  # 500 nodes: a quarter of 1000's step
    entries = 4 * 1000 * 1000
    assert footprint.train_kept(cfg, entries, one) == 0
    assert footprint.train_kept(cfg, entries, two) == 0
    assert footprint.train_kept(cfg, entries, many) == footprint.HEAP_STEPS == 2
    assert footprint.train_kept(cfg, entries, {}) == footprint.HEAP_STEPS
    chebygin = resolve(TrialConfig(dataset="dd", backbone="chebygin", device="cpu"))
    assert footprint.train_kept(chebygin, entries, many) == 0
