"""Focus-classify model of Pandey, Vashisht & Ramaswamy for selective-dependence classification.

A focus net f (an MLP) scores each of the m segments of a mosaic; a
normaliser turns the scores into attention alpha over the segments; a
classifier g (an MLP) reads the alpha-weighted average, either of the inputs
(`average_at="input"`: g(sum_j alpha_j x_j)) or of the focus net's last hidden
layer (`average_at="hidden"`: g(sum_j alpha_j h_j)). SPEC §1.

Normalisers (`FOCUS_NORMALIZERS`): softmax, softmax_entropy (softmax; the
trainer adds lambda * H(alpha) to the loss), sparsemax, spherical
(z_i^2 / sum z^2) -- all from `ablate.models.normalizers`, shared with graph
attention pooling -- and hard attention: alpha = softmax(scores) is a
distribution over segments; training minimises the expected loss under
sampling one segment, sum_j alpha_j CE(g(x_j), y); at test g reads the
arg-max segment only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ablate.models.normalizers import masked_softmax, normalize

FOCUS_NORMALIZERS = ("softmax", "softmax_entropy", "sparsemax", "spherical", "hard")
AVERAGE_AT = ("input", "hidden")


def mlp(sizes: list[int]) -> nn.Sequential:
    """Linear layers of the given widths with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def attention_entropy(alpha: Tensor) -> Tensor:
    """Mean over mosaics of H(alpha) = -sum_j alpha_j log alpha_j (the entropy regulariser)."""
    return -(alpha * torch.log(alpha.clamp(min=1e-12))).sum(-1).mean()


@dataclass
class FocusOutput:
    """What one forward pass produced for a batch of B mosaics of m segments."""

    logits: Tensor  # (B, k) class scores used for prediction
    alpha: Tensor  # (B, m) attention over segments (hard: the sampling distribution)
    scores: Tensor  # (B, m) raw focus scores f(x_j)
    seg_logits: Tensor | None  # (B, m, k) g on every single segment (hard attention only)


class FocusClassify(nn.Module):
    """Focus net f, normaliser, classifier g on the alpha-weighted average (Pandey et al.).

    Args:
        d: dimension of one segment.
        n_classes: number of labels k.
        focus_hidden: hidden widths of f (() = linear focus net f(x) = w.x + b).
        classify_hidden: hidden widths of g (() = linear classifier).
        normalizer: one of FOCUS_NORMALIZERS.
        average_at: "input" (average x_j) or "hidden" (average f's last hidden layer h_j).

    Shapes:
        x (B, m, d) -> FocusOutput(logits (B, k), alpha (B, m), scores (B, m)).
    """

    def __init__(self, d: int, n_classes: int, focus_hidden: tuple[int, ...] = (),
                 classify_hidden: tuple[int, ...] = (), normalizer: str = "softmax",
                 average_at: str = "input") -> None:
        super().__init__()
        if normalizer not in FOCUS_NORMALIZERS:
            raise ValueError(f"unknown normalizer {normalizer!r}; valid choices: "
                             f"{', '.join(FOCUS_NORMALIZERS)}")
        if average_at not in AVERAGE_AT:
            raise ValueError(f"unknown average_at {average_at!r}; valid choices: "
                             f"{', '.join(AVERAGE_AT)}")
        if average_at == "hidden" and not focus_hidden:
            raise ValueError("average_at='hidden' needs a focus net with a hidden layer")
        self.normalizer = normalizer
        self.average_at = average_at
        widths = [d, *focus_hidden]
        self.focus_body = nn.Sequential(mlp(widths), nn.ReLU()) if focus_hidden \
            else nn.Identity()  # x -> h, the focus net's last hidden layer
        self.focus_head = nn.Linear(widths[-1], 1)  # h -> score
        g_in = widths[-1] if average_at == "hidden" else d
        self.classifier = mlp([g_in, *classify_hidden, n_classes])

    def reset_parameters(self) -> None:
        for mod in self.modules():
            if isinstance(mod, nn.Linear):
                mod.reset_parameters()

    def forward(self, x: Tensor) -> FocusOutput:
        B, m, _ = x.shape
        h = self.focus_body(x)  # (B, m, H) last hidden layer (H = d for a linear f)
        scores = self.focus_head(h).squeeze(-1)  # (B, m)
        mask = torch.ones(B, m, dtype=torch.bool, device=x.device)
        feats = h if self.average_at == "hidden" else x  # (B, m, C) what g reads
        if self.normalizer == "hard":
            alpha = masked_softmax(scores, mask)  # (B, m) distribution to sample from
            if self.training:
                seg_logits = self.classifier(feats)  # (B, m, k) g on every segment
                logits = (alpha.unsqueeze(-1) * seg_logits).sum(1)  # (B, k) reporting only
                return FocusOutput(logits, alpha, scores, seg_logits)
            pick = alpha.argmax(-1)  # (B,) the attended segment
            chosen = feats[torch.arange(B, device=x.device), pick]  # (B, C)
            return FocusOutput(self.classifier(chosen), alpha, scores, None)
        kind = "softmax" if self.normalizer == "softmax_entropy" else self.normalizer
        alpha = normalize(scores, mask, kind)  # (B, m)
        avg = (alpha.unsqueeze(-1) * feats).sum(1)  # (B, C)
        return FocusOutput(self.classifier(avg), alpha, scores, None)

    def loss(self, out: FocusOutput, y: Tensor, entropy_lambda: float = 0.0) -> Tensor:
        """Training loss: CE (hard: sum_j alpha_j CE(g(x_j), y)) + lambda H(alpha) for softmax_entropy."""
        if out.seg_logits is not None:
            B, m, k = out.seg_logits.shape
            ce = F.cross_entropy(out.seg_logits.reshape(B * m, k), y.repeat_interleave(m),
                                 reduction="none").view(B, m)  # (B, m) per-segment loss
            loss = (out.alpha * ce).sum(-1).mean()  # expected loss under sampling
        else:
            loss = F.cross_entropy(out.logits, y)
        if self.normalizer == "softmax_entropy" and entropy_lambda:
            loss = loss + entropy_lambda * attention_entropy(out.alpha)
        return loss
