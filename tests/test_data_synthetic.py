"""Tests of the synthetic datasets COLORS and TRIANGLES (SPEC §1), on small sizes.

Labels and ground truth are re-derived by independent means (networkx triangle
counts, colour channels) rather than by the generators' own helpers.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import types

import networkx as nx
import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from ablate.data import colors, triangles
from ablate.data.graphs import GraphSet

COLORS_SMALL = dict(n_train=60, n_val=40, n_test=50, n_min=4, n_max=12, n_min_large=13,
                    n_max_large=30, seed=3)
TRIANGLES_SMALL = dict(n_train=100, n_val=50, n_test=50, n_min=4, n_max=15, n_min_large=26,
                       n_max_large=40, seed=3)


@pytest.fixture(scope="module")
def colors_data() -> dict[str, GraphSet]:
    return colors.generate(**COLORS_SMALL)


@pytest.fixture(scope="module")
def triangles_data() -> dict[str, GraphSet]:
    return triangles.generate(**TRIANGLES_SMALL)


def _graphs(gs: GraphSet):
    """(n, x, edge_index, y, gt) of every graph of a split."""
    for i in range(len(gs)):
        n0, n1 = gs.node_ptr[i], gs.node_ptr[i + 1]
        e0, e1 = gs.edge_ptr[i], gs.edge_ptr[i + 1]
        yield int(n1 - n0), gs.x[n0:n1], gs.edge_index[:, e0:e1], gs.y[i], gs.gt[n0:n1]


def _nx_graph(n: int, ei: np.ndarray) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(ei.T.tolist())
    return g


def _check_edges(n: int, ei: np.ndarray) -> int:
    """Assert a valid local, symmetric, loop-free, duplicate-free edge list; return #undirected."""
    assert ei.dtype == np.int64
    assert ei.min(initial=0) >= 0 and ei.max(initial=0) < n
    assert (ei[0] != ei[1]).all(), "self loop"
    pairs = set(map(tuple, ei.T.tolist()))
    assert len(pairs) == ei.shape[1], "duplicate edge"
    assert pairs == {(b, a) for a, b in pairs}, "edge list not symmetric"
    return ei.shape[1] // 2


def _keys(splits: dict[str, GraphSet]) -> list[bytes]:
    """Independent identity of every graph: n, sorted undirected edges, feature bytes."""
    keys = []
    for gs in splits.values():
        for n, x, ei, _, _ in _graphs(gs):
            e = sorted({(min(a, b), max(a, b)) for a, b in ei.T.tolist()})
            keys.append(repr((n, e)).encode() + np.ascontiguousarray(x).tobytes())
    return keys


def _same(a: dict[str, GraphSet], b: dict[str, GraphSet]) -> bool:
    return a.keys() == b.keys() and all(
        np.array_equal(getattr(a[s], f), getattr(b[s], f))
        for s in a for f in ("x", "gt", "node_ptr", "edge_index", "edge_ptr", "y"))


# ---------------------------------------------------------------- COLORS


def test_colors_splits_sizes_and_ranges(colors_data):
    assert list(colors_data) == ["train", "val", "test_orig", "test_large", "test_largec"]
    want = {"train": 60, "val": 40, "test_orig": 50, "test_large": 50, "test_largec": 50}
    for name, gs in colors_data.items():
        assert len(gs) == want[name]
        assert gs.x.dtype == np.float32 and gs.gt.dtype == np.float32
        assert gs.y.dtype == np.float32
        assert gs.num_features == 4  # 3 colours padded to 4 channels
        lo, hi = (13, 30) if name.startswith("test_large") else (4, 12)
        assert gs.num_nodes.min() >= lo and gs.num_nodes.max() <= hi
    # n is stratified over the range: every size of the pool appears
    pool = np.concatenate([colors_data[s].num_nodes for s in ("train", "val", "test_orig")])
    assert set(pool.tolist()) == set(range(4, 13))


def test_colors_edges_are_gnm(colors_data):
    for gs in colors_data.values():
        for n, _, ei, _, _ in _graphs(gs):
            m = _check_edges(n, ei)
            assert min(n, n * (n - 1) // 2) <= m <= min(2 * n - 1, n * (n - 1) // 2)


def test_colors_labels_and_gt_from_colours(colors_data):
    for name, gs in colors_data.items():
        for n, x, _, y, gt in _graphs(gs):
            if name != "test_largec":  # exactly one colour per node, padding channel unused
                assert (x.sum(1) == 1).all() and (x[:, 3] == 0).all()
                green = x.argmax(1) == 1
            else:
                green = x[:, 1] == 1
                assert (x[green].sum(1) == 1).all(), "green nodes must be pure green"
            k = int(green.sum())
            assert y == k and 0 <= k <= min(10, n)
            if k:
                np.testing.assert_allclose(gt[green], 1.0 / k, rtol=1e-6)
                assert (gt[~green] == 0).all()
                assert gt.sum() == pytest.approx(1.0, abs=1e-5)
            else:
                assert (gt == 0).all()


def test_colors_largec_has_unseen_colours(colors_data):
    x = colors_data["test_largec"].x
    green = (x[:, 1] == 1) & (x.sum(1) == 1)
    others = x[~green]
    assert (others[:, 1] == 0).all(), "a non-green node has the green channel set"
    assert (x[:, 3] == 1).any(), "the extra channel is never used"
    assert (others.sum(1) > 1).any(), "non-green nodes should get random binary vectors"
    assert set(np.unique(x).tolist()) <= {0.0, 1.0}


def test_colors_all_labels_present_and_balanced_per_size():
    data = colors.generate(n_train=220, n_val=0, n_test=0, n_min=10, n_max=11,
                           n_min_large=26, n_max_large=27, seed=5)
    gs = data["train"]
    for n in (10, 11):
        counts = np.bincount(gs.y[gs.num_nodes == n].astype(int), minlength=11)
        assert counts.max() - counts.min() <= 1, counts  # round-robin over labels 0..10


def test_colors_graphs_unique_even_when_tiny():
    # n = 4 only: without a uniqueness check, 600 draws of about 1800 graphs repeat some
    data = colors.generate(n_train=400, n_val=100, n_test=100, n_min=4, n_max=4,
                           n_min_large=5, n_max_large=5, seed=1)
    keys = _keys(data)
    assert len(keys) == 800 and len(set(keys)) == len(keys)
    y = data["train"].y
    assert set(np.unique(y).tolist()) == {0, 1, 2, 3, 4}  # labels capped by n


def test_colors_unique_across_splits(colors_data):
    keys = _keys(colors_data)
    assert len(set(keys)) == len(keys)


def test_colors_too_many_graphs_raises():
    with pytest.raises(ValueError, match="unique"):
        colors.generate(n_train=3000, n_val=0, n_test=0, n_min=4, n_max=4, seed=0)


def test_colors_more_colours_widen_features():
    data = colors.generate(n_train=30, n_val=10, n_test=10, n_min=4, n_max=8, n_min_large=9,
                           n_max_large=12, n_colors=8, seed=0)
    for name, gs in data.items():
        assert gs.num_features == 9  # n_colors + 1 > default 4
        if name != "test_largec":
            used = set(gs.x.argmax(1).tolist())
            assert used <= set(range(8)) and (gs.x[:, 8] == 0).all()
    assert set(data["test_orig"].x.argmax(1).tolist()) - {1}  # non-green colours present


def test_colors_deterministic(colors_data):
    assert _same(colors_data, colors.generate(**COLORS_SMALL))
    other = colors.generate(**{**COLORS_SMALL, "seed": 4})
    assert not _same(colors_data, other)


# ---------------------------------------------------------------- TRIANGLES


def test_triangles_splits_and_balance(triangles_data):
    assert list(triangles_data) == ["train", "val", "test_orig", "test_large"]
    want = {"train": 100, "val": 50, "test_orig": 50, "test_large": 50}
    for name, gs in triangles_data.items():
        assert len(gs) == want[name]
        assert gs.y.dtype == np.int64
        counts = np.bincount(gs.y, minlength=11)
        assert counts[0] == 0 and (counts[1:] == want[name] // 10).all(), (name, counts)
        lo, hi = (26, 40) if name == "test_large" else (4, 15)
        assert gs.num_nodes.min() >= lo and gs.num_nodes.max() <= hi
        assert gs.num_features == 14


def test_triangles_labels_gt_and_degree_by_networkx(triangles_data):
    for gs in triangles_data.values():
        for n, x, ei, y, gt in _graphs(gs):
            m = _check_edges(n, ei)
            assert min(n, n * (n - 1) // 2) <= m <= min(2 * n - 1, n * (n - 1) // 2)
            g = _nx_graph(n, ei)
            t = np.array([nx.triangles(g, i) for i in range(n)], dtype=np.float64)
            assert y == t.sum() / 3
            np.testing.assert_allclose(gt, t / t.sum(), rtol=1e-5, atol=1e-7)
            deg = np.array([g.degree(i) for i in range(n)])
            assert (x.sum(1) == 1).all()
            np.testing.assert_array_equal(x.argmax(1), deg)


def test_triangles_unique(triangles_data):
    keys = _keys(triangles_data)
    assert len(set(keys)) == len(keys)


def test_triangles_max_degree_enforced():
    data = triangles.generate(n_train=50, n_val=10, n_test=10, n_min=6, n_max=12,
                              n_min_large=26, n_max_large=30, max_degree=5, n_classes=5, seed=2)
    for gs in data.values():
        assert gs.num_features == 6
        assert set(np.unique(gs.y).tolist()) == {1, 2, 3, 4, 5}
        for n, _, ei, _, _ in _graphs(gs):
            assert np.bincount(ei[0], minlength=n).max() <= 5


def test_triangles_deterministic(triangles_data):
    assert _same(triangles_data, triangles.generate(**TRIANGLES_SMALL))
    other = triangles.generate(**{**TRIANGLES_SMALL, "seed": 4})
    assert not _same(triangles_data, other)


def test_triangles_progress_bar_on_stderr(capsys):
    triangles.generate(n_train=20, n_val=10, n_test=10, n_max=10, n_min_large=26,
                       n_max_large=28, progress=True)
    assert "triangles" in capsys.readouterr().err


def test_triangle_stats_matches_networkx():
    g = nx.gnm_random_graph(12, 24, seed=0)
    a = nx.to_numpy_array(g, nodelist=range(12))[None]
    per_node, count = triangles.triangle_stats(a)
    assert per_node[0].tolist() == [nx.triangles(g, i) for i in range(12)]
    assert count[0] == sum(nx.triangles(g).values()) // 3


# ---------------------------------------------------------------- registry and cache


@pytest.fixture
def registry(monkeypatch, tmp_path):
    """Cache in tmp_path; stand-ins for sibling dataset modules that are not written yet."""
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path))
    stubs = {"mnist": ("generate_mnist", "generate_digits"), "tu": ("proteins", "dd", "collab")}
    for mod, fns in stubs.items():
        name = f"ablate.data.{mod}"
        if importlib.util.find_spec(name) is None:
            stub = types.ModuleType(name)
            for fn in fns:
                setattr(stub, fn, lambda progress=False: {})
            monkeypatch.setitem(sys.modules, name, stub)
    return tmp_path


def test_load_dataset_colors_returns_data_and_caches(registry, monkeypatch):
    import ablate.data as data_pkg

    params = dict(n_train=12, n_val=6, n_test=6, n_max=8, n_min_large=9, n_max_large=12)
    first = data_pkg.load_dataset("colors", **params)
    assert set(first) == {"train", "val", "test_orig", "test_large", "test_largec"}
    assert len(first["train"]) == 12 and len(first["test_largec"]) == 6
    for graphs in first.values():
        for d in graphs:
            assert isinstance(d, Data)
            assert d.x.shape == (d.num_nodes, 4) and d.gt.shape == (d.num_nodes,)
            assert d.edge_index.shape[0] == 2 and d.edge_index.dtype == torch.long
            assert d.y.shape == (1,) and d.y.item() == d.x[:, 1].sum().item()
    assert len(list(registry.glob("colors-*.npz"))) == 1

    original = colors.generate

    @functools.wraps(original)
    def no_generation(**kwargs):
        raise AssertionError("cache miss: the generator ran again")

    monkeypatch.setattr(colors, "generate", no_generation)
    second = data_pkg.load_dataset("colors", **params)
    for split, graphs in first.items():
        for a, b in zip(graphs, second[split], strict=True):
            assert torch.equal(a.x, b.x) and torch.equal(a.edge_index, b.edge_index)
            assert torch.equal(a.y, b.y) and torch.equal(a.gt, b.gt)
    monkeypatch.setattr(colors, "generate", original)
    data_pkg.load_dataset("colors", **{**params, "seed": 7})  # a new recipe: a new file
    assert len(list(registry.glob("colors-*.npz"))) == 2


def test_load_dataset_triangles(registry):
    import ablate.data as data_pkg

    out = data_pkg.load_dataset("triangles", n_train=20, n_val=10, n_test=10, n_max=10,
                                n_min_large=26, n_max_large=28)
    assert [len(out[s]) for s in ("train", "val", "test_orig", "test_large")] == [20, 10, 10, 10]
    d = out["test_large"][0]
    assert d.y.dtype == torch.long and 1 <= d.y.item() <= 10
    assert d.gt.sum().item() == pytest.approx(1.0, abs=1e-5)
