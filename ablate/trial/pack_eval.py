"""Evaluation of a pack of members on the device: the record of `summarize` for all S at once.

`ablate.trial.evaluate.summarize` scores one model on the host. Here the outputs of one
vmapped forward per evaluation batch, (S, B, ...) for the S members of a pack, are scored
with tensor operations on the device: per batch a row of sums per member (loss, correct
predictions overall and per graph-size bin, FT hits, GT-mass counts per threshold, ratio
kept per pooling layer) is added to an (S, K) float64 accumulator, and the scored nodes of
every attention layer are kept on the device (`LayerAttention`) for the attention AUC,
which pools the nodes of all batches. Shapes stay static (masks, no boolean indexing), so
nothing waits for the device until the end: one transfer of an (S, K) tensor per
evaluation builds the host records, with the fields, values (to float rounding) and Python
types of `summarize`.

`pool_test_auc_pack` is `ablate.trial.evaluate.pool_test_auc` for a pack: the AUC over the
nodes of several test splits of each member together, from the `LayerAttention` that the
evaluations of those splits returned, again with one transfer.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from ablate.trial.batches import DenseBatch
from ablate.trial.evaluate import POOLED_AUC_SPLITS, SIZE_BINS
from ablate.trial.metrics import MASS_THRESHOLDS

PackPool = tuple[Tensor, Tensor, Tensor, Tensor]  # alpha, gt, mask_before, mask_after: (S, B, N)
LooAlpha = Callable[[DenseBatch], Tensor]  # batch -> leave-one-out attention (S, B, N)
FIELDS = ("all", "curve")  # every record field, or what a validation curve reads
CURVE_KEYS = ("accuracy", "loss", "n_graphs", "attn_auc_l0")  # the fields of fields="curve"


@dataclass
class LayerAttention:
    """The nodes one attention layer scored over an evaluation, per member, on the device.

    Columns are nodes of the padded batches, one after another; `valid` marks the nodes
    scored (the layer's `mask_before`, which may differ per member), `pos` those with gt > 0.
    """

    alpha: Tensor  # (S, T) attention
    pos: Tensor  # (S, T) bool, gt > 0
    valid: Tensor  # (S, T) bool, node scored

    @staticmethod
    def cat(parts: Sequence[LayerAttention]) -> LayerAttention:
        """The nodes of several evaluations together (columns concatenated)."""
        if len(parts) == 1:
            return parts[0]
        return LayerAttention(*(torch.cat([getattr(p, k) for p in parts], 1)
                                for k in ("alpha", "pos", "valid")))


@dataclass
class PackResult:
    """One evaluation of a pack: host records (one per member, `summarize`'s fields without
    the private ``_attention``) and per attention layer the device-side scored nodes (None
    where the layer scored nothing: a global-pool model without leave-one-out attention)."""

    records: list[dict]
    attention: list[LayerAttention | None]

    def __len__(self) -> int:  # a sequence of the records, as `evaluate_members` returned before
        return len(self.records)

    def __iter__(self) -> Iterator[dict]:
        return iter(self.records)

    def __getitem__(self, i: int) -> dict:
        return self.records[i]


def attention_auc_pack(alpha: Tensor, pos: Tensor, valid: Tensor) -> Tensor:
    """`ablate.trial.metrics.attention_auc` of every row: (S, T) -> (S,) float64.

    Mann-Whitney: every valid positive counts the valid negatives scored below it plus half
    those tied with it; NaN for a row whose valid nodes are all of one class. One sort per
    row (invalid nodes last, as +inf), then per tie group of equal scores the negatives
    before it and up to its end (running counts read at the group's first and last place).
    """
    S, T = alpha.shape
    neg = valid & ~pos
    p = valid & pos
    key = torch.where(valid, alpha, torch.full_like(alpha, math.inf))
    v, order = key.sort(-1)
    p_s, neg_s = p.gather(-1, order), neg.gather(-1, order)
    upto = neg_s.cumsum(-1)  # (S, T) negatives at or before each place
    at = torch.arange(T, device=alpha.device).expand(S, T)
    first = torch.ones_like(p_s)  # a tie group starts here
    first[:, 1:] = v[:, 1:] != v[:, :-1]
    last = torch.ones_like(p_s)  # a tie group ends here
    last[:, :-1] = first[:, 1:]
    start = torch.where(first, at, torch.zeros_like(at)).cummax(-1).values
    end = torch.where(last, at, torch.full_like(at, T - 1)).flip(-1).cummin(-1).values.flip(-1)
    below = (upto - neg_s.long()).gather(-1, start)  # negatives scored lower than the group
    tied_or_below = upto.gather(-1, end)
    u = torch.where(p_s, (below + tied_or_below).double() * 0.5,
                    torch.zeros(S, T, dtype=torch.float64, device=alpha.device)).sum(-1)
    n_pos, n_neg = p.sum(-1), neg.sum(-1)
    return torch.where((n_pos > 0) & (n_neg > 0), u / (n_pos * n_neg).clamp(min=1).double(),
                       torch.full_like(u, math.nan))


def to_device(values: Sequence[float], device: torch.device, dtype: torch.dtype | None = None
              ) -> Tensor:
    """`values` as a tensor on `device`, copied without waiting for the device (a blocking
    host-to-device copy synchronises the stream); made once per process, device and dtype."""
    return _to_device(tuple(values), torch.device(device), dtype)


@functools.cache
def _to_device(values: tuple, device: torch.device, dtype: torch.dtype | None) -> Tensor:
    return torch.tensor(values, dtype=dtype, device="cpu").to(device, non_blocking=True)


class _Columns:
    """Column layout of the per-member accumulator (S, K)."""

    def __init__(self, n_pools: int, scored: bool, full: bool):
        self.n_bins = len(SIZE_BINS) - 1
        self.n_mass = len(MASS_THRESHOLDS)
        k = 2  # loss sum, correct predictions
        if full:
            self.bin_correct, k = k, k + self.n_bins
            self.bin_count, k = k, k + self.n_bins
            if scored:  # FT hits, FT graphs, graphs with GT, GT-mass counts per threshold
                self.ft, k = k, k + 3 + self.n_mass
            self.ratio, k = k, k + n_pools
        self.width = k


def _focus_and_mass(a: Tensor, g: Tensor, m: Tensor, thresholds: Tensor) -> Tensor:
    """FT hits, FT graphs, graphs with any gt > 0 and per threshold the graphs among them whose
    GT nodes hold mass >= t, per member: (S, B, N) -> (S, 3 + T) (`metrics.focus_true`,
    `metrics.gt_mass`, `metrics.mass_curve`)."""
    g_pos = g > 0
    has_gt = (g_pos & m).any(-1)  # (S, B) FT counts graphs with a valid GT node
    top = torch.where(m, a, torch.full_like(a, -math.inf)).argmax(-1, keepdim=True)
    hit = g_pos.gather(-1, top).squeeze(-1) & has_gt
    has = g_pos.any(-1)  # (S, B) the mass curve counts graphs with any GT node
    mass = (a * (g_pos & m).to(a.dtype)).sum(-1)  # (S, B)
    above = (mass.unsqueeze(-1) >= thresholds) & has.unsqueeze(-1)  # (S, B, T)
    return torch.cat([torch.stack([hit.sum(-1), has_gt.sum(-1), has.sum(-1)], -1),
                      above.sum(1)], -1).double()


def summarize_pack(outputs: Iterable[tuple[DenseBatch, Tensor, Sequence[PackPool]]], n_pools: int,
                   regression: bool, loo_alpha: LooAlpha | None = None,
                   fields: str = "all") -> PackResult:
    """`summarize` of every member from (batch, out (S, B, ...), pools) per evaluation batch.

    `pools` holds per pooling layer (alpha, gt, mask_before, mask_after), each (S, B, N);
    `loo_alpha(batch)` gives the leave-one-out attention (S, B, N) of global-pool models (None
    for a batch it leaves out), or
    None. fields="curve" computes only `CURVE_KEYS` (validation curves). Everything stays on
    the device until one transfer at the end.
    """
    if fields not in FIELDS:
        raise ValueError(f"unknown fields {fields!r}; valid choices: {', '.join(FIELDS)}")
    full = fields == "all"
    scored = bool(n_pools) or loo_alpha is not None
    cols = _Columns(n_pools, scored, full)
    n_layers = max(n_pools, 1) if full else 1
    acc: Tensor | None = None
    buffers: list[list[tuple[Tensor, Tensor, Tensor]]] = [[] for _ in range(n_layers)]
    n = 0
    for b, out, pools in outputs:
        S, B = out.shape[0], out.shape[1]
        n += B
        dev = out.device
        y = b.y.to(dev)
        if regression:
            loss = F.mse_loss(out, y.to(out.dtype).expand(S, B), reduction="none").mean(-1)
            pred = torch.round(out)
        else:
            loss = F.cross_entropy(out.reshape(S * B, -1), y.expand(S, B).reshape(-1),
                                   reduction="none").view(S, B).mean(-1)
            pred = out.argmax(-1)
        correct = pred.double() == y.double()  # (S, B)
        parts = [loss.double().unsqueeze(-1) * B, correct.sum(-1, keepdim=True).double()]
        if n_pools:
            layers = [(a, g, mb) for a, g, mb, _ in pools]
        elif loo_alpha is not None and (a := loo_alpha(b)) is not None:
            layers = [(a, b.gt.expand_as(a), b.mask.expand_as(a))]
        else:  # no attention, or a batch leave-one-out leaves out (large graphs)
            layers = []
        if full:
            size = b.n_nodes.to(dev).unsqueeze(-1)  # (B, 1)
            bins = to_device(SIZE_BINS, dev)
            in_bin = (size >= bins[:-1]) & (size < bins[1:])  # (B, bins)
            parts.append((correct.unsqueeze(-1) & in_bin).sum(1).double())
            parts.append(in_bin.sum(0).double().expand(S, -1))
            if layers:
                a, g, m = layers[0]
                parts.append(_focus_and_mass(a, g, m, to_device(MASS_THRESHOLDS, dev, a.dtype)))
            elif scored:  # its graphs count for no FT or mass
                parts.append(torch.zeros(S, 3 + cols.n_mass, dtype=torch.float64, device=dev))
            for _, _, mb, ma in pools:
                ratio = ma.sum(-1).double() / mb.sum(-1).clamp(min=1).double()  # (S, B)
                parts.append(ratio.sum(-1, keepdim=True))
        row = torch.cat(parts, -1)
        acc = row if acc is None else acc + row
        for layer, (a, g, m) in enumerate(layers[:n_layers]):
            buffers[layer].append((a.reshape(S, -1), (g > 0).reshape(S, -1), m.reshape(S, -1)))
        del b, out, pools, layers  # the next batch's forward must not find this one's adjacency
    attention = [LayerAttention(*(torch.cat(t, 1) for t in zip(*buf))) if buf else None
                 for buf in buffers]
    if acc is None:
        raise ValueError("summarize_pack: no evaluation batches")
    aucs = [attention_auc_pack(la.alpha, la.pos, la.valid) if la is not None
            else torch.full_like(acc[:, 0], math.nan) for la in attention]
    rows = torch.cat([acc, torch.stack(aucs, -1)], -1).tolist()  # the evaluation's one transfer
    return PackResult([_record(r, cols, n, n_pools, scored, full) for r in rows], attention)


def _record(row: list[float], cols: _Columns, n: int, n_pools: int, scored: bool,
            full: bool) -> dict:
    """A member's record from its accumulated row (sums, then one AUC per layer)."""
    aucs = row[cols.width:]
    rec = {"accuracy": int(row[1]) / n, "loss": row[0] / n, "n_graphs": n}
    if not full:
        rec["attn_auc_l0"] = aucs[0]
        return rec
    curve: list[dict] | None = None  # no graph with ground truth: null, as `evaluate`
    if scored:
        f = cols.ft
        hit, total, n_has = (int(v) for v in row[f:f + 3])
        rec["ft"] = hit / total if total else math.nan
        if n_has:
            counts = row[f + 3:f + 3 + cols.n_mass]
            curve = [{"t": t, "fraction": int(c) / n_has} for t, c in zip(MASS_THRESHOLDS, counts)]
    else:
        rec["ft"] = math.nan
    sizes = []  # the store's list of structs, as `evaluate.by_size`
    for k, (lo, hi) in enumerate(zip(SIZE_BINS[:-1], SIZE_BINS[1:])):
        count = int(row[cols.bin_count + k])
        if count:
            sizes.append({"lo": lo, "hi": hi - 1, "accuracy": int(row[cols.bin_correct + k]) / count,
                          "graphs": count})
    rec["acc_by_size"] = sizes
    rec["gt_mass_curve"] = curve
    for layer, auc in enumerate(aucs):
        rec[f"attn_auc_l{layer}"] = auc
    for layer in range(n_pools):
        rec[f"ratio_kept_l{layer}"] = row[cols.ratio + layer] / n
    return rec


def pooled_auc_pack(parts: Sequence[PackResult]) -> list[dict[str, float]]:
    """``attn_auc_pooled_l{k}`` of every member over the nodes of several evaluations of the
    same members together: NaN for a layer that one of them did not score, as `pool_test_auc`.
    One dict per member (none when `parts` is empty); one transfer."""
    if not parts:
        return []
    S = len(parts[0].records)
    n_layers = max(len(p.attention) for p in parts)
    aucs: list[Tensor | None] = []
    for layer in range(n_layers):
        got = [p.attention[layer] for p in parts
               if layer < len(p.attention) and p.attention[layer] is not None]
        if got and len(got) == len(parts):
            la = LayerAttention.cat(got)
            aucs.append(attention_auc_pack(la.alpha, la.pos, la.valid))
        else:
            aucs.append(None)
    known = [a for a in aucs if a is not None]
    if not known:
        return [{f"attn_auc_pooled_l{k}": math.nan for k in range(n_layers)} for _ in range(S)]
    nan = torch.full_like(known[0], math.nan)
    rows = torch.stack([nan if a is None else a for a in aucs], -1).tolist()  # one transfer
    return [{f"attn_auc_pooled_l{k}": v for k, v in enumerate(r)} for r in rows]


def pool_test_auc_pack(results: Mapping[str, PackResult], dataset: str) -> list[dict[str, float]]:
    """`pool_test_auc` for a pack: per member ``attn_auc_pooled_l{k}`` over the test splits the
    papers pool for `dataset` (`POOLED_AUC_SPLITS`), from the evaluation of each split.
    An empty list when none of those splits was evaluated (`pool_test_auc` adds no key)."""
    splits = pooled_splits(dataset)
    return pooled_auc_pack([res for split, res in results.items() if split in splits])


def pooled_splits(dataset: str) -> tuple[str, ...]:
    """The test splits whose nodes `pool_test_auc` pools for `dataset`."""
    return POOLED_AUC_SPLITS.get(dataset, ("test_orig",))
