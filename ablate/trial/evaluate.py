"""Evaluating one graph model on a split: the record of metrics the result store keeps.

Accuracy, loss, attention AUC and ratio kept per pooling layer, FT, accuracy by graph
size and the GT-mass curve; global-pool models are scored by their leave-one-node-out
attention (`ablate.trial.weak`). `pool_test_auc` adds the AUC over all test graphs of a
seed together, as the papers report it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch

from ablate.config import TrialConfig
from ablate.data.graphs import GraphSet
from ablate.models.layers import Graph
from ablate.models.network import GraphNet, NetOutput
from ablate.trial import metrics
from ablate.trial.batches import DenseBatch, each_batch
from ablate.trial.fit import task_loss
from ablate.trial.weak import LOO_MAX_NODES, leave_one_out_batch, weak_attention, weak_floor

SIZE_BINS = (1, 26, 51, 101, 201, 501, 10**9)  # graph size bins [lo, hi) for accuracy by N


def loo_plan(cfg: TrialConfig, split: str, gs: GraphSet) -> tuple[bool, str]:
    """Whether `split`'s attention is scored by leave-one-out, and the record's note.

    Leave-one-out attention only serves the attention AUC, so it runs only for a global-pool
    model (`loo_auc`) on a test split that has ground-truth attention (TU data have none:
    their AUC is NaN without it). Graphs above `LOO_MAX_NODES` nodes are left out of it (the
    dense path costs ~N^3 per graph: hours and hundreds of GB for D&D's 5,748-node graph);
    the note says how many, and the AUC and FT are over the other graphs.
    """
    if not cfg.loo_auc or cfg.pool_layers or split == "val" or not (gs.gt > 0).any():
        return False, ""
    big = int((gs.num_nodes > LOO_MAX_NODES).sum())
    note = (f"leave-one-out attention not computed for {big} of {len(gs)} graphs above "
            f"{LOO_MAX_NODES} nodes: attn_auc and ft over the others") if big else ""
    return True, note


def loo_batch(batch) -> bool:
    """Whether leave-one-out attention is computed for an evaluation batch (its graphs are all
    at most `LOO_MAX_NODES` nodes; batches never mix sizes on both sides of it)."""
    return batch.x.shape[1] <= LOO_MAX_NODES  # padded to its largest graph: no device read


@torch.no_grad()
def evaluate(model: GraphNet, batches, cfg: TrialConfig, loo: bool = False) -> dict:
    """Accuracy, loss, attention AUC / ratio kept per pooling layer, FT, by-size accuracy.
    `loo`: leave-one-out attention of a global-pool model (`loo_plan`), per `loo_batch`."""
    model.eval()

    def forward_each() -> Iterator[tuple[DenseBatch, NetOutput]]:
        for b in each_batch(batches):
            o = model(b.x, Graph(b.A, b.mask), b.gt)
            yield b, o
            del b, o  # before the next batch is read (`summarize` lets go of its own)

    def loo_alpha(b):
        if not loo_batch(b):
            return None
        diff = leave_one_out_batch(model, b, target=cfg.weak_target)
        return weak_attention(diff, b.mask, weak_floor(cfg))

    return summarize(forward_each(), cfg, model.regression, loo_alpha if loo else None)


def summarize(outputs, cfg: TrialConfig, regression: bool, loo_alpha=None) -> dict:
    """The record of `evaluate` from (DenseBatch, NetOutput) pairs of one model over a split.

    `loo_alpha(batch)` gives leave-one-out attention (models without pooling; None for a
    batch it leaves out), or is None.
    The record's private key ``_attention`` holds per pooling layer the (alpha, gt) of every
    node scored, for `pool_test_auc`, which removes it.
    """
    n_pools = len(cfg.pool_layers)
    preds, ys, sizes, losses = [], [], [], []
    alphas = [[] for _ in range(max(n_pools, 1))]
    gts = [[] for _ in range(max(n_pools, 1))]
    kept = [[] for _ in range(n_pools)]
    ft_hit = ft_total = 0
    masses = []
    for b, o in outputs:
        losses.append(float(task_loss(o.out, b.y, regression)) * len(b))
        preds.append(metrics.predictions(o.out, regression).cpu())
        ys.append(b.y.cpu())
        sizes.append(b.n_nodes.cpu())
        if n_pools:
            pools = [(p.alpha, p.gt, p.mask_before, p.graph.mask) for p in o.pools]  # no graphs
            firsts = [q[:3] for q in pools]
            for layer, (alpha, gt, m, after) in enumerate(pools):
                alphas[layer].append(alpha[m].cpu())
                gts[layer].append(gt[m].cpu())
                kept[layer].append(torch.from_numpy(metrics.ratio_kept(m, after)))
        elif loo_alpha is not None and (alpha := loo_alpha(b)) is not None:
            firsts = [(alpha, b.gt, b.mask)]
            alphas[0].append(alpha[b.mask].cpu())
            gts[0].append(b.gt[b.mask].cpu())
        else:
            firsts = []
        if firsts:
            a, g, m = firsts[0]
            hit, tot = metrics.focus_true(a, g, m)
            ft_hit, ft_total = ft_hit + hit, ft_total + tot
            has = (g > 0).any(-1).cpu().numpy()
            masses.append(metrics.gt_mass(a, g, m)[has])
        del b, o  # the next batch's forward must not find this one's adjacency and operators
    pred, y, size = torch.cat(preds), torch.cat(ys), torch.cat(sizes).numpy()
    correct = (pred.double() == y.double()).numpy()
    rec = {
        "accuracy": float(correct.mean()),
        "loss": sum(losses) / len(y),
        "n_graphs": len(y),
        "ft": ft_hit / ft_total if ft_total else math.nan,
        "acc_by_size": by_size(correct, size),
        "gt_mass_curve": (metrics.mass_curve(np.concatenate(masses))
                          if masses and sum(len(m) for m in masses) else None),
    }
    for layer in range(max(n_pools, 1)):
        has_alpha = bool(alphas[layer])
        rec[f"attn_auc_l{layer}"] = (metrics.attention_auc(torch.cat(alphas[layer]),
                                                           torch.cat(gts[layer]))
                                     if has_alpha else math.nan)
    for layer in range(n_pools):
        rec[f"ratio_kept_l{layer}"] = float(torch.cat(kept[layer]).mean())
    rec["_attention"] = [(torch.cat(a), torch.cat(g)) if a else None for a, g in zip(alphas, gts)]
    return rec


# test splits whose nodes the papers pool into one attention AUC (Knyazev et al.'s logs)
POOLED_AUC_SPLITS = {"colors": ("test_orig", "test_large", "test_largec"),
                     "triangles": ("test_orig", "test_large")}


def pool_test_auc(records: list[dict], dataset: str) -> None:
    """Add ``attn_auc_pooled_l{k}`` to every record of one seed: the AUC over the nodes of all
    its test graphs together, as the papers report it (COLORS ORIG + LARGE + LARGEC, TRIANGLES
    ORIG + LARGE, else TEST-ORIG); drop the private ``_attention`` arrays."""
    splits = POOLED_AUC_SPLITS.get(dataset, ("test_orig",))
    parts = [r["_attention"] for r in records if r.get("split") in splits and "_attention" in r]
    n_layers = max((len(p) for p in parts), default=0)
    pooled = {}
    for layer in range(n_layers):
        got = [p[layer] for p in parts if p[layer] is not None]
        pooled[f"attn_auc_pooled_l{layer}"] = (
            metrics.attention_auc(torch.cat([a for a, _ in got]), torch.cat([g for _, g in got]))
            if got and len(got) == len(parts) else math.nan)
    for r in records:
        r.pop("_attention", None)
        r.update(pooled)


def by_size(correct: np.ndarray, size: np.ndarray) -> list[dict]:
    """{lo, hi (inclusive), accuracy, graphs} for every non-empty graph-size bin (the store's
    `acc_by_size`, a list of structs)."""
    out = []
    for lo, hi in zip(SIZE_BINS[:-1], SIZE_BINS[1:]):
        sel = (size >= lo) & (size < hi)
        if sel.any():
            out.append({"lo": lo, "hi": hi - 1, "accuracy": float(correct[sel].mean()),
                        "graphs": int(sel.sum())})
    return out
