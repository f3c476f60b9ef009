"""GraphNet: stacked layers of the family with attention pooling placed before any layer.

Follows the networks of Knyazev et al. (2019) and their public code (SPEC §2):
graph layers (the paper's family, or a dense layer of PyG's or the user's:
`ablate.models.backbones`), pooling blocks before chosen layers (index = number of layers
means after the last), a readout over the surviving nodes (sum, mean or max)
and a linear head (1 output for counting regression, else one per class).
`forward` reads top to bottom; it returns the prediction and what every
pooling layer did, for the KL term and the attention metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from ablate.models.backbones import DenseLayer, is_dense
from ablate.models.dropout import CounterDropout
from ablate.models.layers import Graph, GraphLayer
from ablate.models.pooling import AttentionPool, GaoTopKPool, PoolResult
from ablate.models.readout import readout

if TYPE_CHECKING:  # models take the config they are given; they do not import the config layer
    from ablate.config import TrialConfig


@dataclass
class NetOutput:
    out: Tensor  # (B,) regression output or (B, classes) logits
    pools: list[PoolResult] = field(default_factory=list)  # one per pooling layer, in order
    graph: Graph | None = None  # the final induced graph (node mask after every pooling)

    @property
    def reg(self) -> Tensor | float:
        """Sum of the attention KL terms (0 when unsupervised)."""
        terms = [p.kl for p in self.pools if p.kl is not None]
        return torch.stack(terms).sum() if terms else 0.0


class GraphNet(nn.Module):
    """Layers of the family with attention pooling, readout and head, built from a TrialConfig.

    Args:
        cfg: a resolved `TrialConfig` (see `ablate.config.resolve`).
        in_channels: node feature size C.
        out_channels: 1 for counting regression, else the number of classes.

    Shapes: x (B, N, C), graph (B, N, N) -> NetOutput.out (B,) or (B, out_channels).
    """

    def __init__(self, cfg: TrialConfig, in_channels: int, out_channels: int):
        super().__init__()
        self.cfg = cfg
        widths = [in_channels, *cfg.filters]
        self.layers = nn.ModuleList(  # the paper's family, or a dense layer (x, adj, mask)
            DenseLayer(cfg.backbone, widths[i], widths[i + 1], cfg.hidden)
            if is_dense(cfg.backbone)
            else GraphLayer(widths[i], widths[i + 1], cfg.K, cfg.aggregation, cfg.hidden)
            for i in range(len(cfg.filters)))
        self.pools = nn.ModuleDict()
        for layer in cfg.pool_layers:
            # scorer sees the previous layer's input ('prev') or the current features ('curr')
            c_score = widths[layer - 1] if cfg.scorer_input == "prev" else widths[layer]
            if cfg.selection == "gao":
                self.pools[str(layer)] = GaoTopKPool(widths[layer], cfg.ratio, cfg.init_dist,
                                                     cfg.init_scale)
            else:
                self.pools[str(layer)] = AttentionPool(
                    c_score, cfg.scorer, cfg.normalizer, cfg.selection, cfg.threshold, cfg.ratio,
                    cfg.K, cfg.aggregation, cfg.init_dist, cfg.init_scale,
                    score_relu=cfg.scorer_relu)
        # the reference applies dropout only here, before the final linear layer; its mask is
        # counter-based (seed, step, layer 0), the same for a member alone or in any pack
        self.head_dropout = CounterDropout(cfg.dropout, layer=0) if cfg.dropout > 0 else nn.Identity()
        self.head = nn.Linear(widths[-1], out_channels)
        self.regression = out_channels == 1
        self._relu_readout = (len(self.layers) > 0 and len(self.layers) not in cfg.pool_layers
                              and self.layers[-1].activation)

    def reset_parameters(self) -> None:
        for m in [*self.layers, *self.pools.values(), self.head]:
            m.reset_parameters()

    def forward(self, x: Tensor, graph: Graph, gt: Tensor | None = None,
                hyper: dict[str, Tensor] | None = None) -> NetOutput:
        """`hyper`: optional 0-dim tensors threshold, ratio, kl_weight replacing cfg's values,
        and `dropout_seed` (the member's seed) and `step` (optimisation steps taken, a device
        counter) keying the dropout masks in training (`ablate.models.dropout`; seed 0 and
        step 0 when absent)."""
        cfg = self.cfg
        hyper = hyper or {}
        kl_weight = hyper.get("kl_weight", cfg.kl_weight)
        pool_hyper = hyper if "threshold" in hyper else None  # not only the dropout key
        pools: list[PoolResult] = []
        x_prev = x  # input of the previous layer
        for i in range(len(self.layers) + 1):
            if str(i) in self.pools:
                x_score = x_prev if cfg.scorer_input == "prev" else x
                res = self.pools[str(i)](x, x_score, graph, gt, cfg.supervision, kl_weight,
                                        pool_hyper)
                x, graph = res.x, res.graph  # (B, N, C), nodes of the induced subgraph
                pools.append(res)
            if i == len(self.layers):
                break
            x_prev = x
            x = self.layers[i](x, graph)  # (B, N, F_i)
        # a ReLU layer's masked output (>= 0, 0 on absent nodes) unless pooled after the last
        h = readout(x, graph, cfg.readout, masked_nonneg=self._relu_readout)  # (B, F)
        if self.training and cfg.dropout > 0:
            h = self.head_dropout(h, hyper.get("dropout_seed"), hyper.get("step"))
        out = self.head(h)  # (B, out)
        return NetOutput(out.squeeze(-1) if self.regression else out, pools, graph)

    def first_projection(self) -> Tensor | None:
        """p of the first pooling layer when it is a plain projection, else None."""
        if not self.cfg.pool_layers or self.cfg.scorer != "fc" or self.cfg.selection == "gao":
            return None
        return self.pools[str(min(self.cfg.pool_layers))].p.detach().reshape(-1).clone()
