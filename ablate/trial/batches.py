"""Dense padded batches: a `GraphSet` becomes (B, N, N) adjacency, (B, N, C) features, a mask.

Training and evaluation run on this form (DESIGN.md, "Performance shape"):
small splits are collated once to one padded tensor set and batches are
index gathers; evaluation batches are sorted by graph size so that padding stays
small, and collated once where the split is small. What is kept is bounded: the
adjacency of point graphs (MNIST-75SP) is derived per batch from the centroids,
and a split too large to keep collated is collated batch by batch.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields

import numpy as np
import torch
from torch import Tensor

from ablate.data.graphs import GraphSet
from ablate.data.kernel import adjacency_batch
from ablate.data.onehot import OneHot

PRECOLLATE_LIMIT = 64_000_000  # adjacency entries (256 MB float32) above which batches are lazy
EVAL_ENTRIES = 2_000_000  # padded adjacency entries of an evaluation batch


@dataclass
class DenseBatch:
    """Padded graphs: present nodes first in each row of the mask.

    Point graphs (MNIST-75SP) may be held without their adjacency: `coord` then holds
    the centroids and `A` is None until `with_adjacency` (or `index`) derives it, so a
    collated split on the device costs (B, N, C + 4) entries instead of (B, N, N).
    """

    x: Tensor  # (B, N, C) node features, zero on padding
    A: Tensor | None  # (B, N, N) adjacency (weights), zero on padding and diagonal
    mask: Tensor  # (B, N) bool, True for real nodes
    gt: Tensor  # (B, N) ground-truth attention
    y: Tensor  # (B,) labels (float counts or int64 classes)
    n_nodes: Tensor  # (B,) int64 number of nodes
    coord: Tensor | None = None  # (B, N, 2) centroids of point graphs

    def __len__(self) -> int:
        return self.x.shape[0]

    def to(self, device: torch.device | str) -> DenseBatch:
        return DenseBatch(**{f.name: None if getattr(self, f.name) is None
                             else getattr(self, f.name).to(device) for f in fields(self)})

    def with_adjacency(self) -> DenseBatch:
        """This batch with `A` (derived from the centroids of point graphs when absent)."""
        if self.A is not None:
            return self
        return DenseBatch(self.x, adjacency_batch(self.coord, self.mask), self.mask, self.gt,
                          self.y, self.n_nodes, self.coord)

    def index(self, idx: Tensor, trim: bool = True) -> DenseBatch:
        """Graphs `idx`, padded to the largest of them when `trim`, with their adjacency."""
        n = int(self.n_nodes[idx].max()) if trim and len(idx) else self.x.shape[1]
        coord = None if self.coord is None else self.coord[idx, :n]
        A = self.A[idx, :n, :n] if self.A is not None else None
        return DenseBatch(self.x[idx, :n], A, self.mask[idx, :n], self.gt[idx, :n], self.y[idx],
                          self.n_nodes[idx], coord).with_adjacency()

    def replace_gt(self, gt: Tensor) -> DenseBatch:
        return DenseBatch(self.x, self.A, self.mask, gt, self.y, self.n_nodes, self.coord)


def collate(gs: GraphSet, idx: np.ndarray | None = None, n_max: int | None = None,
            adjacency: bool = True) -> DenseBatch:
    """Pad graphs `idx` of `gs` (all by default) into one DenseBatch (vectorised scatter).

    Point graphs get their adjacency from their centroids; with `adjacency=False` they keep
    the centroids only (`DenseBatch.with_adjacency` derives it later)."""
    sub = gs if idx is None else gs.subset(idx)
    nn_ = sub.num_nodes
    G = len(sub)
    N = int(n_max if n_max is not None else (nn_.max() if G else 1))
    node_graph = np.repeat(np.arange(G), nn_)
    local = np.arange(len(node_graph)) - sub.node_ptr[node_graph]
    x = torch.zeros(G, N, sub.num_features)
    if isinstance(sub.x, OneHot):  # set the hot channel of every node
        on = sub.x.index >= 0
        x[node_graph[on], local[on], torch.from_numpy(sub.x.index[on].astype(np.int64))] = 1.0
    else:
        x[node_graph, local] = _tensor(sub.x)
    gt = torch.zeros(G, N)
    gt[node_graph, local] = _tensor(sub.gt)
    mask = torch.zeros(G, N, dtype=torch.bool)
    mask[node_graph, local] = True
    y = _tensor(sub.y)
    n_nodes = torch.from_numpy(nn_.astype(np.int64))
    if sub.points:
        coord = torch.zeros(G, N, 2)
        coord[node_graph, local] = _tensor(sub.coord)
        batch = DenseBatch(x, None, mask, gt, y, n_nodes, coord)
        return batch.with_adjacency() if adjacency else batch
    A = torch.zeros(G, N, N)
    edge_graph = np.repeat(np.arange(G), np.diff(sub.edge_ptr))
    w = torch.ones(len(edge_graph)) if sub.edge_weight is None else _tensor(sub.edge_weight)
    ei = np.asarray(sub.edge_index, np.int64)
    A[edge_graph, ei[0], ei[1]] = w
    return DenseBatch(x, A, mask, gt, y, n_nodes)


def _tensor(a: np.ndarray) -> Tensor:
    """A tensor of `a`'s values (a read-only memory map is copied: torch cannot share it)."""
    a = np.asarray(a)
    return torch.from_numpy(a if a.flags.writeable else np.array(a))


def collated_entries(gs: GraphSet) -> int:
    """Entries of `collate(gs)` kept in memory: the (G, N, N) adjacency, or for point graphs
    (whose adjacency is derived per batch) the (G, N, C + 4) features, centroids, mask, gt."""
    n = int(gs.num_nodes.max()) if len(gs) else 0
    return len(gs) * n * ((gs.num_features + 4) if gs.points else n)


def precollate_limit(device: torch.device) -> int:
    """Entries up to which a split is pre-collated on `device` (`collated_entries`):
    `PRECOLLATE_LIMIT` on a CPU; on CUDA up to a quarter of the free GPU memory. A split that
    does not fit is collated batch by batch, so what a trial keeps for its splits is bounded
    whatever the data set (MNIST-75SP's training split, kept as centroids: 40 million
    entries, 0.16 GB, whatever the pack size)."""
    if device.type != "cuda":
        return PRECOLLATE_LIMIT
    free, _ = torch.cuda.mem_get_info(device)
    return max(PRECOLLATE_LIMIT, free // 4 // 4)


class TrainBatches:
    """Shuffled training batches of one split, pre-collated when it fits in memory."""

    def __init__(self, gs: GraphSet, device: torch.device):
        self.gs, self.device = gs, device
        self.dense = (collate(gs, adjacency=False).to(device)
                      if collated_entries(gs) <= precollate_limit(device) else None)
        self.member_gt: Tensor | None = None  # (S, G, N) per-member targets (`set_member_gt`)
        self._member_gt_host: np.ndarray | None = None  # (S, total nodes), when not pre-collated

    def __len__(self) -> int:
        return len(self.gs)

    def set_gt(self, gt_per_node: np.ndarray) -> None:
        """Replace the ground truth (e.g. by weak-supervision attention), flat per node.

        The pre-collated `dense.gt` is rewritten in place (no new collation of x and A, and a
        captured step that reads the buffer sees the new values)."""
        self.gs = self.gs.replace(gt=gt_per_node.astype(np.float32))
        if self.dense is not None:
            gt = self.dense.gt
            gt.zero_()
            gt[self.dense.mask] = torch.from_numpy(self.gs.gt).to(self.device)  # row-major order

    def set_member_gt(self, gt_per_member: np.ndarray) -> None:
        """Per-member ground truth (S, total nodes), each row flat per node as in `set_gt`:
        member s of a pack trains on row s (`member_gt_batch`; weak supervision gives every
        member its own alpha_WS). Pre-collated splits keep it on the device as (S, G, N),
        updated in place when the shape is unchanged."""
        gt = np.ascontiguousarray(gt_per_member, dtype=np.float32)
        if gt.ndim != 2 or gt.shape[1] != self.gs.total_nodes:
            raise ValueError(f"per-member targets must be (members, {self.gs.total_nodes} nodes), "
                             f"got {gt.shape}")
        if self.dense is None:
            self._member_gt_host = gt
            return
        dense = torch.zeros(gt.shape[0], *self.dense.gt.shape, device=self.device)
        dense[:, self.dense.mask] = torch.from_numpy(gt).to(self.device)  # row-major order
        if self.member_gt is not None and self.member_gt.shape == dense.shape:
            self.member_gt.copy_(dense)
        else:
            self.member_gt = dense

    @property
    def has_member_gt(self) -> bool:
        return self.member_gt is not None or self._member_gt_host is not None

    def member_gt_batch(self, idx: Tensor, n: int) -> Tensor:
        """Targets of graphs idx (S, B) (member s: its own row), padded to n nodes: (S, B, n)."""
        S, B = idx.shape
        if self.member_gt is not None:
            if self.member_gt.shape[0] != S:
                raise ValueError(f"per-member targets hold {self.member_gt.shape[0]} members, "
                                 f"the batch {S}")
            src = self.member_gt[:, :, :n]  # (S, G, n)
            return src.gather(1, idx.unsqueeze(-1).expand(S, B, n))
        flat = self._member_gt_host
        if flat is None or flat.shape[0] != S:
            raise ValueError(f"per-member targets for {S} members were not set")
        ids = idx.cpu().numpy().reshape(-1)  # host batches: the lazy path syncs anyway
        counts = self.gs.num_nodes[ids]
        rows = np.repeat(np.arange(S * B), counts)
        local = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
        src = np.repeat(self.gs.node_ptr[ids], counts) + local
        out = np.zeros((S * B, n), np.float32)
        out[rows, local] = flat[rows // B, src]
        return torch.from_numpy(out.reshape(S, B, n)).to(self.device)

    def epoch(self, batch_size: int, generator: torch.Generator):
        """Yield DenseBatches of a fresh random permutation (last batch may be smaller)."""
        perm = torch.randperm(len(self.gs), generator=generator)
        for s in range(0, len(perm), batch_size):
            idx = perm[s:s + batch_size]
            if self.dense is not None:
                yield self.dense.index(idx.to(self.device))
            else:
                yield collate(self.gs, idx.numpy()).to(self.device)


SIZE_BREAK = 256  # no evaluation batch holds graphs on both sides of this size (weak.LOO_MAX_NODES)


class EvalBatches(Sequence):
    """Evaluation batches of one split, sorted by graph size: (graph ids, DenseBatch) pairs.

    A batch holds at most `batch_size` graphs and `max_entries` adjacency entries, and never
    graphs on both sides of `SIZE_BREAK` nodes. Evaluation is per graph and deterministic, so
    batching changes speed, not results. What is kept between reads is bounded: point graphs
    keep their features and centroids (each batch's adjacency derived when it is read); edge
    graphs keep their collated batches when the split's padded adjacency fits `keep_entries`
    (validation splits, read for every curve point), else each batch is collated when read
    (a large test split is read once or twice: its batches never all sit in memory at once).
    Before such a read the heap's free pages go back to the system (`release_free_heap`), so the
    working set of the batches before it does not stay resident under the next, larger one's.
    """

    def __init__(self, gs: GraphSet, batch_size: int, device: torch.device | str,
                 max_entries: int, keep_entries: int):
        self.gs, self.device = gs, torch.device(device)
        self.groups = size_groups(gs.num_nodes, batch_size, max_entries)
        padded = sum(len(ids) * int(gs.num_nodes[ids].max()) ** 2 for ids in self.groups)
        keep = gs.points or padded <= keep_entries
        self.kept = ([collate(gs, ids, adjacency=False).to(self.device) for ids in self.groups]
                     if keep else None)

    def __len__(self) -> int:
        return len(self.groups)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        ids = self.groups[i]  # IndexError past the end: ends iteration
        if self.kept is not None:
            return ids, self.kept[i].with_adjacency()
        release_free_heap()
        return ids, collate(self.gs, ids).to(self.device).with_adjacency()


def each_batch(batches) -> Iterator[DenseBatch]:
    """The batches of an evaluation (an `eval_batches` sequence or a list of (ids, batch)), one
    at a time: a batch is let go before the next one is read (iterating a `Sequence` keeps the
    batch it gave while it reads the next: two batches' adjacency at once). The caller lets go
    of its own reference before asking for the next."""
    for i in range(len(batches)):
        b = batches[i][1]
        yield b
        del b


def release_free_heap() -> None:
    """Give the heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing).

    `ablate.trial.setup.tune_allocator` keeps freed memory in the heap, which tiny training
    steps reuse; the (N, N) tensors of a phase that is over (an evaluation batch, a
    leave-one-out chunk) stay resident there too when the heap holds them (a Tune trial's
    thread: those under 64 MB), beside the larger tensors that follow, mapped apart (D&D's
    test split: 0.2 GB)."""
    global _MALLOC_TRIM
    if _MALLOC_TRIM is None:
        try:
            _MALLOC_TRIM = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _MALLOC_TRIM = False
    if _MALLOC_TRIM:
        _MALLOC_TRIM(0)


_MALLOC_TRIM = None  # libc's malloc_trim, False where there is none


def size_groups(sizes: np.ndarray, batch_size: int, max_entries: int) -> list[np.ndarray]:
    """Graph ids sorted by size, cut into batches of at most `batch_size` graphs and
    `max_entries` padded adjacency entries, never straddling `SIZE_BREAK`."""
    order = np.argsort(sizes, kind="stable")
    s = sizes[order]
    out, start = [], 0
    while start < len(order):
        stop = start + 1
        while (stop < len(order) and stop - start < batch_size
               and (stop + 1 - start) * int(s[stop]) ** 2 <= max_entries
               and (s[start] > SIZE_BREAK) == (s[stop] > SIZE_BREAK)):
            stop += 1
        out.append(order[start:stop])
        start = stop
    return out


def eval_batches(gs: GraphSet, batch_size: int = 100_000, device: torch.device | str = "cpu",
                 max_entries: int = EVAL_ENTRIES, keep_entries: int | None = None) -> EvalBatches:
    """The evaluation batches of `gs` (`EvalBatches`); `keep_entries` defaults to a quarter of
    what `precollate_limit` allows on the device."""
    dev = torch.device(device)
    keep = precollate_limit(dev) // 4 if keep_entries is None else keep_entries
    return EvalBatches(gs, batch_size, dev, max_entries, keep)
