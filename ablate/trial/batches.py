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


def precollate_limit(device: torch.device) -> int:
    """Adjacency entries up to which a split is pre-collated on `device`: `PRECOLLATE_LIMIT` on
    a CPU; on CUDA up to a quarter of the free GPU memory (MNIST-75SP's 60,000 x 75 x 75
    training adjacency, 1.35 GB, then stays on the device and its steps can be captured)."""
    if device.type != "cuda":
        return PRECOLLATE_LIMIT
    free, _ = torch.cuda.mem_get_info(device)
    return max(PRECOLLATE_LIMIT, free // 4 // 4)


class TrainBatches:
    """Shuffled training batches of one split, pre-collated when it fits in memory."""

    def __init__(self, gs: GraphSet, device: torch.device):
        self.gs, self.device = gs, device
        n = int(gs.num_nodes.max())
        self.dense = collate(gs).to(device) if len(gs) * n * n <= precollate_limit(device) \
            else None
        self.member_gt: Tensor | None = None  # (S, G, N) per-member targets (`set_member_gt`)
        self._member_gt_host: np.ndarray | None = None  # (S, total nodes), when not pre-collated

    def __len__(self) -> int:
        return len(self.gs)

    def set_gt(self, gt_per_node: np.ndarray) -> None:
        """Replace the ground truth (e.g. by weak-supervision attention), flat per node.

        The pre-collated `dense.gt` is rewritten in place (no new collation of x and A, and a
        captured step that reads the buffer sees the new values)."""
        self.gs = GraphSet(self.gs.x, gt_per_node.astype(np.float32), self.gs.node_ptr,
                           self.gs.edge_index, self.gs.edge_ptr, self.gs.y, self.gs.edge_weight)
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
        if gt.ndim != 2 or gt.shape[1] != len(self.gs.x):
            raise ValueError(f"per-member targets must be (members, {len(self.gs.x)} nodes), "
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
