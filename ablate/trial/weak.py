"""Leave-one-node-out attention: weak supervision and the attention of global-pool models.

`weak_targets` is the seed-by-seed driver: it trains model B (`ablate.config.model_b_config`,
seed s + `MODEL_B_SEED`) and sets the train split's attention targets to its alpha_WS. A pack
(`ablate.trial.packed`) trains the model B of all its members as one pack instead, computes
every member's alpha_WS together and gives each member its own targets
(`TrainBatches.set_member_gt`): the same numbers as `weak_targets` seed by seed.

Knyazev et al. (2019, §3.2): train model B with global pooling, then
alpha_WS_i is proportional to |y(G without node i) - y(G)| on the predicted
class, y being the raw output (logit) there as in the reference code
(`weak_target=prob` uses the softmax probability instead). All N node removals
of a graph run as one batch: copy (b, i) is graph
b under a mask without node i, which is exactly the induced subgraph G - i.
Global-pool models without pooling, K <= 2 and a sum/mean readout take the exact
incremental path of `ablate.trial.local_loo` instead (only rows near i are recomputed).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ablate.config import TU_DATASETS, TrialConfig, model_b_config
from ablate.data import is_open
from ablate.data.graphs import GraphSet
from ablate.models.layers import Graph
from ablate.trial.batches import SIZE_BREAK, DenseBatch, TrainBatches, eval_batches, release_free_heap
from ablate.trial.fit import fit
from ablate.trial.local_loo import loo_outputs, supports_local_loo
from ablate.trial.setup import seeded_model

MODEL_B_SEED = 7919  # model B of seed s trains from seed s + MODEL_B_SEED
# Leave-one-out attention for evaluation stops here: graphs above this size get none (their
# N removal copies cost ~N^3 each; `ablate.trial.evaluate.loo_plan`). COLORS' largest are 200.
LOO_MAX_NODES = SIZE_BREAK
CHUNK_ENTRIES = 16_000_000  # dense path: entries (copies' adjacency, operators, activations) per chunk


def output_scores(out: Tensor, regression: bool, cls: Tensor | None,
            target: str = "logit") -> tuple[Tensor, Tensor]:
    """Model output on the predicted class: (value, predicted class) per graph.

    `target="logit"` takes the raw output at the predicted class, as the reference code
    does; "prob" takes its softmax probability. Regression has a single output.
    """
    if regression:
        return out, torch.zeros_like(out, dtype=torch.long)
    if cls is None:
        cls = out.argmax(-1)
    value = torch.softmax(out, -1) if target == "prob" else out
    return value.gather(-1, cls.unsqueeze(-1)).squeeze(-1), cls


def leave_one_out_batch(model, batch: DenseBatch, chunk_entries: int = CHUNK_ENTRIES,
                        target: str = "logit") -> Tensor:
    """|y(G - i) - y(G)| for every node i of every graph, batched. (B, N) -> (B, N), 0 on padding.

    Uses the incremental `ablate.trial.local_loo` when `supports_local_loo(model)`, else the dense
    path (`leave_one_out_dense`, whose chunks hold at most `chunk_entries` adjacency entries).
    """
    if supports_local_loo(model):
        return leave_one_out_local(model, batch, target)
    return leave_one_out_dense(model, batch, chunk_entries, target)


def leave_one_out_local(model, batch: DenseBatch, target: str = "logit") -> Tensor:
    """`leave_one_out_batch` by incremental recomputation (`ablate.trial.local_loo`). (B, N) -> (B, N)."""
    B, N = batch.mask.shape
    regression = getattr(model, "regression", True)
    out, loo = loo_outputs(model, batch)  # (B, O), (B, N, O)
    if regression:
        out, loo = out.squeeze(-1), loo.squeeze(-1)
    full, cls = output_scores(out, regression, None, target)  # (B,)
    y_loo, _ = output_scores(loo.reshape(B * N, *loo.shape[2:]), regression, cls.repeat_interleave(N),
                       target)
    diff = (y_loo.view(B, N) - full.unsqueeze(1)).abs()
    return diff * batch.mask.to(diff.dtype)


def leave_one_out_dense(model, batch: DenseBatch, chunk_entries: int = CHUNK_ENTRIES,
                        target: str = "logit") -> Tensor:
    """|y(G - i) - y(G)| from N masked copies of every graph run through the dense model.

    Any model; cost ~ N^3 per graph. Shapes: (B, N) -> (B, N), 0 on padding.
    """
    B, N, C = batch.x.shape
    regression = getattr(model, "regression", True)
    out = model(batch.x, Graph(batch.A, batch.mask)).out  # its operators go with it
    full, cls = output_scores(out, regression, None, target)  # (B,)
    diff = torch.zeros(B, N, dtype=batch.x.dtype, device=batch.x.device)
    per_graph = max(1, chunk_entries // copies_entries(model, N, C))  # graphs per chunk
    for s in range(0, B, per_graph):
        sl = slice(s, min(B, s + per_graph))
        b = sl.stop - sl.start
        x, A, mask = removal_copies(batch, sl)
        out = model(x, Graph(A, mask)).out
        y_loo, _ = output_scores(out, regression, cls[sl].repeat_interleave(N), target)
        diff[sl] = (y_loo.view(b, N) - full[sl].unsqueeze(1)).abs()
    return diff * batch.mask.to(diff.dtype)


def copies_entries(model, N: int, C: int) -> int:
    """Entries the N removal copies of one graph hold in a forward: their adjacency and stacked
    operators (N^3 (K + 1)) and their widest activations (N^2 x width), as
    `ablate.trial.pack_loo` counts them; a chunk holds `chunk_entries` of them."""
    cfg = getattr(model, "cfg", None)
    K = getattr(cfg, "K", 1) or 1
    width = max([C, *getattr(cfg, "filters", ()), getattr(cfg, "hidden", 0) or 0])
    return max(1, N ** 3 * (K + 1) + N * N * width)


def removal_copies(batch: DenseBatch, sl: slice) -> tuple[Tensor, Tensor, Tensor]:
    """Graphs `sl` of `batch` as N copies each, copy (b, i) without node i (its induced
    subgraph G - i): x (b*N, N, C) zero on the removed node, A (b*N, N, N), mask (b*N, N)."""
    _, N, C = batch.x.shape
    b = len(range(*sl.indices(len(batch))))
    eye = torch.eye(N, dtype=torch.bool, device=batch.x.device)
    mask = (batch.mask[sl].unsqueeze(1) & ~eye).reshape(b * N, N)
    x = batch.x[sl].unsqueeze(1).expand(b, N, N, C).reshape(b * N, N, C)
    A = batch.A[sl].unsqueeze(1).expand(b, N, N, N).reshape(b * N, N, N)
    return x * mask.unsqueeze(-1).to(x.dtype), A, mask


def weak_attention(diff: Tensor, mask: Tensor, floor: float = 0.0) -> Tensor:
    """alpha_WS: normalise |y(G-i) - y(G)| per graph; with `floor` > 0 zero values below it and
    renormalise (SPEC §2; the reference floors at 1e-3 on TU datasets only)."""
    m = mask.to(diff.dtype)
    d = diff * m
    alpha = d / d.sum(-1, keepdim=True).clamp(min=1e-12)
    if floor <= 0:
        return alpha
    alpha = torch.where(alpha < floor, torch.zeros_like(alpha), alpha)
    return alpha / alpha.sum(-1, keepdim=True).clamp(min=1e-12)


@torch.no_grad()
def leave_one_out_attention(model, gs: GraphSet, device: torch.device,
                            batch_size: int = 100, target: str = "logit",
                            floor: float = 0.0) -> np.ndarray:
    """alpha_WS for every node of `gs` (flat, GraphSet node order)."""
    model.eval()
    out = np.zeros(gs.total_nodes, dtype=np.float32)
    for ids, batch in eval_batches(gs, batch_size, device):
        diff = leave_one_out_batch(model, batch, target=target)
        alpha = weak_attention(diff, batch.mask, floor).cpu().numpy()
        for row, g in enumerate(ids):
            n0, n1 = gs.node_ptr[g], gs.node_ptr[g + 1]
            out[n0:n1] = alpha[row, : n1 - n0]
    return out


def weak_floor(cfg: TrialConfig) -> float:
    """alpha_WS values below this are zeroed (the reference floors at 1e-3 on TU only)."""
    return 1e-3 if cfg.dataset in TU_DATASETS or is_open(cfg.dataset) else 0.0


def weak_targets(cfg: TrialConfig, splits: dict[str, GraphSet], train: TrainBatches,
                  seed: int, device: torch.device, in_ch: int, out_ch: int) -> None:
    """Train model B (global pooling) and set the train split's targets to its alpha_WS."""
    cfg_b = model_b_config(cfg)
    model_b = seeded_model(cfg_b, seed + MODEL_B_SEED, in_ch, out_ch, device)
    fit(model_b, cfg_b, train, seed + MODEL_B_SEED)
    alpha_ws = leave_one_out_attention(model_b, splits["train"], device, cfg.test_batch_size,
                                       cfg.weak_target, weak_floor(cfg))
    train.set_gt(alpha_ws)
    release_free_heap()  # model B and its leave-one-out chunks are gone: so are their pages

