"""Layer family, attention pooling and leave-one-out attention against independent computations."""

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from ablate.config import TrialConfig, resolve
from ablate.data.graphs import GraphSet
from ablate.models.layers import Graph, GraphLayer, chebyshev_basis, propagation
from ablate.models.network import GraphNet
from ablate.models.pooling import AttentionPool, kl_attention_loss, topk_keep
from ablate.trial.batches import collate, eval_batches
from ablate.trial.local_loo import supports_local_loo
from ablate.trial.metrics import attention_auc, focus_true
from ablate.trial.weak import (
    copies_entries,
    leave_one_out_batch,
    leave_one_out_dense,
    weak_attention,
)


def random_graphs(G=6, n_lo=3, n_hi=9, C=4, seed=0) -> GraphSet:
    rng = np.random.default_rng(seed)
    xs, edges, ys, gts = [], [], [], []
    for _ in range(G):
        n = int(rng.integers(n_lo, n_hi + 1))
        a = np.triu(rng.random((n, n)) < 0.4, 1)
        a = a | a.T
        xs.append(rng.random((n, C)).astype(np.float32))
        edges.append(np.stack(np.nonzero(a)))
        g = (rng.random(n) < 0.4).astype(np.float32)
        gts.append(g / g.sum() if g.sum() else g)
        ys.append(float(rng.integers(0, 5)))
    return GraphSet.from_graphs(xs, edges, ys, gts)


def dense(gs: GraphSet):
    b = collate(gs)
    return b.x, Graph(b.A, b.mask), b


def net(backbone: str, **kw) -> GraphNet:
    cfg = resolve(TrialConfig(dataset="colors", backbone=backbone, **kw))
    torch.manual_seed(0)
    return GraphNet(cfg, 4, 1).eval()


@pytest.mark.parametrize("K,agg,hidden", [(1, "mean", 0), (1, "sum", 8), (3, "mean", 0),
                                          (3, "sum", 8)])
def test_layer_equals_concatenated_chebyshev_terms(K, agg, hidden):
    """The fused per-term matmul equals Linear([T_0 X, deg*T_1 X, ...]) of SPEC §2."""
    x, graph, b = dense(random_graphs())
    layer = GraphLayer(4, 6, K, agg, hidden)
    m = b.mask.float()
    L, deg = propagation(b.A, m, self_loops=K == 1)
    terms = [torch.bmm(L, x)] if K == 1 else chebyshev_basis(L, x, K)
    if agg == "sum":
        d = deg.unsqueeze(-1)
        terms = [terms[0] * d] if K == 1 else [terms[0]] + [t * d for t in terms[1:]]
    ref = torch.relu(layer.mlp(torch.cat(terms, -1))) * m.unsqueeze(-1)
    torch.testing.assert_close(layer(x, graph), ref, atol=1e-5, rtol=1e-5)


def test_gcn_operator_by_hand():
    """D^-1/2 (A + I) D^-1/2 on a 3-node path graph, computed by hand."""
    A = torch.tensor([[[0.0, 1, 0], [1, 0, 1], [0, 1, 0]]])
    L, deg = propagation(A, torch.ones(1, 3), self_loops=True)
    d = np.array([2.0, 3.0, 2.0])
    expect = (np.eye(3) + A[0].numpy()) / np.sqrt(np.outer(d, d))
    np.testing.assert_allclose(L[0].numpy(), expect, atol=1e-5)
    np.testing.assert_allclose(deg[0].numpy(), d)


@pytest.mark.parametrize("backbone,kw", [
    ("gcn", dict(pool_layers=())), ("gin", dict(pool_layers=())),
    ("chebynet", dict(pool_layers=(), K=3)), ("chebygin", dict(pool_layers=(), K=3)),
    ("gin", dict(pool_layers=(1,))), ("chebygin", dict(pool_layers=(1, 2), filters=(8, 8),
                                                       scorer="gnn", scorer_input="curr")),
    # top-k with softmax: sparsemax's exact zeros tie at the cut, where any order is valid
    ("chebygin", dict(pool_layers=(1,), selection="topk", normalizer="softmax")),
    ("chebygin", dict(pool_layers=(1,), normalizer="sparsemax")),
    ("gin", dict(pool_layers=(1,), normalizer="spherical", scorer="fc_hidden")),
])
def test_permutation_invariance(backbone, kw):
    """Permuting the nodes of every graph leaves the graph-level output unchanged."""
    gs = random_graphs()
    x, graph, b = dense(gs)
    model = net(backbone, **kw)
    out = model(x, graph, b.gt).out
    N = x.shape[1]
    perm = torch.randperm(N, generator=torch.Generator().manual_seed(3))
    graph_p = Graph(b.A[:, perm][:, :, perm], b.mask[:, perm])
    out_p = model(x[:, perm], graph_p, b.gt[:, perm]).out
    torch.testing.assert_close(out, out_p, atol=1e-4, rtol=1e-4)


def test_threshold_pooling_equals_explicit_induced_subgraph():
    """Mask-based threshold pooling = building the induced subgraph and running layer 2 on it."""
    gs = random_graphs(G=5, n_lo=5, n_hi=9)
    model = net("chebygin", pool_layers=(1,), filters=(8, 8), K=2, threshold=0.12)
    x, graph, b = dense(gs)
    o = model(x, graph)
    res = o.pools[0]
    keep = res.graph.mask
    assert 0 < keep.sum() < b.mask.sum(), "threshold should drop some but not all nodes"
    h1 = model.layers[0](x, graph)
    for g in range(len(gs)):
        idx = keep[g].nonzero().squeeze(1)
        A_sub = b.A[g][idx][:, idx].unsqueeze(0)  # explicit induced subgraph
        x_sub = (h1[g] * res.alpha[g].unsqueeze(-1))[idx].unsqueeze(0)
        sub_graph = Graph(A_sub, torch.ones(1, len(idx), dtype=torch.bool))
        h2 = model.layers[1](x_sub, sub_graph)
        out = model.head(h2.sum(1)).squeeze()
        torch.testing.assert_close(out, o.out[g], atol=1e-5, rtol=1e-5)


def test_kl_term_by_hand():
    alpha = torch.tensor([[0.5, 0.25, 0.25, 0.0]])
    gt = torch.tensor([[0.5, 0.5, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, False]])
    kl = 0.5 * math.log(0.5 / 0.5) + 0.5 * math.log(0.5 / 0.25)
    expect = 100 * kl / 3  # KL / N with N = 3 nodes before pooling
    assert kl_attention_loss(alpha, gt, mask, 100.0).item() == pytest.approx(expect, rel=1e-5)


def test_topk_removes_round_n_times_one_minus_ratio():
    """As the reference counts: remove round(N (1 - r)) nodes (round half to even), keep the rest."""
    score = torch.tensor([[0.1, 0.5, 0.3, 0.2, 9.0], [3.0, 1.0, 2.0, 0.0, 0.0],
                          [5.0, 4.0, 3.0, 2.0, 1.0]])
    mask = torch.tensor([[True] * 4 + [False], [True, True, True, False, False], [True] * 5])
    keep = topk_keep(score, mask, 0.5)
    assert keep.tolist() == [[False, True, True, False, False],  # N=4: remove 2, keep 2
                             [True, False, False, False, False],  # N=3: remove round(1.5)=2
                             [True, True, True, False, False]]  # N=5: remove round(2.5)=2


def test_gt_oracle_attention_is_ground_truth():
    pool = AttentionPool(4, threshold=0.0)
    x, graph, b = dense(random_graphs())
    res = pool(x, x, graph, b.gt, supervision="gt")
    torch.testing.assert_close(res.alpha, b.gt)
    assert torch.equal(res.graph.mask, b.mask & (b.gt > 0))


def test_init_of_projection():
    for dist in ("normal", "uniform"):
        pool = AttentionPool(1000, init_dist=dist, init_scale=2.0)
        p = pool.p.detach()
        if dist == "uniform":
            assert p.abs().max() <= 2.0 and p.abs().max() > 1.9
        else:
            assert abs(p.std().item() - 2.0) < 0.2


def test_auc_matches_sklearn_over_pooled_nodes():
    """attn AUC pools every valid node of every graph: equal to sklearn on the flat arrays."""
    gs = random_graphs(G=12)
    model = net("gin", pool_layers=(1,))
    from ablate.trial.evaluate import evaluate

    rec = evaluate(model, eval_batches(gs, 5), model.cfg)
    alphas, labels = [], []
    for i in range(len(gs)):  # one graph at a time, no padding
        _, g1, b1 = dense(gs.subset([i]))
        a = model(b1.x, g1, b1.gt).pools[0].alpha[0]
        alphas.append(a.detach().numpy())
        labels.append(gs.gt[gs.node_ptr[i]:gs.node_ptr[i + 1]] > 0)
    expect = roc_auc_score(np.concatenate(labels), np.concatenate(alphas))
    assert rec["attn_auc_l0"] == pytest.approx(expect, abs=1e-6)
    assert math.isnan(attention_auc(np.ones(3), np.zeros(3)))


def test_focus_true_counts():
    alpha = np.array([[0.1, 0.7, 0.2], [0.6, 0.3, 0.1], [0.3, 0.3, 0.4]])
    gt = np.array([[0, 1, 0], [0, 1, 0], [0, 0, 0]], dtype=float)
    mask = np.ones((3, 3), dtype=bool)
    assert focus_true(alpha, gt, mask) == (1, 2)


def loo_by_hand(model: GraphNet, gs: GraphSet, g: int) -> list[float]:
    """|y(G - i) - y(G)| of graph g, every G - i built as an explicit induced subgraph and run
    alone (no padding, no batching); y = the output, or the logit of G's predicted class."""
    _, g1, b1 = dense(gs.subset([g]))
    n = int(b1.n_nodes[0])
    out = []
    with torch.no_grad():
        full = model(b1.x, g1).out[0]
        cls = None if model.regression else int(full.argmax())
        for i in range(n):
            keep = [j for j in range(n) if j != i]
            A_sub = b1.A[0][keep][:, keep].unsqueeze(0)
            sub = Graph(A_sub, torch.ones(1, n - 1, dtype=torch.bool))
            y = model(b1.x[:, keep], sub).out[0]
            out.append(abs(float(y - full)) if cls is None else abs(float(y[cls] - full[cls])))
    return out


def assert_equals_per_node_loop(model: GraphNet, gs: GraphSet, diff: torch.Tensor) -> None:
    b = collate(gs)
    for g in range(len(gs)):
        n = int(b.n_nodes[g])
        np.testing.assert_allclose(diff[g, :n].numpy(), loo_by_hand(model, gs, g), atol=1e-4,
                                   rtol=1e-4)
        assert (diff[g, n:] == 0).all()  # padding


def test_leave_one_out_local_path_equals_per_node_loop():
    """Global-pool GIN takes the incremental path (`local_loo`): all removals = one at a time."""
    gs = random_graphs(G=3, n_lo=4, n_hi=7)
    model = net("gin", pool_layers=())
    assert supports_local_loo(model)
    with torch.no_grad():
        assert_equals_per_node_loop(model, gs, leave_one_out_batch(model, collate(gs)))


@pytest.mark.parametrize("backbone,kw,out", [
    ("chebygin", dict(pool_layers=(), K=3), 3),  # K = 3: no local path; 3 classes
    ("gin", dict(pool_layers=(1,)), 1),  # attention pooling inside every copy
])
def test_leave_one_out_dense_in_several_chunks_equals_per_node_loop(backbone, kw, out):
    """The dense N-copies path, its loop over chunks of graphs really run with several chunks
    (the last one ragged), equals removing each node explicitly and equals a single chunk."""
    gs = random_graphs(G=5, n_lo=4, n_hi=7)
    cfg = resolve(TrialConfig(dataset="colors", backbone=backbone, **kw))
    torch.manual_seed(0)
    model = GraphNet(cfg, 4, out).eval()
    assert not supports_local_loo(model)  # leave_one_out_batch takes the dense path
    b = collate(gs)
    B, N = b.mask.shape
    # the N copies of 2 graphs: their adjacency, operators and activations (`copies_entries`)
    chunk_entries = 2 * copies_entries(model, N, b.x.shape[-1])
    seen: list[torch.Size] = []  # adjacency of every forward: the full batch, then each chunk
    hook = model.register_forward_pre_hook(lambda mod, args: seen.append(args[1].A.shape))
    with torch.no_grad():
        diff = leave_one_out_batch(model, b, chunk_entries=chunk_entries)
        hook.remove()
        single = leave_one_out_dense(model, b, chunk_entries=B * N ** 3)
    assert seen[0] == (B, N, N)  # the full graphs
    chunks = seen[1:]
    assert len(chunks) == 3  # 5 graphs, 2 per chunk: 2 + 2 + 1
    assert all(s[0] <= 2 * N for s in chunks)  # at most 2 graphs' copies per chunk
    assert sum(s[0] for s in chunks) == B * N  # every (graph, removed node) copy, once
    torch.testing.assert_close(diff, single, atol=1e-6, rtol=1e-6)
    assert_equals_per_node_loop(model, gs, diff)


def test_weak_attention_by_hand():
    """alpha_WS normalises over the real nodes only; the floor zeroes small entries and
    renormalises; a graph whose removals change nothing gets no attention (not NaN)."""
    diff = torch.tensor([[3.0, 1.0, 0.0, 7.0],  # the 7 is padding
                         [10.0, 5.0, 3.0, 2.0],
                         [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, False], [True] * 4, [True, True, False, False]])
    alpha = weak_attention(diff, mask)
    expect = torch.tensor([[0.75, 0.25, 0.0, 0.0], [0.5, 0.25, 0.15, 0.1], [0.0] * 4])
    torch.testing.assert_close(alpha, expect)
    # floor 0.2: 0.15 and 0.1 go, [0.5, 0.25] renormalised to [2/3, 1/3]
    floored = weak_attention(diff, mask, floor=0.2)
    expect[1] = torch.tensor([2 / 3, 1 / 3, 0.0, 0.0])
    torch.testing.assert_close(floored, expect)


@pytest.mark.parametrize("normalizer", ["softmax", "sparsemax", "spherical"])
@pytest.mark.parametrize("scale", [1.0, 100.0])  # 100: scores past the +-60 clamp
def test_attention_sums_to_one_over_real_nodes(normalizer, scale):
    """Per graph, alpha sums to 1 over its nodes (neither more nor less) and is exactly 0 on
    padding, also after a first pooling layer dropped nodes; a graph without nodes gets 0."""
    gs = random_graphs(G=6, n_lo=1, n_hi=9)
    x, graph, b = dense(gs)
    empty = torch.zeros_like(b.mask[:1])  # one more graph, all padding
    graph = Graph(torch.cat([b.A, torch.zeros_like(b.A[:1])]), torch.cat([b.mask, empty]))
    x = torch.cat([x, x[:1]]) * scale
    cfg = resolve(TrialConfig(dataset="colors", backbone="gin", pool_layers=(1, 2),
                              filters=(8, 8), normalizer=normalizer, threshold=0.1))
    torch.manual_seed(0)
    model = GraphNet(cfg, 4, 1).eval()
    with torch.no_grad():
        pools = model(x, graph).pools
    assert (pools[1].mask_before.sum(-1) < graph.mask.sum(-1)).any(), "layer 1 should drop"
    for res in pools:
        m = res.mask_before
        assert torch.isfinite(res.alpha).all() and (res.alpha >= 0).all()
        assert (res.alpha[~m] == 0).all()
        sums = res.alpha.sum(-1)
        has = m.any(-1)
        torch.testing.assert_close(sums[has], torch.ones(int(has.sum())), atol=1e-5, rtol=0)
        assert (sums[~has] == 0).all()


@pytest.mark.parametrize("kind", ["sum", "mean", "max"])
def test_readout_of_a_relu_layer_needs_no_mask(kind):
    """The readout of a ReLU layer's masked output (>= 0, 0 on absent nodes) without masking
    gives the masked readout's values and, through the layer, its gradients (ties of 0 and of
    the maximum included; a graph left empty gives 0)."""
    from ablate.models.readout import readout

    g = torch.Generator().manual_seed(0)
    B, N, C = 5, 7, 6
    mask = torch.rand(B, N, generator=g) < 0.7
    mask[0] = False  # an empty graph
    graph = Graph(torch.zeros(B, N, N), mask)
    h0 = torch.randint(-2, 3, (B, N, C), generator=g).float()  # many ties, many zeros
    grads = []
    for masked_nonneg in (False, True):
        h = h0.clone().requires_grad_()
        x = torch.relu(h) * graph.maskf.unsqueeze(-1)
        out = readout(x, graph, kind, masked_nonneg=masked_nonneg)
        out.backward(torch.arange(B * C, dtype=torch.float32).view(B, C))
        grads.append((out.detach(), h.grad))
    assert torch.equal(grads[0][0], grads[1][0])
    assert torch.equal(grads[0][1], grads[1][1])


def test_sparsemax_running_sum_of_the_cuda_path_is_float64_whatever_tf32_says():
    """The CUDA path's running sum (a product with a triangular matrix) runs in float64, so
    TF32 products (10-bit mantissa) cannot move sparsemax's support (issue 35). Here on the
    CPU with TF32 allowed: the same values as a float64 cumsum rounded once to float32 (a
    float32 product differs); on a GPU, benchmarks/gpu_check.py checks it with TF32 on."""
    from ablate.models.normalizers import triangular_running_sum

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        g = torch.Generator().manual_seed(0)
        zs = torch.randn(4, 300, generator=g).sort(-1, descending=True).values
        want = zs.double().cumsum(-1).float()
        assert torch.equal(triangular_running_sum(zs), want)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
