"""Dense padded batches: a `GraphSet` becomes (B, N, N) adjacency, (B, N, C) features, a mask.

Training and evaluation run on this form (DESIGN.md, "Performance shape"):
small splits are collated once to one padded tensor set and batches are
index gathers; evaluation batches are pre-collated once per split, sorted by
graph size so that padding stays small.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch
from torch import Tensor

from ablate.data.graphs import GraphSet

PRECOLLATE_LIMIT = 64_000_000  # adjacency entries (256 MB float32) above which batches are lazy


@dataclass
class DenseBatch:
    """Padded graphs: present nodes first in each row of the mask."""

    x: Tensor  # (B, N, C) node features, zero on padding
    A: Tensor  # (B, N, N) adjacency (weights), zero on padding and diagonal
    mask: Tensor  # (B, N) bool, True for real nodes
    gt: Tensor  # (B, N) ground-truth attention
    y: Tensor  # (B,) labels (float counts or int64 classes)
    n_nodes: Tensor  # (B,) int64 number of nodes

    def __len__(self) -> int:
        return self.x.shape[0]

    def to(self, device: torch.device | str) -> DenseBatch:
        return DenseBatch(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def index(self, idx: Tensor, trim: bool = True) -> DenseBatch:
        """Graphs `idx`, padded to the largest of them when `trim`."""
        n = int(self.n_nodes[idx].max()) if trim and len(idx) else self.x.shape[1]
        return DenseBatch(self.x[idx, :n], self.A[idx, :n, :n], self.mask[idx, :n],
                          self.gt[idx, :n], self.y[idx], self.n_nodes[idx])

    def replace_gt(self, gt: Tensor) -> DenseBatch:
        return DenseBatch(self.x, self.A, self.mask, gt, self.y, self.n_nodes)


def collate(gs: GraphSet, idx: np.ndarray | None = None, n_max: int | None = None) -> DenseBatch:
    """Pad graphs `idx` of `gs` (all by default) into one DenseBatch (vectorised scatter)."""
    sub = gs if idx is None else gs.subset(idx)
    nn_ = sub.num_nodes
    G = len(sub)
    N = int(n_max if n_max is not None else (nn_.max() if G else 1))
    node_graph = np.repeat(np.arange(G), nn_)
    local = np.arange(len(node_graph)) - sub.node_ptr[node_graph]
    x = torch.zeros(G, N, sub.num_features)
    x[node_graph, local] = torch.from_numpy(sub.x)
    gt = torch.zeros(G, N)
    gt[node_graph, local] = torch.from_numpy(sub.gt)
    mask = torch.zeros(G, N, dtype=torch.bool)
    mask[node_graph, local] = True
    A = torch.zeros(G, N, N)
    edge_graph = np.repeat(np.arange(G), np.diff(sub.edge_ptr))
    w = torch.ones(len(edge_graph)) if sub.edge_weight is None else torch.from_numpy(
        sub.edge_weight)
    A[edge_graph, sub.edge_index[0], sub.edge_index[1]] = w
    y = torch.from_numpy(np.asarray(sub.y))
    return DenseBatch(x, A, mask, gt, y, torch.from_numpy(nn_.astype(np.int64)))


class TrainBatches:
    """Shuffled training batches of one split, pre-collated when it fits in memory."""

    def __init__(self, gs: GraphSet, device: torch.device):
        self.gs, self.device = gs, device
        n = int(gs.num_nodes.max())
        self.dense = collate(gs).to(device) if len(gs) * n * n <= PRECOLLATE_LIMIT else None

    def __len__(self) -> int:
        return len(self.gs)

    def set_gt(self, gt_per_node: np.ndarray) -> None:
        """Replace the ground truth (e.g. by weak-supervision attention), flat per node."""
        self.gs = GraphSet(self.gs.x, gt_per_node.astype(np.float32), self.gs.node_ptr,
                           self.gs.edge_index, self.gs.edge_ptr, self.gs.y, self.gs.edge_weight)
        if self.dense is not None:  # only gt changes: no new collation of x and A
            gt = torch.zeros_like(self.dense.gt)
            gt[self.dense.mask] = torch.from_numpy(self.gs.gt).to(self.device)  # row-major order
            self.dense = self.dense.replace_gt(gt)

    def epoch(self, batch_size: int, generator: torch.Generator):
        """Yield DenseBatches of a fresh random permutation (last batch may be smaller)."""
        perm = torch.randperm(len(self.gs), generator=generator)
        for s in range(0, len(perm), batch_size):
            idx = perm[s:s + batch_size]
            if self.dense is not None:
                yield self.dense.index(idx.to(self.device))
            else:
                yield collate(self.gs, idx.numpy()).to(self.device)


def eval_batches(gs: GraphSet, batch_size: int = 100_000, device: torch.device | str = "cpu",
                 max_entries: int = 2_000_000) -> list[tuple[np.ndarray, DenseBatch]]:
    """Pre-collated evaluation batches sorted by size: (graph ids, batch) pairs.

    A batch holds at most `batch_size` graphs and `max_entries` adjacency entries.
    Evaluation is per graph and deterministic, so batching changes speed, not results.
    """
    order = np.argsort(gs.num_nodes, kind="stable")
    sizes = gs.num_nodes[order]
    out, start = [], 0
    while start < len(order):
        stop = start + 1
        while (stop < len(order) and stop - start < batch_size
               and (stop + 1 - start) * int(sizes[stop]) ** 2 <= max_entries):
            stop += 1
        ids = order[start:stop]
        out.append((ids, collate(gs, ids).to(device)))
        start = stop
    return out
