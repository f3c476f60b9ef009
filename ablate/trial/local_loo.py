"""Exact incremental leave-one-node-out for global-pool GraphNets (no pooling, K <= 2).

Removing node i from a graph changes a layer's propagation operator only near i:
the GCN operator D^-1/2 (A+I) D^-1/2 (K = 1) and the Chebyshev L = -D^-1/2 A D^-1/2
(K = 2, T_0 = I) have row j depending on the degrees of j and of its neighbours, so
row j changes only when dist(i, j) <= 2 (with SUM aggregation the row is also scaled by
deg_j, which changes only for dist 1). Layer 1 therefore changes on
S_1 = {j != i : dist(i, j) <= 2} and layer l, which also reads the changed rows of layer
l - 1 through one hop, on S_l = {j != i : dist(i, j) <= l + 1}. Every other row of G - i
equals the full-graph row exactly.

`loo_outputs` runs the full graph once per chunk of graphs (sparse, keeping every layer's
activations), then for each copy c = (graph b, removed node i) recomputes only the rows of
S_l(c): pairs (copy, node) found by a breadth-first search and sorted by distance (so S_l
is a prefix of the pair list for every layer), their (pair, neighbour) edges from the
adjacency, all as index tensors; each layer's neighbour term is one sparse CSR matmul.
The GEMM X W_k runs only on the new rows of S_(l-1)(c). Rows at distance l + 1 >= 3 of
layer l keep their operator row, so they are z_full + sum over neighbours at distance l of
P[j, m] (Y_new[m] - Y_full[m]). The readout (sum or mean) and the linear head are applied
as full sum - h_i - old rows of S_L + new rows, projected on the head first.
Graphs are processed in chunks to bound memory; no Python loop per node or graph.
Results equal the dense path (`ablate.trial.weak.leave_one_out_dense`) up to float rounding.
The adjacency must be symmetric (as everywhere in the package).
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from ablate.models.layers import GraphLayer
from ablate.models.network import GraphNet
from ablate.trial.batches import DenseBatch

_FAR = 127  # distance code for "not reached" (int8 table)


def supports_local_loo(model: torch.nn.Module) -> bool:
    """True when `loo_outputs` is exact for `model`: a GraphNet without pooling,
    K in (1, 2), sum or mean readout and no active dropout."""
    if not isinstance(model, GraphNet):
        return False
    cfg = model.cfg
    if cfg.pool_layers or cfg.K not in (1, 2) or cfg.readout not in ("sum", "mean"):
        return False
    if cfg.aggregation not in ("mean", "sum") or not 0 < len(model.layers) < _FAR - 1:
        return False
    if model.training and cfg.dropout > 0:
        return False
    return all(isinstance(layer, GraphLayer) and layer.activation and layer.K == cfg.K
               and layer.aggregation == cfg.aggregation for layer in model.layers)


def _at(t: Tensor, idx: Tensor) -> Tensor:
    """t[idx] along dim 0 (index_select: much faster than advanced indexing on CPU)."""
    return t.index_select(0, idx)


def _expand(cnt: Tensor, start: Tensor, nodes: Tensor) -> tuple[Tensor, Tensor]:
    """CSR expansion: for node list `nodes` (P,), (owner index into `nodes`, edge index) per edge.

    cnt, start: (V,) neighbour count and first edge of every node. Edges come grouped by
    owner, in owner order. Shapes: -> (E,), (E,).
    """
    c = _at(cnt, nodes)
    owner = torch.repeat_interleave(torch.arange(len(nodes), device=nodes.device), c)
    shift = _at(start, nodes) - (torch.cumsum(c, 0) - c)  # first edge - first output position
    eidx = torch.arange(len(owner), device=nodes.device) + _at(shift, owner)
    return owner, eidx


@torch.no_grad()
def loo_outputs(model: GraphNet, batch: DenseBatch,
                chunk_nodes: int = 2048) -> tuple[Tensor, Tensor]:
    """Head outputs on every graph G and on every G - i, by incremental recomputation.

    Requires `supports_local_loo(model)` and a symmetric adjacency. `chunk_nodes` bounds
    the removed nodes (copies) handled at once. Shapes: batch (B, N, ...) -> full (B, O),
    loo (B, N, O) with loo[b, i] the output on G_b - i (zero on padding); O = head outputs.
    """
    B, N, _ = batch.x.shape
    O = model.head.out_features
    full = batch.x.new_zeros(B, O)
    loo = batch.x.new_zeros(B, N, O)
    n_nodes = batch.mask.sum(1)
    per = max(1, chunk_nodes // max(1, N))
    for s in range(0, B, per):
        e = min(B, s + per)
        n = int(n_nodes[s:e].max())
        if n == 0:
            full[s:e] = model.head.bias
            continue
        full[s:e], loo[s:e, :n] = _chunk(model, batch.x[s:e, :n], batch.A[s:e, :n, :n],
                                         batch.mask[s:e, :n])
    return full, loo


def _csr(crow: Tensor, col: Tensor, val: Tensor, shape: tuple[int, int]) -> Tensor:
    """Sparse CSR matrix (rows, cols) from row pointers (rows + 1,), columns and values (nnz,)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(crow, col, val, size=shape, check_invariants=False)


def _row_ptr(rows: Tensor, n: int) -> Tensor:
    """CSR row pointers (n + 1,) of entries with sorted row ids `rows` (nnz,)."""
    crow = torch.zeros(n + 1, dtype=torch.long, device=rows.device)
    torch.cumsum(torch.bincount(rows, minlength=n), 0, out=crow[1:])
    return crow


def _weights(val: Tensor, deg_row: Tensor, deg_col: Tensor, K: int, total_sum: bool,
             keep_col: Tensor | None = None) -> Tensor:
    """Operator entries P[j, m] of edges (E,) from A_jm and the degrees of j and m (E,).

    K = 1: A_jm d_j d_m, K = 2: -A_jm d_j d_m, d = (deg + 1e-5)^-1/2 (deg counts the self
    loop for K = 1); times deg_j for SUM aggregation. `keep_col` zeroes removed columns.
    """
    d_col = (deg_col + 1e-5).pow(-0.5)
    if keep_col is not None:
        d_col = d_col * keep_col
    w = val * ((deg_row + 1e-5).pow(-0.5) * (d_col if K == 1 else -d_col))
    return w * deg_row if total_sum else w


def _chunk(model: GraphNet, x: Tensor, A: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Head outputs of the full graphs and of every removal, for a chunk of graphs.

    x (b, N, C), A (b, N, N), mask (b, N) -> full (b, O), loo (b, N, O).
    """
    cfg = model.cfg
    K, total_sum = cfg.K, cfg.aggregation == "sum"
    L = len(model.layers)
    b, N = mask.shape
    dev, dt = A.device, A.dtype
    V = b * N  # chunk node ids g = graph * N + node
    maskf = mask.reshape(V, 1).to(dt)
    # neighbour lists (CSR, sorted by g) and the full graph's operator
    eb, ej, em = A.nonzero(as_tuple=True)
    row, col = eb * N + ej, eb * N + em
    Af = A.reshape(-1)
    val = _at(Af, row * N + em)
    cnt = torch.bincount(row, minlength=V)
    start = torch.cumsum(cnt, 0) - cnt
    crow_f = torch.zeros(V + 1, dtype=torch.long, device=dev)
    torch.cumsum(cnt, 0, out=crow_f[1:])
    loop = 1.0 if K == 1 else 0.0  # the GCN operator's degree counts the self loop
    deg = A.sum(-1).reshape(V) + loop  # full-graph degree (A is zero on padding)
    w_f = _weights(val, _at(deg, row), _at(deg, col), K, total_sum)
    d_f = (deg + 1e-5).pow(-0.5)
    own_f = d_f * d_f * deg if total_sum else d_f * d_f  # K = 1: diagonal of the operator
    # copies c = (graph cb, removed node ci): every real node
    cb, ci = mask.nonzero(as_tuple=True)
    nc = len(cb)
    base = cb * N  # chunk id of node 0 of the copy's graph
    # hop distances from the removed node up to L + 1 (flat (nc, N) table), shell by shell
    dist = torch.full((nc * N,), _FAR, dtype=torch.int8, device=dev)
    ar = torch.arange(nc, device=dev)
    dist[ar * N + ci] = 0
    fc, fj = ar, ci  # frontier
    shells_c, shells_j = [], []
    for r in range(1, L + 2):
        owner, eidx = _expand(cnt, start, _at(base, fc) + fj)
        key = _at(fc, owner) * N + _at(em, eidx)
        (k,) = (_at(dist, key) == _FAR).nonzero(as_tuple=True)
        key = _at(key, k)
        dist[key] = r
        if r == L + 1:  # edges shell L -> shell L + 1: the only changed inputs of the last shell
            last_owner, last_eidx, last_key = _at(owner, k), _at(eidx, k), key
        (flat,) = (dist == r).nonzero(as_tuple=True)  # deduplicated, sorted by copy
        fc = flat // N
        fj = flat - fc * N
        shells_c.append(fc)
        shells_j.append(fj)
    # pairs (copy, node) sorted by distance; sb[r] = number of pairs with dist <= r, so that
    # layer l changes exactly the first sb[l + 1] pairs (n_out[l]; n_out[0] = 0: the input)
    pc, pj = torch.cat(shells_c), torch.cat(shells_j)  # (P,)
    sb = [0]
    for t in shells_c:
        sb.append(sb[-1] + len(t))
    n_out = [0, *sb[2:]]
    P = sb[-1]
    pos = torch.full((nc * N,), -1, dtype=torch.long, device=dev)
    pos[pc * N + pj] = torch.arange(P, device=dev)
    pg = _at(base, pc) + pj  # chunk id of the pair's node
    # degrees inside G - i (d zero on the removed node)
    ci_p = _at(ci, pc)
    deg_j = _at(deg, pg) - _at(Af, pg * N + ci_p)  # (P,)
    d_j = (deg_j + 1e-5).pow(-0.5)
    own = d_j * d_j * deg_j if total_sum else d_j * d_j  # K = 1: diagonal entry of the operator
    # edges (pair, neighbour) of every pair at dist <= L (all pairs when L = 1), grouped by pair
    n_all = sb[L] if L >= 2 else P
    pe, eidx = _expand(cnt, start, pg[:n_all])
    ce, m = _at(pc, pe), _at(em, eidx)
    e_full = _at(base, ce) + m  # chunk id of the neighbour
    ci_e = _at(ci_p, pe)
    deg_m = _at(deg, e_full) - _at(Af, e_full * N + ci_e)
    w = _weights(_at(val, eidx), _at(deg_j, pe), deg_m, K, total_sum, (m != ci_e).to(dt))
    e_pair = _at(pos, ce * N + m)  # pair index of the neighbour in the copy, -1 if unchanged
    crow = _row_ptr(pe, n_all)
    last = None
    if L >= 2:  # last shell (dist L + 1): rows unchanged, inputs changed on dist-L neighbours
        o_row = _at(pos, last_key) - sb[L]
        o_row, perm = torch.sort(o_row, stable=True)
        o_eidx = _at(last_eidx, perm)  # edge m -> j; A symmetric, so A_jm = A_mj
        o_col = _at(last_owner, perm)  # row of m among the pairs at dist L
        o_w = _weights(_at(val, o_eidx), _at(deg, _at(col, o_eidx)), _at(deg, _at(row, o_eidx)),
                       K, total_sum)
        last = (o_row, o_col, o_w)
    h_full = x.reshape(V, -1)
    h_new = h_full.new_zeros(0, h_full.shape[-1])  # rows of S_(l-1), in pair order
    for li, layer in enumerate(model.layers, 1):
        lin = layer.mlp[0]
        H, C = lin.out_features, lin.in_features // K
        n_prev, n_cur = n_out[li - 1], n_out[li]
        wcat = lin.weight.view(H, K, C).permute(2, 1, 0).reshape(C, K * H)  # [W_0 .. W_K-1]
        table = torch.empty((V + n_prev) * K, H, dtype=dt, device=dev)  # rows g*K + k
        torch.mm(h_full, wcat, out=table[: V * K].view(V, K * H))
        torch.mm(h_new, wcat, out=table[V * K:].view(n_prev, K * H))  # GEMM on changed rows only
        # full graph: z = own term + bias + neighbour term (pre-activation, (V, H))
        z_full = table[: V * K: K] * own_f[:, None] if K == 1 else table[: V * K: K].clone()
        z_full.add_(lin.bias)
        z_full.addmm_(_csr(crow_f, col * K + (K - 1), w_f, (V, table.shape[0])), table)
        z = torch.empty(n_cur, H, dtype=dt, device=dev)
        # rows whose operator row changes (dist <= 2) or that read changed rows (dist <= l);
        # layers l >= 2 treat their outer shell (dist l + 1) apart, below
        n_in = sb[li] if li >= 2 else n_cur
        # own term (T_0, or the diagonal of the GCN operator): new row if the node changed before
        torch.index_select(table, 0, pg[n_prev:n_in] * K, out=z[n_prev:n_in])
        if K == 1:
            torch.mul(table[V * K::K], own[:n_prev, None], out=z[:n_prev])  # rows (V + p) * K
            torch.addcmul(lin.bias, z[n_prev:n_in], own[n_prev:n_in, None], out=z[n_prev:n_in])
            z[:n_prev].add_(lin.bias)
        else:
            torch.add(table[V * K::K], lin.bias, out=z[:n_prev])
            z[n_prev:n_in].add_(lin.bias)
        # neighbour term T_(K-1) (or the GCN operator) of G - i as one sparse matmul
        nnz = int(crow[n_in])
        src = e_pair[:nnz]
        cols = torch.where((src >= 0) & (src < n_prev), V + src, e_full[:nnz]) * K + (K - 1)
        z[:n_in].addmm_(_csr(crow[: n_in + 1], cols, w[:nnz], (n_in, table.shape[0])), table)
        if n_cur > n_in:
            # outer shell: z = z_full + sum_m P[j, m] (Y_new[m] - Y_full[m]) over neighbours m
            # at dist l (the operator row of a node at dist >= 3 is unchanged)
            lo, hi = sb[li - 1], sb[li]  # pairs at dist l
            dy = table[(V + lo) * K + K - 1: (V + hi) * K: K] - _at(table, pg[lo:hi] * K + (K - 1))
            if li == L:
                o_row, o_col, o_w = last
            else:
                e0, e1 = int(crow[n_in]), int(crow[n_cur])
                ep = e_pair[e0:e1]
                (k,) = ((ep >= lo) & (ep < hi)).nonzero(as_tuple=True)
                k = k + e0
                o_row, o_col, o_w = _at(pe, k) - n_in, _at(e_pair, k) - lo, _at(w, k)
            torch.index_select(z_full, 0, pg[n_in:n_cur], out=z[n_in:])
            z[n_in:].addmm_(_csr(_row_ptr(o_row, n_cur - n_in), o_col, o_w, (n_cur - n_in, hi - lo)), dy)
        for mod in layer.mlp[1:]:
            z, z_full = mod(z), mod(z_full)
        h_new = z.relu_()  # (n_cur, F_l)
        h_full = z_full.relu_() * maskf  # (V, F_l), zero on padding
    # head(readout(.)), the head being linear: project rows first, then add up
    wh, bh = model.head.weight, model.head.bias  # (O, F), (O,)
    q_full = h_full @ wh.T  # (V, O)
    tot = q_full.view(b, N, -1).sum(1)  # (b, O)
    q = _at(tot, cb) - _at(q_full, base + ci)  # (nc, O)
    q.index_add_(0, pc[: len(h_new)], h_new @ wh.T - _at(q_full, pg[: len(h_new)]))
    n = mask.sum(1).to(dt)
    if cfg.readout == "mean":
        q = q / (_at(n, cb) - 1).clamp(min=1)[:, None]
        tot = tot / n.clamp(min=1)[:, None]
    res = q.new_zeros(b, N, q.shape[-1])
    res[cb, ci] = q + bh
    return tot + bh, res
