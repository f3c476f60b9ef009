"""Leave-one-node-out outputs for all members of a pack at once.

`leave_one_out_members(stack, alive, batch)` gives, for every member i in `alive`, what
`ablate.trial.weak.leave_one_out_batch(stack.materialise(i), batch)` gives, |y(G - i) - y(G)|
per node, computed for the members together:

- **local path** (`supports_local_loo(stack.base)`: global pool, K <= 2, sum/mean readout):
  the index structures of `ablate.trial.local_loo` (breadth-first distances, (copy, node)
  pairs, edge lists, CSR operators) depend only on the graphs, so they are built once per
  chunk of graphs (`loo_structure`) and the numeric part runs with the members side by side
  (`loo_numeric`: one sparse matmul and one batched GEMM per step for all members). Host
  syncs come from the structure only and do not grow with the number of members.
- **dense path** (any other model): the N masked copies of each graph are built once per
  chunk of graphs and run through `torch.func.functional_call` of `stack.base`, `vmap`-ed
  over the members' parameters; the graph operators of the copies are shared by the members
  (they depend on the graph only). Chunks are sized for the members as well as the copies.

How many members run side by side is a memory budget (`local_loo.member_budget`): on CUDA
all of them (one kernel per step for the pack); on CPU about a cache's worth, usually one
member at a time, since members side by side spill the cache and cost more than they save.
The structures, the copies and the copies' graph operators are still shared there.

`leave_one_out_attention_members` mirrors `weak.leave_one_out_attention` for every member
(weak supervision of a pack: model B of every member). Every tensor is created on the
batch's device; results stay there until the one transfer of the attention helper.
Both paths evaluate `stack.base` in eval mode (its mode is restored afterwards).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch.func import functional_call, vmap

from ablate.data.graphs import GraphSet
from ablate.models.backbones import is_dense
from ablate.models.layers import Graph
from ablate.trial.batches import DenseBatch, eval_batches
from ablate.trial.local_loo import loo_outputs_members, member_budget, supports_local_loo
from ablate.trial.members import MemberStack
from ablate.trial.weak import CHUNK_ENTRIES, output_scores, removal_copies, weak_attention


def _alive(stack: MemberStack, alive: list[int]) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Stacked parameters and hyperparameters of the members `alive`, in that order (S_alive, ...)."""
    dev = next(iter(stack.params.values())).device
    idx = torch.tensor(alive, dtype=torch.long, device=dev)
    return ({k: v.index_select(0, idx) for k, v in stack.params.items()},
            {k: v.index_select(0, idx) for k, v in stack.hyper.items()})


def leave_one_out_members(stack: MemberStack, alive: list[int], batch: DenseBatch,
                          target: str = "logit", chunk_entries: int = CHUNK_ENTRIES,
                          member_entries: int | None = None) -> Tensor:
    """|y(G - i) - y(G)| for every node of every graph, for each member in `alive`.

    Equals `leave_one_out_batch(stack.materialise(i), batch, target=target)` per member
    (float rounding aside). `target`: "logit" (raw output at the predicted class) or "prob".
    `chunk_entries` bounds the dense path's chunks of graphs (adjacency and operator entries
    of the copies); `member_entries` the activations of the members run together
    (`ablate.trial.local_loo.member_budget`: all members on CUDA, about one at a time on CPU).
    Shapes: batch (B, N, ...) -> (len(alive), B, N), zero on padding.
    """
    base = stack.base
    was_training = base.training
    base.eval()
    try:
        with torch.no_grad():
            params, hyper = _alive(stack, alive)
            if supports_local_loo(base):
                return _local(stack, params, batch, target, member_entries)
            return _dense(stack, params, hyper, batch, target, chunk_entries, member_entries)
    finally:
        base.train(was_training)


def _local(stack: MemberStack, params: dict[str, Tensor], batch: DenseBatch, target: str,
           member_entries: int | None) -> Tensor:
    """Incremental path (`ablate.trial.local_loo`) for all members. -> (S, B, N)."""
    regression = stack.regression
    full, loo = loo_outputs_members(stack.base, params, batch,  # (S, B, O), (S, B, N, O)
                                    member_entries=member_entries)
    if regression:
        full, loo = full.squeeze(-1), loo.squeeze(-1)  # (S, B), (S, B, N)
    y_full, cls = output_scores(full, regression, None, target)  # (S, B)
    y_loo, _ = output_scores(loo, regression, cls.unsqueeze(-1).expand(loo.shape[:3]), target)
    diff = (y_loo - y_full.unsqueeze(-1)).abs()
    return diff * batch.mask.to(diff.dtype)


def _dense(stack: MemberStack, params: dict[str, Tensor], hyper: dict[str, Tensor],
           batch: DenseBatch, target: str, chunk_entries: int,
           member_entries: int | None) -> Tensor:
    """N masked copies of every graph, the members vmapped. -> (S, B, N)."""
    base, regression = stack.base, stack.regression
    cfg = base.cfg
    B, N, C = batch.x.shape
    S = len(params["head.bias"])
    dev = batch.x.device
    width = max(C, *cfg.filters, cfg.hidden or 0)  # widest activation per node

    def run(ms: slice, x: Tensor, graph: Graph) -> Tensor:
        """Outputs of members `ms` on x with `graph` (shared): (s, rows) or (s, rows, O)."""
        def fwd(p: dict[str, Tensor], h: dict[str, Tensor], x: Tensor) -> Tensor:
            return functional_call(base, p, (x, graph), {"hyper": h}).out

        if ms.stop - ms.start == 1:  # one member (CPU): the plain forward, fused GEMMs
            j = ms.start
            return fwd({k: v[j] for k, v in params.items()}, {k: v[j] for k, v in hyper.items()},
                       x).unsqueeze(0)
        return vmap(fwd, in_dims=(0, 0, None))({k: v[ms] for k, v in params.items()},
                                               {k: v[ms] for k, v in hyper.items()}, x)

    def shared_graph(A: Tensor, mask: Tensor) -> Graph:
        """The copies' graph with its operator made once, outside vmap, for every member."""
        graph = Graph(A, mask)
        if cfg.filters and is_dense(cfg.backbone):  # a dense layer reads the adjacency only
            graph.adjacency()
        elif cfg.filters:
            graph.operator(cfg.K, cfg.aggregation == "sum")
        return graph

    # graphs per chunk: the copies' adjacency and operators plus one member's activations;
    # members per chunk: what `member_budget` allows (all on CUDA, about one on CPU)
    per_graph = max(1, chunk_entries // max(1, N ** 3 * (cfg.K + 1) + N * N * width))
    budget = member_budget(dev, member_entries)
    per_member = max(1, min(S, budget // max(1, min(B, per_graph) * N * N * width)))
    member_chunks = [slice(s, min(S, s + per_member)) for s in range(0, S, per_member)]
    graph = shared_graph(batch.A, batch.mask)
    full_out = torch.cat([run(ms, batch.x, graph) for ms in member_chunks])
    y_full, cls = output_scores(full_out, regression, None, target)  # (S, B)
    diff = torch.zeros(S, B, N, dtype=batch.x.dtype, device=dev)
    for s in range(0, B, per_graph):
        sl = slice(s, min(B, s + per_graph))
        b = sl.stop - sl.start
        x, A, mask = removal_copies(batch, sl)
        graph = shared_graph(A, mask)
        for ms in member_chunks:
            out = run(ms, x, graph)  # (s, b*N) or (s, b*N, O)
            y_loo, _ = output_scores(out, regression, cls[ms, sl].repeat_interleave(N, dim=1), target)
            diff[ms, sl] = (y_loo.view(-1, b, N) - y_full[ms, sl].unsqueeze(-1)).abs()
    return diff * batch.mask.to(diff.dtype)


@torch.no_grad()
def leave_one_out_attention_members(stack: MemberStack, alive: list[int], gs: GraphSet,
                                    device: torch.device, batch_size: int = 100,
                                    target: str = "logit", floor: float = 0.0,
                                    chunk_entries: int = CHUNK_ENTRIES,
                                    member_entries: int | None = None) -> np.ndarray:
    """alpha_WS of every member in `alive` for every node of `gs`: (len(alive), total nodes).

    Row j equals `weak.leave_one_out_attention(stack.materialise(alive[j]), gs, device,
    batch_size, target, floor)` (flat GraphSet node order). Results gather on the device and
    come to the host once. `chunk_entries`, `member_entries`: as `leave_one_out_members`.
    """
    out = torch.zeros(len(alive), len(gs.x), dtype=torch.float32, device=device)
    num_nodes = np.diff(gs.node_ptr)
    for ids, batch in eval_batches(gs, batch_size, device):
        diff = leave_one_out_members(stack, alive, batch, target, chunk_entries,
                                     member_entries)  # (S, B, N)
        alpha = weak_attention(diff, batch.mask, floor)
        n = num_nodes[ids]
        rows = np.repeat(np.arange(len(ids)), n)
        local = np.arange(len(rows)) - np.repeat(np.cumsum(n) - n, n)
        src = torch.from_numpy(rows * batch.mask.shape[1] + local).to(device)
        dst = torch.from_numpy(gs.node_ptr[ids][rows] + local).to(device)
        out.index_copy_(1, dst, alpha.reshape(len(alive), -1).index_select(1, src).to(out.dtype))
    return out.cpu().numpy()
