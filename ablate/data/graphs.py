"""Compact storage for a split of graphs, and its conversions.

A `GraphSet` keeps every graph of a split in a few concatenated NumPy arrays
(CSR style), which is what the on-disk cache stores and what the dense
collator reads. `to_data_list` gives the public `torch_geometric.data.Data`
view promised by `ablate.data.load_dataset`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:  # PyG costs ~3 s to import: only where Data objects are made
    from torch_geometric.data import Data


@dataclass
class GraphSet:
    """Graphs of one split, concatenated. Node indices in `edge_index` are local to each graph."""

    x: np.ndarray  # (total_nodes, C) float32 node features
    gt: np.ndarray  # (total_nodes,) float32 ground-truth attention, sums to 1 per graph or all 0
    node_ptr: np.ndarray  # (G + 1,) int64 offsets of each graph's nodes
    edge_index: np.ndarray  # (2, total_edges) int64, both directions, no self-loops, local ids
    edge_ptr: np.ndarray  # (G + 1,) int64 offsets of each graph's edges
    y: np.ndarray  # (G,) graph labels (float32 for regression counts, int64 for classes)
    edge_weight: np.ndarray | None = None  # (total_edges,) float32, None = unweighted

    def __len__(self) -> int:
        return len(self.node_ptr) - 1

    @property
    def num_nodes(self) -> np.ndarray:
        """(G,) number of nodes of every graph."""
        return np.diff(self.node_ptr)

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    def graph(self, i: int) -> Data:
        """Graph `i` as a PyG `Data` object."""
        from torch_geometric.data import Data

        n0, n1 = self.node_ptr[i], self.node_ptr[i + 1]
        e0, e1 = self.edge_ptr[i], self.edge_ptr[i + 1]
        data = Data(
            x=torch.from_numpy(self.x[n0:n1].copy()),
            edge_index=torch.from_numpy(self.edge_index[:, e0:e1].copy()),
            y=torch.tensor([self.y[i]]),
            gt=torch.from_numpy(self.gt[n0:n1].copy()),
            num_nodes=int(n1 - n0),
        )
        if self.edge_weight is not None:
            data.edge_weight = torch.from_numpy(self.edge_weight[e0:e1].copy())
        return data

    def to_data_list(self) -> list[Data]:
        return [self.graph(i) for i in range(len(self))]

    def subset(self, idx: np.ndarray) -> GraphSet:
        """A new GraphSet with graphs `idx` (in that order)."""
        idx = np.asarray(idx, dtype=np.int64)
        nn, ne = self.num_nodes[idx], np.diff(self.edge_ptr)[idx]
        node_sel = _ranges(self.node_ptr[idx], nn)
        edge_sel = _ranges(self.edge_ptr[idx], ne)
        return GraphSet(
            x=self.x[node_sel],
            gt=self.gt[node_sel],
            node_ptr=np.concatenate([[0], np.cumsum(nn)]).astype(np.int64),
            edge_index=self.edge_index[:, edge_sel],
            edge_ptr=np.concatenate([[0], np.cumsum(ne)]).astype(np.int64),
            y=self.y[idx],
            edge_weight=None if self.edge_weight is None else self.edge_weight[edge_sel],
        )

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """Flatten into named arrays for `np.savez` (see `from_arrays`)."""
        out = {
            f"{prefix}/x": self.x,
            f"{prefix}/gt": self.gt,
            f"{prefix}/node_ptr": self.node_ptr,
            f"{prefix}/edge_index": self.edge_index,
            f"{prefix}/edge_ptr": self.edge_ptr,
            f"{prefix}/y": self.y,
        }
        if self.edge_weight is not None:
            out[f"{prefix}/edge_weight"] = self.edge_weight
        return out

    @classmethod
    def from_arrays(cls, arrays, prefix: str) -> GraphSet:
        ew = f"{prefix}/edge_weight"
        return cls(
            x=arrays[f"{prefix}/x"],
            gt=arrays[f"{prefix}/gt"],
            node_ptr=arrays[f"{prefix}/node_ptr"],
            edge_index=arrays[f"{prefix}/edge_index"],
            edge_ptr=arrays[f"{prefix}/edge_ptr"],
            y=arrays[f"{prefix}/y"],
            edge_weight=arrays[ew] if ew in arrays else None,
        )

    @classmethod
    def from_graphs(
        cls,
        xs: list[np.ndarray],
        edges: list[np.ndarray],
        ys: list,
        gts: list[np.ndarray],
        weights: list[np.ndarray] | None = None,
    ) -> GraphSet:
        """Build from per-graph arrays: x (N, C), edges (2, E) local ids, y, gt (N,)."""
        nn = np.array([len(x) for x in xs], dtype=np.int64)
        ne = np.array([e.shape[1] for e in edges], dtype=np.int64)
        y = np.asarray(ys)
        return cls(
            x=np.concatenate(xs).astype(np.float32),
            gt=np.concatenate(gts).astype(np.float32),
            node_ptr=np.concatenate([[0], np.cumsum(nn)]).astype(np.int64),
            edge_index=np.concatenate(edges, axis=1).astype(np.int64)
            if edges
            else np.zeros((2, 0), np.int64),
            edge_ptr=np.concatenate([[0], np.cumsum(ne)]).astype(np.int64),
            y=y.astype(np.int64) if np.issubdtype(y.dtype, np.integer) else y.astype(np.float32),
            edge_weight=None if weights is None else np.concatenate(weights).astype(np.float32),
        )


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + l) for every (s, l), vectorised."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return np.arange(total, dtype=np.int64) + offsets


def dense_adjacency_edges(adj: np.ndarray) -> np.ndarray:
    """(2, E) edge index (both directions, no self-loops) of a symmetric 0/1 matrix."""
    a = np.array(adj, dtype=bool)
    np.fill_diagonal(a, False)
    return np.stack(np.nonzero(a)).astype(np.int64)


def normalize_gt(w: np.ndarray) -> np.ndarray:
    """Scale non-negative weights to sum to 1 (all zeros stay all zeros)."""
    w = np.asarray(w, dtype=np.float32)
    s = w.sum()
    return w / s if s > 0 else np.zeros_like(w)
