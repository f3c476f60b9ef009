"""Which rows a node's removal changes: the index structure of exact incremental
leave-one-node-out (`ablate.trial.local_loo` runs the numbers on it).

Removing node i from a graph changes a layer's propagation operator only near i:
the GCN operator D^-1/2 (A+I) D^-1/2 (K = 1) and the Chebyshev L = -D^-1/2 A D^-1/2
(K = 2, T_0 = I) have row j depending on the degrees of j and of its neighbours, so
row j changes only when dist(i, j) <= 2 (with SUM aggregation the row is also scaled by
deg_j, which changes only for dist 1). Layer 1 therefore changes on
S_1 = {j != i : dist(i, j) <= 2} and layer l, which also reads the changed rows of layer
l - 1 through one hop, on S_l = {j != i : dist(i, j) <= l + 1}. Every other row of G - i
equals the full-graph row exactly.

`loo_structure` builds, for a chunk of graphs, the pairs (copy c = (graph b, removed node
i), node j) of every S_l found by a breadth-first search and sorted by distance (so S_l is
a prefix of the pair list for every layer), their (pair, neighbour) edges and operator
weights, all as index tensors. The structure depends on the graphs and the model's depth,
K and aggregation, never on its weights; every host sync of leave-one-out is here.
`supports_local_loo` says which models it is exact for.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from torch import Tensor

from ablate.models.layers import GraphLayer
from ablate.models.network import GraphNet

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


def rows_at(t: Tensor, idx: Tensor) -> Tensor:
    """t[idx] along dim 0 (index_select: much faster than advanced indexing on CPU)."""
    return t.index_select(0, idx)


def _expand(cnt: Tensor, start: Tensor, nodes: Tensor) -> tuple[Tensor, Tensor]:
    """CSR expansion: for node list `nodes` (P,), (owner index into `nodes`, edge index) per edge.

    cnt, start: (V,) neighbour count and first edge of every node. Edges come grouped by
    owner, in owner order. Shapes: -> (E,), (E,).
    """
    c = rows_at(cnt, nodes)
    owner = torch.repeat_interleave(torch.arange(len(nodes), device=nodes.device), c)
    shift = rows_at(start, nodes) - (torch.cumsum(c, 0) - c)  # first edge - first output position
    eidx = torch.arange(len(owner), device=nodes.device) + rows_at(shift, owner)
    return owner, eidx


def _csr(crow: Tensor, col: Tensor, val: Tensor, shape: tuple[int, int]) -> Tensor:
    """Sparse CSR matrix (rows, cols) from row pointers (rows + 1,), columns and values (nnz,)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
        return torch.sparse_csr_tensor(crow, col, val, size=shape, device=val.device,
                                       check_invariants=False)


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



@dataclass
class _Layer:
    """Index structures of one layer l of a chunk (weight-independent).

    Rows 0 .. n_in - 1 of the layer's changed rows S_l (pair order) get their neighbour term
    from `op` (n_in, V + n_prev), read against the layer's projected rows of the last term;
    `outer` = (lo, hi, CSR (n_cur - n_in, hi - lo)) updates the outer shell (dist l + 1) from
    the changes of the pairs lo .. hi - 1 at dist l, or None.
    """

    n_prev: int  # changed rows of the layer's input (S_(l-1))
    n_in: int  # changed rows whose neighbour term is recomputed
    n_cur: int  # changed rows of the layer's output (S_l)
    op: Tensor
    outer: tuple[int, int, Tensor] | None


@dataclass
class LooStructure:
    """What incremental leave-one-out needs of a chunk of graphs, independent of the weights.

    Built once by `loo_structure` (breadth-first search, (copy, node) pairs, edge lists and
    CSR operators; host syncs for the data-dependent sizes) and used by `loo_numeric` for any
    number of parameter sets. V = b * N chunk node ids g = graph * N + node; nc copies
    (graph cb, removed node ci); P pairs (copy pc, chunk node pg) sorted by distance.
    """

    b: int
    N: int
    K: int
    mean_readout: bool
    maskf: Tensor  # (V, 1, 1) float node mask
    n: Tensor  # (b,) float node counts
    own_f: Tensor  # (V,) K = 1: diagonal of the full graph's operator
    op_full: Tensor  # CSR (V, V): the full graph's neighbour term
    cb: Tensor  # (nc,)
    ci: Tensor  # (nc,)
    pc: Tensor  # (P,)
    pg: Tensor  # (P,)
    own: Tensor  # (P,) K = 1: diagonal of the operator of G - i on the pair's row
    layers: list[_Layer]

    @property
    def rows(self) -> int:
        """Full-graph rows plus changed rows (V + P): what a layer's tables hold per member."""
        return self.b * self.N + len(self.pg)


def loo_structure(model: GraphNet, A: Tensor, mask: Tensor) -> LooStructure:
    """Index structures of a chunk of graphs for `model`'s depth, K and aggregation.

    A (b, N, N) symmetric, mask (b, N). Reads only `model.cfg` and the number of layers.
    """
    cfg = model.cfg
    K, total_sum = cfg.K, cfg.aggregation == "sum"
    L = len(model.layers)
    b, N = mask.shape
    dev, dt = A.device, A.dtype
    V = b * N  # chunk node ids g = graph * N + node
    maskf = mask.reshape(V, 1, 1).to(dt)
    # neighbour lists (CSR, sorted by g) and the full graph's operator
    eb, ej, em = A.nonzero(as_tuple=True)
    row, col = eb * N + ej, eb * N + em
    Af = A.reshape(-1)
    val = rows_at(Af, row * N + em)
    cnt = torch.bincount(row, minlength=V)
    start = torch.cumsum(cnt, 0) - cnt
    crow_f = torch.zeros(V + 1, dtype=torch.long, device=dev)
    torch.cumsum(cnt, 0, out=crow_f[1:])
    loop = 1.0 if K == 1 else 0.0  # the GCN operator's degree counts the self loop
    deg = A.sum(-1).reshape(V) + loop  # full-graph degree (A is zero on padding)
    w_f = _weights(val, rows_at(deg, row), rows_at(deg, col), K, total_sum)
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
        owner, eidx = _expand(cnt, start, rows_at(base, fc) + fj)
        key = rows_at(fc, owner) * N + rows_at(em, eidx)
        (k,) = (rows_at(dist, key) == _FAR).nonzero(as_tuple=True)
        key = rows_at(key, k)
        dist[key] = r
        if r == L + 1:  # edges shell L -> shell L + 1: the only changed inputs of the last shell
            last_owner, last_eidx, last_key = rows_at(owner, k), rows_at(eidx, k), key
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
    pg = rows_at(base, pc) + pj  # chunk id of the pair's node
    # degrees inside G - i (d zero on the removed node)
    ci_p = rows_at(ci, pc)
    deg_j = rows_at(deg, pg) - rows_at(Af, pg * N + ci_p)  # (P,)
    d_j = (deg_j + 1e-5).pow(-0.5)
    own = d_j * d_j * deg_j if total_sum else d_j * d_j  # K = 1: diagonal entry of the operator
    # edges (pair, neighbour) of every pair at dist <= L (all pairs when L = 1), grouped by pair
    n_all = sb[L] if L >= 2 else P
    pe, eidx = _expand(cnt, start, pg[:n_all])
    ce, m = rows_at(pc, pe), rows_at(em, eidx)
    e_full = rows_at(base, ce) + m  # chunk id of the neighbour
    ci_e = rows_at(ci_p, pe)
    deg_m = rows_at(deg, e_full) - rows_at(Af, e_full * N + ci_e)
    w = _weights(rows_at(val, eidx), rows_at(deg_j, pe), deg_m, K, total_sum, (m != ci_e).to(dt))
    e_pair = rows_at(pos, ce * N + m)  # pair index of the neighbour in the copy, -1 if unchanged
    crow = _row_ptr(pe, n_all)
    ends = crow.tolist()  # edge offsets per pair (one host sync)
    layers = []
    for li in range(1, L + 1):
        n_prev, n_cur = n_out[li - 1], n_out[li]
        # rows whose operator row changes (dist <= 2) or that read changed rows (dist <= l);
        # layers l >= 2 treat their outer shell (dist l + 1) apart
        n_in = sb[li] if li >= 2 else n_cur
        # neighbour term T_(K-1) (or the GCN operator) of G - i: a neighbour changed in the
        # previous layer is read from the changed rows (table row V + pair), else the full row
        nnz = ends[n_in]
        src = e_pair[:nnz]
        cols = torch.where((src >= 0) & (src < n_prev), V + src, e_full[:nnz])
        op = _csr(crow[: n_in + 1], cols, w[:nnz], (n_in, V + n_prev))
        outer = None
        if n_cur > n_in:
            # outer shell: z = z_full + sum_m P[j, m] (Y_new[m] - Y_full[m]) over neighbours m
            # at dist l (the operator row of a node at dist >= 3 is unchanged)
            lo, hi = sb[li - 1], sb[li]  # pairs at dist l
            if li == L:  # edges shell L -> shell L + 1, found by the search
                o_row = rows_at(pos, last_key) - sb[L]
                o_row, perm = torch.sort(o_row, stable=True)
                o_eidx = rows_at(last_eidx, perm)  # edge m -> j; A symmetric, so A_jm = A_mj
                o_col = rows_at(last_owner, perm)  # row of m among the pairs at dist L
                o_w = _weights(rows_at(val, o_eidx), rows_at(deg, rows_at(col, o_eidx)),
                               rows_at(deg, rows_at(row, o_eidx)), K, total_sum)
            else:
                e0, e1 = ends[n_in], ends[n_cur]
                ep = e_pair[e0:e1]
                (k,) = ((ep >= lo) & (ep < hi)).nonzero(as_tuple=True)
                k = k + e0
                o_row, o_col, o_w = rows_at(pe, k) - n_in, rows_at(e_pair, k) - lo, rows_at(w, k)
            outer = (lo, hi, _csr(_row_ptr(o_row, n_cur - n_in), o_col, o_w,
                                  (n_cur - n_in, hi - lo)))
        layers.append(_Layer(n_prev, n_in, n_cur, op, outer))
    return LooStructure(b, N, K, cfg.readout == "mean", maskf, mask.sum(1).to(dt), own_f,
                        _csr(crow_f, col, w_f, (V, V)), cb, ci, pc, pg, own,
                        layers)
