"""Graph readout over the present nodes: sum, mean or max (SPEC §2).

The readout of a ReLU layer's output needs no masking: such an input is >= 0 on present
nodes and exactly 0 on absent ones, so its sum over all nodes is the sum over the present
nodes and its maximum over all nodes the maximum over the present nodes (0 for a graph
left empty, as the masked form gives). `max_nonneg`
computes it with `amax` and a lean backward: the same gradient as `amax` (split evenly
between tied maxima), without the masked copy of the (B, N, C) input and the float copies
of the tie mask that `masked_fill` + `amax` make in training. At a tie of 0 the two forms
send the gradient to different zero entries, which the ReLU (and the mask) below give no
gradient, so the parameters' gradients are the same.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ablate.models.layers import Graph


class _NonnegMax(torch.autograd.Function):
    """amax over dim 1 of x (B, N, C) -> (B, C); gradient split evenly between tied maxima."""

    generate_vmap_rule = True  # composes with torch.func.vmap (the packed members)

    @staticmethod
    def forward(x: Tensor) -> Tensor:
        return x.amax(1)

    @staticmethod
    def setup_context(ctx, inputs: tuple[Tensor], output: Tensor) -> None:
        ctx.save_for_backward(inputs[0], output)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        x, out = ctx.saved_tensors
        hit = (x == out.unsqueeze(1)).to(grad.dtype)  # (B, N, C) the maxima
        return hit * (grad / hit.sum(1)).unsqueeze(1)


def max_nonneg(x: Tensor) -> Tensor:
    """Max over the nodes (dim 1) of x (B, N, C) that is >= 0 and 0 on absent nodes."""
    return _NonnegMax.apply(x)


def readout(x: Tensor, graph: Graph, kind: str, masked_nonneg: bool = False) -> Tensor:
    """Graph readout over present nodes: sum, mean or max. Shapes: (B, N, C) -> (B, C).

    `masked_nonneg`: x is >= 0 and 0 on the nodes absent from `graph` (a ReLU layer's
    masked output), so no readout needs to mask it again (`max_nonneg` for the max); same
    values, and the same gradients for everything below the ReLU layer's mask.
    """
    m = graph.maskf.unsqueeze(-1)  # (B, N, 1)
    if kind in ("sum", "mean"):
        total = x.sum(1) if masked_nonneg else (x * m).sum(1)
        return total if kind == "sum" else total / m.sum(1).clamp(min=1)
    if masked_nonneg:
        out = max_nonneg(x)
    else:
        out = x.masked_fill(~graph.mask.unsqueeze(-1), float("-inf")).amax(1)
    return torch.where(torch.isfinite(out), out, torch.zeros_like(out))  # graphs left empty
