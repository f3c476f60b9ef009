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
        self._ops: dict[bool, tuple[Tensor, Tensor]] = {}

    def with_mask(self, mask: Tensor) -> Graph:
        """The induced subgraph on the nodes of `mask` (same storage, new operators)."""
        return Graph(self.A, mask)

    def operator(self, self_loops: bool) -> tuple[Tensor, Tensor]:
        """(L, deg): the normalised operator of the induced subgraph and node degrees."""
        if self_loops not in self._ops:
            self._ops[self_loops] = propagation(self.A, self.maskf, self_loops)
        return self._ops[self_loops]


def propagation(A: Tensor, m: Tensor, self_loops: bool) -> tuple[Tensor, Tensor]:
    """GCN operator D^-1/2 (A+I) D^-1/2 (self_loops) or Chebyshev L = -D^-1/2 A D^-1/2 (SPEC §2).

    Both act on the subgraph induced by the node mask `m`; degrees D are computed after
    masking (including the self-loop for the GCN operator).
    Shapes: A (B, N, N), float mask m (B, N) -> L (B, N, N), deg (B, N).
    """
    Am = A * m.unsqueeze(1) * m.unsqueeze(2)  # (B, N, N) edges of the induced subgraph
    if self_loops:
        Am = Am + torch.diag_embed(m)
    deg = Am.sum(-1)  # (B, N)
    d = (deg + 1e-5).pow(-0.5) * m
    L = d.unsqueeze(2) * Am * d.unsqueeze(1)
    return (L if self_loops else -L), deg


def chebyshev_basis(L: Tensor, x: Tensor, K: int) -> list[Tensor]:
    """Chebyshev terms T_0 = X, T_1 = L X, T_k = 2 L T_(k-1) - T_(k-2) (Defferrard et al., 2016)."""
    terms = [x]
    if K > 1:
        terms.append(torch.bmm(L, x))
    for _ in range(2, K):
        terms.append(2 * torch.bmm(L, terms[-1]) - terms[-2])
    return terms


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
        dropout: dropout on the layer input.
        activation: apply the final ReLU (False for a score-producing last layer).

    Shapes: x (B, N, C), graph with (B, N, N) -> (B, N, F).
    """

    def __init__(self, in_channels: int, out_channels: int, K: int = 1,
                 aggregation: str = "mean", hidden: int = 0, dropout: float = 0.0,
                 activation: bool = True):
        super().__init__()
        self.K, self.aggregation, self.activation = K, aggregation, activation
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
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
        x = self.dropout(x)
        L, deg = graph.operator(self_loops=self.K == 1)
        if self.K == 1:
            terms = [torch.bmm(L, x)]  # (B, N, C)
            if self.aggregation == "sum":
                terms[0] = terms[0] * deg.unsqueeze(-1)
        else:
            terms = chebyshev_basis(L, x, self.K)  # K x (B, N, C)
            if self.aggregation == "sum":
                d = deg.unsqueeze(-1)
                terms = [terms[0]] + [t * d for t in terms[1:]]  # keep T_0 (self) unscaled
        h = self.mlp(torch.cat(terms, dim=-1))  # (B, N, F)
        if self.activation:
            h = torch.relu(h)
        return h * graph.maskf.unsqueeze(-1)
