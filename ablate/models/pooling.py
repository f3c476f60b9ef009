"""Attention pooling over nodes (Knyazev et al., 2019, §3; SPEC §2) on dense batches.

`AttentionPool` scores nodes (projection p, p with a hidden layer, or a small
GNN), normalises the scores per graph (softmax / sparsemax / spherical),
reweights features x <- alpha * x, and keeps nodes with alpha > threshold
(Eq. 3) or the top ratio r of them. Pooling is a mask update: the next layers
see the induced subgraph. `GaoTopKPool` wraps PyG's `TopKPooling` (Gao & Ji,
2019: tanh gate, top-k) as its own selection option.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ablate.models.layers import Graph, GraphLayer
from ablate.models.normalizers import normalize


@dataclass
class PoolResult:
    """What one pooling layer did to a batch (alpha and masks are per node, (B, N))."""

    x: Tensor  # (B, N, C) reweighted features
    graph: Graph  # the induced subgraph of the kept nodes
    alpha: Tensor  # (B, N) attention over the nodes present before pooling
    mask_before: Tensor  # (B, N) nodes present before pooling
    gt: Tensor | None  # (B, N) ground truth renormalised over mask_before
    kl: Tensor | None  # scalar weighted KL term (supervised / weakly supervised)


def renormalize_gt(gt: Tensor, mask: Tensor) -> Tensor:
    """Ground truth re-gathered on surviving nodes and renormalised to sum 1 (SPEC §2)."""
    g = gt * mask.to(gt.dtype)
    s = g.sum(-1, keepdim=True)
    return torch.where(s > 0, g / s.clamp(min=1e-12), torch.zeros_like(g))


def kl_attention_loss(alpha: Tensor, gt: Tensor, mask: Tensor, weight: float | Tensor) -> Tensor:
    """weight * mean_graphs KL(alpha_GT || alpha) / N, N = nodes before pooling (SPEC §2)."""
    m = mask.to(alpha.dtype)
    kl = gt * (torch.log(gt + 1e-14) - torch.log(alpha + 1e-14)) * m  # (B, N)
    n = m.sum(-1).clamp(min=1)
    return weight * (kl.sum(-1) / n).mean()


def threshold_keep(alpha: Tensor, mask: Tensor, threshold: float | Tensor) -> Tensor:
    """Nodes kept by Eq. 3 of Knyazev et al.: alpha_i > alpha-tilde."""
    return mask & (alpha > threshold)


def topk_keep(score: Tensor, mask: Tensor, ratio: float | Tensor) -> Tensor:
    """Top-k selection: remove the round(N (1 - ratio)) lowest-scored nodes of each graph,
    keep the rest (as the reference code counts them; round half to even)."""
    n = mask.sum(-1, keepdim=True).to(score.dtype)  # (B, 1)
    k = n - torch.round(n * (1 - ratio))
    s = score.detach().masked_fill(~mask, float("-inf"))
    order = torch.argsort(s, dim=-1, descending=True, stable=True)
    rank = torch.argsort(order, dim=-1, stable=True)  # (B, N) rank of each node
    return mask & (rank < k)


def gnn_scores(h: Tensor, relu: bool) -> Tensor:
    """The GNN scorer's last-layer output as scores, used as they are (`relu=False`, as the
    reference: its attention GNN drops the ReLU of its last layer), or clamped at 0 (`relu`,
    the `scorer_relu` ablation)."""
    return torch.relu(h) if relu else h


def init_projection(weight: Tensor, dist: str, scale: float) -> None:
    """Initialise the attention projection p: N(0,1)*scale, U(-1,1)*scale or framework default."""
    with torch.no_grad():
        if dist == "normal":
            weight.normal_(0.0, 1.0).mul_(scale)
        elif dist == "uniform":
            weight.uniform_(-1.0, 1.0).mul_(scale)


class AttentionPool(nn.Module):
    r"""Node attention pooling with threshold or top-k selection (Knyazev et al., 2019, Eq. 2-3).

    .. math::
        \alpha = \mathrm{normalise}(\mathrm{clamp}(s(X), \pm 60)),\quad
        X \leftarrow \alpha \odot X,\quad \text{keep } i \text{ iff } \alpha_i > \tilde\alpha

    Args:
        in_channels: features seen by the scorer.
        scorer: "fc" (p, Linear(C, 1) without bias), "fc_hidden" (Linear, ReLU, Linear) or
            "gnn" (three layers of the family, filters 32, 32, 1).
        normalizer: "softmax", "sparsemax" or "spherical".
        selection: "threshold" (alpha > threshold) or "topk" (keep ratio of nodes).
        threshold, ratio: selection parameters.
        K, aggregation: layer family settings of a GNN scorer (K capped at 2).
        init_dist, init_scale: initialisation of the first scorer weights (p): for "fc" the
            projection, for "fc_hidden" its first Linear (32, C), as the reference draws
            both N(0, 1) * scale; "default" keeps the framework init.
        clamp: scores are clamped to +-clamp before normalising.
        score_relu: a "gnn" scorer's scores go through a ReLU (`gnn_scores`; not the reference).

    Shapes: x (B, N, C_x), x_score (B, N, C), graph (B, N, N) -> PoolResult.
    """

    def __init__(self, in_channels: int, scorer: str = "fc", normalizer: str = "softmax",
                 selection: str = "threshold", threshold: float = 0.0, ratio: float = 0.5,
                 K: int = 1, aggregation: str = "mean", init_dist: str = "default",
                 init_scale: float = 1.0, clamp: float = 60.0, score_relu: bool = False):
        super().__init__()
        self.scorer_kind, self.normalizer, self.selection = scorer, normalizer, selection
        self.threshold, self.ratio, self.clamp = threshold, ratio, clamp
        self.init_dist, self.init_scale = init_dist, init_scale
        self.score_relu = score_relu and scorer == "gnn"
        if scorer == "fc":
            self.proj = nn.Linear(in_channels, 1, bias=False)
        elif scorer == "fc_hidden":
            self.proj = nn.Sequential(nn.Linear(in_channels, 32), nn.ReLU(), nn.Linear(32, 1))
        elif scorer == "gnn":
            k = min(K, 2)
            self.proj = nn.ModuleList([
                GraphLayer(in_channels, 32, k, aggregation),
                GraphLayer(32, 32, k, aggregation),
                GraphLayer(32, 1, k, aggregation, activation=False),
            ])
        else:
            raise ValueError(f"unknown scorer {scorer!r}; valid choices: fc, fc_hidden, gnn")
        self.reset_parameters()

    @property
    def p(self) -> Tensor:
        """The first scorer weight matrix (the projection p for scorer='fc'), (out, C)."""
        if self.scorer_kind == "fc":
            return self.proj.weight
        if self.scorer_kind == "fc_hidden":
            return self.proj[0].weight
        return self.proj[0].mlp[0].weight

    def reset_parameters(self) -> None:
        for m in self.modules():
            if m is not self and hasattr(m, "reset_parameters"):
                m.reset_parameters()
        init_projection(self.p, self.init_dist, self.init_scale)

    def score(self, x_score: Tensor, graph: Graph) -> Tensor:
        """Unnormalised node scores (B, N)."""
        if self.scorer_kind == "gnn":
            h = x_score
            for layer in self.proj:
                h = layer(h, graph)
            return gnn_scores(h.squeeze(-1), self.score_relu)
        return self.proj(x_score).squeeze(-1)

    def forward(self, x: Tensor, x_score: Tensor, graph: Graph, gt: Tensor | None = None,
                supervision: str = "unsup", kl_weight: float | Tensor = 0.0,
                hyper: dict[str, Tensor] | None = None) -> PoolResult:
        """`hyper` may hold 0-dim tensors `threshold` / `ratio` that replace the module's values.

        (A pack of configurations vmaps one model over members whose threshold, ratio and
        kl_weight differ: `ablate.trial.packed`.)
        """
        mask = graph.mask
        threshold = hyper["threshold"] if hyper else self.threshold
        ratio = hyper["ratio"] if hyper else self.ratio
        gt_l = renormalize_gt(gt, mask) if gt is not None else None
        kl = None
        if supervision == "gt":
            alpha = gt_l  # oracle attention (upper bound)
        else:
            z = torch.clamp(self.score(x_score, graph), -self.clamp, self.clamp)  # (B, N)
            alpha = normalize(z, mask, self.normalizer)  # (B, N)
            if supervision in ("sup", "weak") and gt_l is not None and self.training:
                kl = kl_attention_loss(alpha, gt_l, mask, kl_weight)
        x = x * alpha.unsqueeze(-1)  # (B, N, C)
        if self.selection == "topk":
            keep = topk_keep(alpha, mask, ratio)
        else:
            keep = threshold_keep(alpha, mask, threshold)
        return PoolResult(x, graph.with_mask(keep), alpha, mask, gt_l, kl)


class GaoTopKPool(nn.Module):
    r"""Gao & Ji (2019) top-k pooling through PyG's `TopKPooling`.

    .. math:: y = \tanh(Xp / \lVert p \rVert),\quad X \leftarrow (X \odot y)_{\mathrm{top}\,k}

    The dense batch is flattened to PyG's sparse form, pooled, and scattered
    back as a new node mask. Shapes: x (B, N, C), graph (B, N, N) -> PoolResult.
    """

    def __init__(self, in_channels: int, ratio: float = 0.5, init_dist: str = "default",
                 init_scale: float = 1.0):
        super().__init__()
        from torch_geometric.nn import TopKPooling  # imported on use: PyG is slow to import

        self.pool = TopKPooling(in_channels, ratio=ratio)
        self.init_dist, self.init_scale = init_dist, init_scale
        self.reset_parameters()

    @property
    def p(self) -> Tensor:
        return self.pool.select.weight

    def reset_parameters(self) -> None:
        self.pool.reset_parameters()
        init_projection(self.p, self.init_dist, self.init_scale)

    def forward(self, x: Tensor, x_score: Tensor, graph: Graph, gt: Tensor | None = None,
                supervision: str = "unsup", kl_weight: float | Tensor = 0.0,
                hyper: dict[str, Tensor] | None = None) -> PoolResult:
        B, N, C = x.shape
        mask = graph.mask
        flat = mask.reshape(-1).nonzero().squeeze(1)  # (M,) flat ids of present nodes
        xs = x.reshape(B * N, C)[flat]
        empty = torch.zeros(2, 0, dtype=torch.long, device=x.device)
        x_out, _, _, _, perm, _ = self.pool(xs, empty, batch=flat // N)
        kept = flat[perm]
        new_mask = torch.zeros(B * N, dtype=torch.bool, device=x.device)
        new_mask[kept] = True
        x_new = torch.zeros(B * N, C, dtype=x.dtype, device=x.device).index_put((kept,), x_out)
        w = self.p.reshape(-1)
        alpha = torch.tanh(x @ w / w.norm(p=2)) * mask.to(x.dtype)  # (B, N) gate of every node
        gt_l = renormalize_gt(gt, mask) if gt is not None else None
        return PoolResult(x_new.view(B, N, C), graph.with_mask(new_mask.view(B, N)), alpha,
                          mask, gt_l, None)


def cosine(a: Tensor, b: Tensor) -> float:
    """Cosine similarity of two vectors (e.g. initial p and the optimal p of COLORS), on the CPU."""
    a, b = a.detach().reshape(-1).double().cpu(), b.detach().reshape(-1).double().cpu()
    den = a.norm() * b.norm()
    return float(a @ b / den) if den > 0 else math.nan
