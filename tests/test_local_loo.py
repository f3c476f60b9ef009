"""Incremental leave-one-node-out (ablate.trial.local_loo) against the dense N-copies path."""

import itertools
from unittest import mock

import numpy as np
import pytest
import torch

from ablate.config import TrialConfig, resolve
from ablate.data.graphs import GraphSet
from ablate.models.layers import Graph
from ablate.models.network import GraphNet
from ablate.trial import local_loo
from ablate.trial.batches import collate
from ablate.trial.local_loo import loo_outputs, supports_local_loo
from ablate.trial.weak import leave_one_out_batch, leave_one_out_dense

C_IN = 3


def graphs(seed: int) -> GraphSet:
    """Sizes 1..16 (a single node, a pair, isolated nodes, sparse and dense graphs), padded."""
    rng = np.random.default_rng(seed)
    xs, edges = [], []
    for n, p in [(1, 0.0), (2, 1.0), (6, 0.0), (9, 0.15), (16, 0.12), (12, 0.35), (4, 0.6)]:
        a = np.triu(rng.random((n, n)) < p, 1)
        a = a | a.T
        if n == 16:
            a[0, :] = a[:, 0] = False  # an isolated node inside a larger graph
        xs.append(rng.normal(size=(n, C_IN)).astype(np.float32))
        edges.append(np.stack(np.nonzero(a)))
    gts = [np.zeros(len(x), np.float32) for x in xs]
    return GraphSet.from_graphs(xs, edges, [0.0] * len(xs), gts)


def model(backbone: str, K: int, layers: int, aggregation: str, hidden: int, readout: str,
          out: int, seed: int = 0, **kw) -> GraphNet:
    cfg = resolve(TrialConfig(dataset="colors", backbone=backbone, pool_layers=kw.pop("pool_layers", ()),
                              K=K, filters=(8,) * layers, readout=readout, hidden=hidden,
                              aggregation=aggregation, **kw))
    torch.manual_seed(seed)
    net = GraphNet(cfg, C_IN, out).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(1.5)  # outputs well away from 0 and from saturated softmax
    return net


def assert_close_to_dense(net: GraphNet, batch, chunk_nodes: int | None = None) -> None:
    """leave_one_out_batch (local path) = the dense path; full outputs = the model's forward."""
    with torch.no_grad():
        dense = leave_one_out_dense(net, batch)
        local = leave_one_out_batch(net, batch)
        full, loo = loo_outputs(net, batch)
        ref = net(batch.x, Graph(batch.A, batch.mask)).out
        if chunk_nodes is not None:  # several chunks give the same outputs
            with mock.patch.object(local_loo, "_chunk", wraps=local_loo._chunk) as spy:
                full_c, loo_c = loo_outputs(net, batch, chunk_nodes)
            masks = [c.args[3] for c in spy.call_args_list]  # (graphs, nodes) of every chunk
            assert len(masks) > 1, "chunk_nodes should split the batch"
            assert sum(len(m) for m in masks) == len(batch.mask)  # every graph, once
            assert all(m.numel() <= chunk_nodes for m in masks)  # copy slots per chunk
            torch.testing.assert_close(full_c, full, rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(loo_c, loo, rtol=1e-6, atol=1e-6)
    scale = float(dense.abs().max()) + 1e-3
    assert float((local - dense).abs().max()) <= 1e-5 * scale + 1e-6
    torch.testing.assert_close(full.squeeze(-1) if net.regression else full, ref,
                               rtol=1e-5, atol=1e-5)
    assert (local[~batch.mask] == 0).all() and (loo[~batch.mask] == 0).all()


@pytest.mark.parametrize("backbone,K", [("gcn", 1), ("gin", 1), ("chebynet", 2), ("chebygin", 2)])
@pytest.mark.parametrize("layers", [1, 2, 3])
def test_local_equals_dense(backbone, K, layers):
    """Every supported combination: aggregation, hidden MLP, readout, regression/classes.

    (chebynet/chebygin with K = 1 are gcn/gin with their aggregation and hidden width, which
    the loop covers.)"""
    batch = collate(graphs(layers))
    combos = itertools.product(["mean", "sum"], [0, 32], ["sum", "mean"], [1, 3])
    for i, (agg, hidden, readout, out) in enumerate(combos):
        net = model(backbone, K, layers, agg, hidden, readout, out, seed=i)
        assert supports_local_loo(net)
        assert_close_to_dense(net, batch)


def test_local_equals_dense_colors_config():
    """COLORS' global-pool model (reference script's ChebyGIN: K=2, mean, no hidden, sum readout)."""
    cfg = resolve(TrialConfig(dataset="colors", backbone="chebygin_ref", pool_layers=()))
    assert (cfg.K, cfg.aggregation, cfg.hidden, cfg.readout) == (2, "mean", 0, "sum")
    torch.manual_seed(0)
    net = GraphNet(cfg, C_IN, 1).eval()
    assert supports_local_loo(net)
    assert_close_to_dense(net, collate(graphs(7)), chunk_nodes=40)  # several chunks


def test_graphs_without_edges_and_single_nodes():
    """Chunks where no node has a neighbour (nothing to recompute) still give exact outputs."""
    xs = [np.ones((n, C_IN), np.float32) * (n + 1) for n in (1, 3, 1)]
    gs = GraphSet.from_graphs(xs, [np.zeros((2, 0), np.int64)] * 3, [0.0] * 3,
                              [np.zeros(len(x), np.float32) for x in xs])
    for readout in ("sum", "mean"):
        assert_close_to_dense(model("chebygin", 2, 2, "sum", 0, readout, 3), collate(gs))


@pytest.mark.parametrize("kw", [dict(K=3), dict(readout="max"), dict(pool_layers=(1,))])
def test_unsupported_models_keep_the_dense_path(kw):
    args = dict(backbone="chebygin", K=2, layers=2, aggregation="mean", hidden=0, readout="sum",
                out=1)
    args.update(kw)
    net = model(**args)
    assert not supports_local_loo(net)
    batch = collate(graphs(1))
    with torch.no_grad():
        assert torch.equal(leave_one_out_batch(net, batch), leave_one_out_dense(net, batch))


def test_dropout_in_training_mode_is_not_supported():
    net = model("gin", 1, 2, "sum", 0, "sum", 1, dropout=0.5)
    assert supports_local_loo(net)  # eval mode: dropout is off
    net.train()
    assert not supports_local_loo(net)
