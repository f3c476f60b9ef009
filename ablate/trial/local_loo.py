"""Exact incremental leave-one-node-out for global-pool GraphNets (no pooling, K <= 2).

Removing node i changes layer l only on the rows S_l = {j != i : dist(i, j) <= l + 1}
(`ablate.trial.loo_structure` says why); every other row of G - i equals the full graph's.

`loo_outputs` runs the full graph once per chunk of graphs (sparse, keeping every layer's
activations), then for each copy c = (graph b, removed node i) recomputes only the rows of
S_l(c): pairs (copy, node) found by a breadth-first search and sorted by distance (so S_l
is a prefix of the pair list for every layer), their (pair, neighbour) edges from the
adjacency, all as index tensors; each layer's neighbour term is one sparse CSR matmul on
its input rows (propagate first, then the layer's Linear on the terms [T_0 X, T_1 X]).
Rows at distance l + 1 >= 3 of layer l keep their operator row, so they are
z_full + (sum over neighbours m at distance l of P[j, m] (X_new[m] - X_full[m])) W_(K-1).
The readout (sum or mean) and the linear head are applied as full sum - h_i - old rows of
S_L + new rows, projected on the head first.
Graphs are processed in chunks to bound memory; no Python loop per node or graph.
Results equal the dense path (`ablate.trial.weak.leave_one_out_dense`) up to float rounding.

Structure and numerics are separate modules: `ablate.trial.loo_structure` builds the index
structures of a chunk (they depend on the graphs and the model's depth, K and aggregation,
never on the weights; all the host syncs are there) and `loo_numeric` here runs any number S
of parameter sets on them,
activations laid out (rows, S, F) so that one sparse matmul serves every member and the
Linear layers are batched GEMMs. `loo_outputs_members` does this for a pack's stacked
parameters (`ablate.trial.pack_loo`); `loo_outputs` is the case S = 1.
The adjacency must be symmetric (as everywhere in the package).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ablate.models.network import GraphNet
from ablate.trial.batches import DenseBatch
from ablate.trial.loo_structure import (  # noqa: F401  (supports_local_loo: imported from here)
    LooStructure,
    loo_structure,
    rows_at,
    supports_local_loo,
)

# activation entries of the members run at once: on CUDA as many as fit (1 GB float32, one
# kernel per step for all); on CPU about a cache's worth, since members side by side spill
# the cache and cost more than they save (measured: one or two members at a time is fastest)
MEMBER_ENTRIES = {"cuda": 256_000_000, "cpu": 8_000_000}


def member_budget(device: torch.device, entries: int | None = None) -> int:
    """Activation entries of the members run together on `device` (`entries` if given)."""
    if entries is not None:
        return entries
    return MEMBER_ENTRIES["cpu" if device.type == "cpu" else "cuda"]


def _lin(terms: list[tuple[Tensor, int]], w: Tensor, bias: Tensor | None, out: Tensor) -> None:
    """out = bias + sum over (T, k) of T W_k^T for every member, in place (out += ... without bias).

    T (R, C) shared by the members or (R, S, C); w (S, H, K * C), the first Linear of a layer
    (block k of its input acts on term k); bias (S, H); out (R, S, H), a contiguous block.
    """
    R, S, H = out.shape
    C = terms[0][0].shape[-1]
    K = w.shape[2] // C
    for i, (t, k) in enumerate(terms):
        wk = w.view(S, H, K, C)[:, :, k]  # (S, H, C)
        add = bias if i == 0 else None
        if t.dim() == 2:  # shared input: one GEMM, the members side by side in the columns
            wk = wk.permute(2, 0, 1).reshape(C, S * H)
            o = out.view(R, S * H)
            if add is None:
                o.addmm_(t, wk)
            else:
                torch.addmm(add.reshape(S * H), t, wk, out=o)
        else:  # batched GEMM over the members, straight into the (R, S, H) layout
            o, t, wk = out.transpose(0, 1), t.transpose(0, 1), wk.transpose(1, 2)
            if add is None:
                o.baddbmm_(t, wk)
            else:
                torch.baddbmm(add.unsqueeze(1), t, wk, out=o)


def _linear(h: Tensor, w: Tensor, bias: Tensor | None = None) -> Tensor:
    """Per-member linear map: h (R, S, I), w (S, O, I), bias (S, O) -> (R, S, O) contiguous."""
    R, S, _ = h.shape
    out = h.new_empty(R, S, w.shape[1])
    if bias is None:
        torch.bmm(h.transpose(0, 1), w.transpose(1, 2), out=out.transpose(0, 1))
    else:
        torch.baddbmm(bias.unsqueeze(1), h.transpose(0, 1), w.transpose(1, 2), out=out.transpose(0, 1))
    return out


def _col(v: Tensor, like: Tensor) -> Tensor:
    """(R,) -> broadcastable against `like` (R, ...)."""
    return v.view(-1, *[1] * (like.dim() - 1))


def loo_numeric(st: LooStructure, model: GraphNet, params: dict[str, Tensor],
                x: Tensor) -> tuple[Tensor, Tensor]:
    """Head outputs of the full graphs and of every removal, for S parameter sets at once.

    `params`: `model`'s parameters by name, stacked (S, ...) (`torch.func.stack_module_state`
    order; `model` only gives the layout). Each layer propagates its input first (sparse
    operators on rows of width S * C; at layer 1 the input is shared, so once for all
    members), then applies its first Linear as batched GEMMs written in place. Rows are
    (rows, S, F), members side by side: the full graph's V rows, then the changed rows
    (V + pair) of every copy. x (b, N, C) -> full (S, b, O), loo (S, b, N, O).
    """
    K, b, N = st.K, st.b, st.N
    V = b * N
    S = params["head.bias"].shape[0]
    dev, dt = x.device, x.dtype
    X = x.reshape(V, -1)  # layer input: full rows, then rows of S_(l-1); (rows, C) shared at layer 1
    for li, (layer, ls) in enumerate(zip(model.layers, st.layers)):
        pre = f"layers.{li}.mlp."
        w0, b0 = params[pre + "0.weight"], params[pre + "0.bias"]  # (S, H, K * C), (S, H)
        n_prev, n_in, n_cur = ls.n_prev, ls.n_in, ls.n_cur
        feat = X.shape[1:]  # (C,) shared or (S, C)
        Xf = X.view(V + n_prev, -1)
        z = torch.empty(V + n_cur, S, w0.shape[1], dtype=dt, device=dev)  # pre-activations
        # full graph: terms [X, T_(K-1) X] (K = 2) or the GCN operator's own + neighbour term
        nb = (st.op_full @ Xf[:V]).view(V, *feat)
        if K == 1:
            _lin([(torch.addcmul(nb, X[:V], _col(st.own_f, nb)), 0)], w0, b0, z[:V])
        else:
            _lin([(X[:V], 0), (nb, K - 1)], w0, b0, z[:V])
        # changed rows whose own row or operator row changed, or that read changed rows:
        # own term from the new rows (layer 1: the full rows), neighbour term by one sparse matmul
        own_in = X[V:] if n_in == n_prev else torch.cat([X[V:], rows_at(X, st.pg[n_prev:n_in])])
        nb = (ls.op @ Xf).view(n_in, *feat)
        if K == 1:
            _lin([(torch.addcmul(nb, own_in, _col(st.own[:n_in], nb)), 0)], w0, b0, z[V:V + n_in])
        else:
            _lin([(own_in, 0), (nb, K - 1)], w0, b0, z[V:V + n_in])
        if ls.outer is not None:
            # outer shell: z = z_full + (sum_m P[j, m] (X_new[m] - X_full[m])) W_(K-1) over
            # neighbours m at dist l (the operator row of a node at dist >= 3 is unchanged)
            lo, hi, op_outer = ls.outer
            dx = X[V + lo: V + hi] - rows_at(X, st.pg[lo:hi])
            agg = (op_outer @ dx.view(hi - lo, -1)).view(n_cur - n_in, *feat)
            torch.index_select(z[:V], 0, st.pg[n_in:n_cur], out=z[V + n_in:])
            _lin([(agg, K - 1)], w0, None, z[V + n_in:])
        for j, mod in enumerate(layer.mlp[1:], 1):  # full and changed rows together
            if isinstance(mod, torch.nn.Linear):
                z = _linear(z, params[f"{pre}{j}.weight"], params[f"{pre}{j}.bias"])
            elif isinstance(mod, torch.nn.ReLU):
                z = z.relu_()
            else:
                z = mod(z)
        X = z.relu_()  # (V + n_cur, S, F_l)
        X[:V].mul_(st.maskf)  # full rows: zero on padding
    # head(readout(.)), the head being linear: project rows first, then add up
    wh, bh = params["head.weight"], params["head.bias"]  # (S, O, F), (S, O)
    O = wh.shape[1]
    q_all = _linear(X, wh)  # (V + P, S, O)
    q_full = q_all[:V]
    tot = q_full.view(b, N, S, O).sum(1)  # (b, S, O)
    removed = st.cb * N + st.ci  # chunk id of each copy's removed node
    q = rows_at(tot, st.cb) - rows_at(q_full, removed)  # (nc, S, O)
    n_new = len(q_all) - V
    q.index_add_(0, st.pc[:n_new], q_all[V:] - rows_at(q_full, st.pg[:n_new]))
    if st.mean_readout:
        q = q / (rows_at(st.n, st.cb) - 1).clamp(min=1)[:, None, None]
        tot = tot / st.n.clamp(min=1)[:, None, None]
    res = q.new_zeros(V, S, O)
    res.index_copy_(0, removed, q + bh)
    return (tot + bh).permute(1, 0, 2), res.view(b, N, S, O).permute(2, 0, 1, 3)


def _chunk(model: GraphNet, x: Tensor, A: Tensor, mask: Tensor, params: dict[str, Tensor],
           member_entries: int | None = None) -> tuple[Tensor, Tensor]:
    """Head outputs of the full graphs and of every removal, for a chunk of graphs.

    The structure is built once; the members run `member_budget(device, member_entries) //
    (entries per member)` at a time (all of them on CUDA, one or two on CPU).
    x (b, N, C), A (b, N, N), mask (b, N) -> full (S, b, O), loo (S, b, N, O).
    """
    st = loo_structure(model, A, mask)
    S = params["head.bias"].shape[0]
    width = max(max(v.shape[1] for k, v in params.items() if k.endswith("weight")), x.shape[-1])
    budget = member_budget(x.device, member_entries)
    per = max(1, budget // max(1, st.rows * (st.K + 2) * width))
    if per >= S:
        return loo_numeric(st, model, params, x)
    outs = [loo_numeric(st, model, {k: v[s:s + per] for k, v in params.items()}, x)
            for s in range(0, S, per)]
    return torch.cat([o[0] for o in outs]), torch.cat([o[1] for o in outs])


@torch.no_grad()
def loo_outputs_members(model: GraphNet, params: dict[str, Tensor], batch: DenseBatch,
                        chunk_nodes: int = 2048,
                        member_entries: int | None = None) -> tuple[Tensor, Tensor]:
    """`loo_outputs` for S parameter sets of `model`'s architecture at once.

    params: name -> (S, ...) as `torch.func.stack_module_state` gives them (a
    `MemberStack`'s `params`); `model` gives the layout only. The index structures are built
    once per chunk of graphs for all members; `member_entries` overrides `member_budget`.
    Shapes: batch (B, N, ...) -> full (S, B, O), loo (S, B, N, O).
    """
    B, N, _ = batch.x.shape
    S, O = params["head.bias"].shape
    full = batch.x.new_zeros(S, B, O)
    loo = batch.x.new_zeros(S, B, N, O)
    n_nodes = batch.mask.sum(1).tolist()  # (one host sync)
    per = max(1, chunk_nodes // max(1, N))
    for s in range(0, B, per):
        e = min(B, s + per)
        n = int(max(n_nodes[s:e]))
        if n == 0:
            full[:, s:e] = params["head.bias"][:, None]
            continue
        full[:, s:e], loo[:, s:e, :n] = _chunk(model, batch.x[s:e, :n], batch.A[s:e, :n, :n],
                                               batch.mask[s:e, :n], params, member_entries)
    return full, loo


@torch.no_grad()
def loo_outputs(model: GraphNet, batch: DenseBatch,
                chunk_nodes: int = 2048) -> tuple[Tensor, Tensor]:
    """Head outputs on every graph G and on every G - i, by incremental recomputation.

    Requires `supports_local_loo(model)` and a symmetric adjacency. `chunk_nodes` bounds
    the removed nodes (copies) handled at once. Shapes: batch (B, N, ...) -> full (B, O),
    loo (B, N, O) with loo[b, i] the output on G_b - i (zero on padding); O = head outputs.
    """
    params = {k: p.detach().unsqueeze(0) for k, p in model.named_parameters()}
    full, loo = loo_outputs_members(model, params, batch, chunk_nodes)
    return full[0], loo[0]
