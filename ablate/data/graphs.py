"""Compact storage for a split of graphs, and its conversions.

A `GraphSet` keeps every graph of a split in a few concatenated NumPy arrays
(CSR style), which is what the on-disk cache stores (memory-mapped when read back,
`ablate.data.cache`) and what the dense collator reads. It holds what defines a
graph, not what can be derived from it:

- edge graphs (COLORS, TRIANGLES, TU): an edge list per graph, both directions;
- point graphs (MNIST-75SP): node centroids `coord`; every graph is complete with the
  weights `ablate.data.kernel.adjacency(coord)`, built where a batch is made
  (`ablate.trial.batches`), never stored;
- one-hot features may be kept as the hot channel's index (`ablate.data.onehot.OneHot`).

`to_data_list` gives the public `torch_geometric.data.Data` view promised by
`ablate.data.load_dataset` (edges and weights derived for point graphs).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from ablate.data.onehot import OneHot

if TYPE_CHECKING:  # PyG costs ~3 s to import: only where Data objects are made
    from torch_geometric.data import Data

ARRAYS = ("x", "gt", "node_ptr", "edge_index", "edge_ptr", "y", "edge_weight", "coord")


@dataclass
class GraphSet:
    """Graphs of one split, concatenated. Node indices in `edge_index` are local to each graph."""

    x: np.ndarray | OneHot  # (total_nodes, C) float32 node features
    gt: np.ndarray  # (total_nodes,) float32 ground-truth attention, sums to 1 per graph or all 0
    node_ptr: np.ndarray  # (G + 1,) int64 offsets of each graph's nodes
    edge_index: np.ndarray  # (2, total_edges) int, both directions, no self-loops, local ids
    edge_ptr: np.ndarray  # (G + 1,) int64 offsets of each graph's edges
    y: np.ndarray  # (G,) graph labels (float32 for regression counts, int64 for classes)
    edge_weight: np.ndarray | None = None  # (total_edges,) float32, None = unweighted
    coord: np.ndarray | None = None  # (total_nodes, 2) float32 centroids: point graphs (no edges)

    def __len__(self) -> int:
        return len(self.node_ptr) - 1

    @property
    def num_nodes(self) -> np.ndarray:
        """(G,) number of nodes of every graph."""
        return np.diff(self.node_ptr)

    @property
    def total_nodes(self) -> int:
        return int(self.node_ptr[-1])

    @property
    def num_features(self) -> int:
        return int(self.x.shape[1])

    @property
    def points(self) -> bool:
        """Complete graphs weighted by the centroid kernel (edges derived, not stored)."""
        return self.coord is not None

    def replace(self, **changes) -> GraphSet:
        return dataclasses.replace(self, **changes)

    def edges(self, i: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Graph `i`'s (2, E) int64 local edge index (both directions) and (E,) weights or None;
        derived from the centroids for point graphs."""
        if self.points:
            from ablate.data.kernel import adjacency, complete_edges

            n0, n1 = self.node_ptr[i], self.node_ptr[i + 1]
            e = complete_edges(int(n1 - n0))
            return e, adjacency(self.coord[n0:n1])[e[0], e[1]].astype(np.float32)
        e0, e1 = self.edge_ptr[i], self.edge_ptr[i + 1]
        w = None if self.edge_weight is None else np.array(self.edge_weight[e0:e1], np.float32)
        return np.array(self.edge_index[:, e0:e1], np.int64), w

    def graph(self, i: int) -> Data:
        """Graph `i` as a PyG `Data` object."""
        from torch_geometric.data import Data

        n0, n1 = self.node_ptr[i], self.node_ptr[i + 1]
        e, w = self.edges(i)
        data = Data(
            x=torch.from_numpy(np.array(self.x[n0:n1], np.float32)),
            edge_index=torch.from_numpy(e),
            y=torch.tensor([self.y[i]]),
            gt=torch.from_numpy(np.array(self.gt[n0:n1], np.float32)),
            num_nodes=int(n1 - n0),
        )
        if w is not None:
            data.edge_weight = torch.from_numpy(w)
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
            coord=None if self.coord is None else self.coord[node_sel],
        )

    def concat(self, other: GraphSet) -> GraphSet:
        """The graphs of this set followed by those of `other` (same kind of graphs)."""
        if (self.edge_weight is None) != (other.edge_weight is None) or self.points != other.points:
            raise ValueError("cannot join splits of different kinds of graphs (weights, points)")
        both = (self, other)
        x = (OneHot.concat([g.x for g in both]) if all(isinstance(g.x, OneHot) for g in both)
             else np.concatenate([np.asarray(g.x, np.float32) for g in both]))
        return GraphSet(
            x=x, gt=np.concatenate([self.gt, other.gt]),
            node_ptr=np.concatenate([self.node_ptr, other.node_ptr[1:] + self.node_ptr[-1]]),
            edge_index=np.concatenate([self.edge_index, other.edge_index], axis=1),
            edge_ptr=np.concatenate([self.edge_ptr, other.edge_ptr[1:] + self.edge_ptr[-1]]),
            y=np.concatenate([self.y, other.y]),
            edge_weight=None if self.edge_weight is None
            else np.concatenate([self.edge_weight, other.edge_weight]),
            coord=None if self.coord is None else np.concatenate([self.coord, other.coord]),
        )

    def arrays(self) -> dict[str, np.ndarray]:
        """Every stored array by field name (a `OneHot` x as ``x_hot``, its width aside)."""
        out = {}
        for name in ARRAYS:
            v = getattr(self, name)
            if isinstance(v, OneHot):
                out["x_hot"] = v.index
            elif v is not None:
                out[name] = v
        return out

    @classmethod
    def from_fields(cls, arrays: dict[str, np.ndarray], x_width: int | None = None) -> GraphSet:
        """Inverse of `arrays` (`x_width`: the width of a one-hot ``x_hot``)."""
        kw = {k: arrays.get(k) for k in ARRAYS if k != "x"}
        x = OneHot(arrays["x_hot"], x_width) if "x_hot" in arrays else arrays["x"]
        return cls(x=x, **kw)

    def footprint(self) -> dict:
        """Sizes that decide the memory of dense batches of this split (`ablate.data.cache`)."""
        n = self.num_nodes
        return {"graphs": len(self), "nodes": self.total_nodes,
                "max_nodes": int(n.max()) if len(n) else 0,
                "sum_n2": int((n.astype(np.int64) ** 2).sum()), "channels": self.num_features,
                "points": self.points, "gt": bool((self.gt > 0).any())}

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
