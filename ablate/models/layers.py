"""The graph layer family of Knyazev et al. (2019), SPEC §2, on dense padded batches.

One formulation, four names: GCN (K=1, mean, no hidden), GIN (K=1, sum, MLP),
ChebyNet (K>1, mean) and ChebyGIN (K>1, sum, MLP). Graphs are dense: a batch
holds x (B, N, C), adjacency A (B, N, N) and a node mask (B, N). Pooling only
updates the mask; `Graph` rebuilds the propagation operator of the induced
subgraph from A and the mask, so a dropped node and its edges really leave.
No op here has a data-dependent shape, so many seeds can later be batched
with `torch.func` transforms.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Graph:
    """A batch of dense graphs under a node mask, with propagation operators cached per kind.

    Args:
        A: (B, N, N) symmetric adjacency (0/1 or weighted), zero diagonal.
        mask: (B, N) bool, True for nodes present in the (induced) graph.
    """

    def __init__(self, A: Tensor, mask: Tensor):
        self.A = A
        self.mask = mask
        self.maskf = mask.to(A.dtype)  # (B, N) float copy of the mask, made once
        self._ops: dict[tuple[int, bool], Tensor] = {}
        self._adj: Tensor | None = None

    def with_mask(self, mask: Tensor) -> Graph:
        """The induced subgraph on the nodes of `mask` (same storage, new operators).

        Pooling replaces this graph by the subgraph for the rest of a forward, so this graph's
        cached operators are released: an evaluation never holds the operators of both (a
        later `operator` call makes them again; in training autograd keeps what it needs)."""
        self._ops.clear()
        self._adj = None
        return Graph(self.A, mask)

    def adjacency(self) -> Tensor:
        """The induced subgraph's adjacency A * m m^T (B, N, N), made once: what a dense
        layer of the (x, adj, mask) form (`ablate.models.backbones`) reads, so a pooled-out
        node's edges leave it too."""
        if self._adj is None:
            with torch.no_grad():  # depends on the graph only, never on parameters
                self._adj = (self.A * self.maskf.unsqueeze(2)).mul_(self.maskf.unsqueeze(1))
        return self._adj

    def operator(self, K: int, sum_aggregation: bool) -> Tensor:
        """Stacked propagation matrices P (B, N, N*K) of the layer family, cached per (K, sum)."""
        key = (K, sum_aggregation)
        if key not in self._ops:
            with torch.no_grad():  # depends on the graph only, never on parameters
                self._ops[key] = stacked_operator(self.A, self.maskf, K, sum_aggregation)
        return self._ops[key]


def propagation(A: Tensor, m: Tensor, self_loops: bool) -> tuple[Tensor, Tensor]:
    """GCN operator D^-1/2 (A+I) D^-1/2 (self_loops) or Chebyshev L = -D^-1/2 A D^-1/2 (SPEC §2).

    Both act on the subgraph induced by the node mask `m`; degrees D are computed after
    masking (including the self-loop for the GCN operator). The mask is folded into
    d = m D^-1/2, so L = A * (d d^T) needs two passes over the (B, N, N) tensor, both in the one
    new tensor; the GCN operator's identity term is added on its diagonal alone (the zeros a
    dense I added elsewhere change no bit where A >= 0, as every adjacency here is).
    Shapes: A (B, N, N), float mask m (B, N) -> L (B, N, N), deg (B, N).
    """
    deg = torch.bmm(A, m.unsqueeze(-1)).squeeze(-1) * m  # (B, N) degree inside the subgraph
    if self_loops:
        deg = deg + m
    d = (deg + 1e-5).pow(-0.5) * m  # (B, N), zero on absent nodes
    L = (d.unsqueeze(2) * (d if self_loops else -d).unsqueeze(1)).mul_(A)  # (B, N, N) A * d d^T
    if self_loops:
        L.diagonal(dim1=-2, dim2=-1).add_(d * d)
    return L, deg


def chebyshev_basis(L: Tensor, x: Tensor, K: int) -> list[Tensor]:
    """Chebyshev terms T_0 = X, T_1 = L X, T_k = 2 L T_(k-1) - T_(k-2) (Defferrard et al., 2016).

    With x = I this gives the polynomial matrices T_k(L) themselves.
    """
    terms = [x]
    if K > 1:
        terms.append(torch.bmm(L, x))
    for _ in range(2, K):
        terms.append(torch.bmm(L, terms[-1]).mul_(2).sub_(terms[-2]))  # no temporaries
    return terms


def stacked_operator(A: Tensor, m: Tensor, K: int, sum_aggregation: bool) -> Tensor:
    """P with P[b, i, k*N + j] = (deg_i if sum and k >= 1) * T_k(L)[b, i, j] (SPEC §2).

    K = 1: the single term is the GCN operator (times degree for SUM aggregation).
    K > 1: Chebyshev terms of L = -D^-1/2 A D^-1/2; T_0 = I keeps the node's own
    features unscaled, orders >= 1 are multiplied by the degree for SUM.
    A layer then computes sum_k T_k X W_k as one matmul: bmm(P, Y) with
    Y (B, K*N, H) holding X W_k in rows k*N .. k*N + N - 1.
    Memory, in (B, N, N) units besides A (`ablate.trial.footprint.operator_units`): K = 1 makes
    P in place (1); K > 1 holds L, T_0 and the terms of orders >= 1 while they are made (K + 1),
    then only those K - 1 terms and P (2K - 1).
    Shapes: A (B, N, N), m (B, N) -> (B, N, K*N).
    """
    if K == 1:
        L, deg = propagation(A, m, self_loops=True)
        return (L.mul_(deg.unsqueeze(-1)) if sum_aggregation else L)
    L, deg = propagation(A, m, self_loops=False)
    higher = chebyshev_basis(L, torch.diag_embed(m), K)[1:]  # T_k(L), k >= 1
    del L  # T_0 = I on present nodes went with the list: P's first block is written directly
    N = m.shape[-1]
    P = higher[0].new_empty(*higher[0].shape[:-1], K * N)
    eye = P[..., :N]
    eye.zero_()
    eye.diagonal(dim1=-2, dim2=-1).copy_(m)
    for k, t in enumerate(higher, 1):
        if sum_aggregation:
            t.mul_(deg.unsqueeze(-1))  # orders >= 1 times degree
        P[..., k * N:(k + 1) * N] = t
    return P


class GraphLayer(nn.Module):
    r"""One layer of the family: GCN / GIN / ChebyNet / ChebyGIN (Knyazev et al., 2019, Eq. 1).

    .. math::
        K = 1:\; H = D^{-1/2}(A+I)D^{-1/2} X \;(\times\, \mathrm{deg} \text{ if sum})
        K > 1:\; H = [T_0, T_1 \cdot \mathrm{deg}, \dots, T_{K-1} \cdot \mathrm{deg}]
        \text{out} = \mathrm{ReLU}(\mathrm{MLP}(H)) \odot \text{mask}

    Args:
        in_channels: input features C.
        out_channels: output features F.
        K: number of scales (1 = GCN-style propagation).
        aggregation: "mean" (normalised) or "sum" (terms of order >= 1 times degree).
        hidden: width of the hidden MLP layer (0 = a single Linear).
        activation: apply the final ReLU (False for a score-producing last layer).

    Shapes: x (B, N, C), graph with (B, N, N) -> (B, N, F).
    """

    def __init__(self, in_channels: int, out_channels: int, K: int = 1,
                 aggregation: str = "mean", hidden: int = 0, activation: bool = True):
        super().__init__()
        self.K, self.aggregation, self.activation = K, aggregation, activation
        width = K * in_channels
        if hidden > 0:
            self.mlp = nn.Sequential(nn.Linear(width, hidden), nn.ReLU(),
                                     nn.Linear(hidden, out_channels))
        else:
            self.mlp = nn.Sequential(nn.Linear(width, out_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                m.reset_parameters()

    def forward(self, x: Tensor, graph: Graph) -> Tensor:
        B, N, C = x.shape
        lin = self.mlp[0]  # Linear(K*C, H): block k of its weight acts on the term T_k X
        H = lin.out_features
        P = graph.operator(self.K, self.aggregation == "sum")  # (B, N, K*N)
        if C <= H:  # propagate the narrower input first: [T_0 X .. T_K-1 X] W^T, no copies
            z = torch.bmm(P.reshape(B, N * self.K, N), x)  # (B, N*K, C), rows i*K + k
            h = lin(z.reshape(B, N, self.K * C))  # (B, N, H) = sum_k T_k X W_k + b
        else:  # project first: one GEMM for every term, then one propagation
            w = lin.weight.view(H, self.K, C).permute(2, 1, 0).reshape(C, self.K * H)  # [W_0 ..]
            y = (x @ w).view(B, N, self.K, H)  # (B, N, K, H)
            y = y.transpose(1, 2).reshape(B, self.K * N, H)  # (B, K*N, H), rows k*N + j
            h = torch.baddbmm(lin.bias.view(1, 1, H), P, y)  # (B, N, H) = sum_k T_k X W_k + b
        for m in self.mlp[1:]:
            h = m(h)
        if not torch.is_grad_enabled():  # evaluation: h is this layer's own, update it in place
            if self.activation:
                h.relu_()
            return h.mul_(graph.maskf.unsqueeze(-1))
        if self.activation:
            h = torch.relu(h)
        return h * graph.maskf.unsqueeze(-1)
