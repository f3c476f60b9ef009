"""Real-data loaders on tiny fixtures written by the tests (no network, SPEC section 1).

MNIST-75SP from IDX files (plain, gzipped, torchvision layout), the superpixel
pipeline, the noisy test splits, DIGITS-75SP from scikit-learn, and TU-format
datasets with the inductive split by node count.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

from ablate.data import mnist, superpixels, tu
from ablate.data.graphs import GraphSet
from ablate.errors import ConfigError

SPLITS = {"train", "val", "test_orig", "test_noisy", "test_noisyc"}


# ----------------------------------------------------------------------------- MNIST fixture


def _blob_images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n distinct uint8 28x28 images: a bright disc on faint noise; labels 0..9."""
    rng = np.random.default_rng(seed)
    rows, cols = np.indices((28, 28))
    imgs = np.empty((n, 28, 28), np.uint8)
    for k in range(n):
        r0, c0, rad = rng.integers(8, 20), rng.integers(8, 20), rng.integers(4, 7)
        disc = ((rows - r0) ** 2 + (cols - c0) ** 2) <= rad**2
        img = rng.integers(0, 40, size=(28, 28))
        img[disc] = rng.integers(200, 256, size=int(disc.sum()))
        imgs[k] = img
    return imgs, (np.arange(n) % 10).astype(np.uint8)


def _idx_bytes(arr: np.ndarray) -> bytes:
    head = bytes([0, 0, 0x08, arr.ndim]) + np.asarray(arr.shape, ">i4").tobytes()
    return head + arr.astype(np.uint8).tobytes()


def _write_mnist(folder: Path, arrays: dict[str, np.ndarray], gz: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for key, name in mnist.MNIST_FILES.items():
        blob = _idx_bytes(arrays[key])
        if gz:
            (folder / f"{name}.gz").write_bytes(gzip.compress(blob))
        else:
            (folder / name).write_bytes(blob)


@pytest.fixture(scope="module")
def mnist_arrays() -> dict[str, np.ndarray]:
    tr_x, tr_y = _blob_images(20, seed=0)
    te_x, te_y = _blob_images(10, seed=1)
    return {"train_images": tr_x, "train_labels": tr_y, "test_images": te_x,
            "test_labels": te_y}


@pytest.fixture(scope="module")
def mnist_dir(tmp_path_factory, mnist_arrays) -> Path:
    root = tmp_path_factory.mktemp("mnist_plain")
    _write_mnist(root, mnist_arrays, gz=False)
    return root


@pytest.fixture(scope="module")
def mnist_splits(mnist_dir) -> dict[str, GraphSet]:
    return mnist.generate_mnist(str(mnist_dir), n_train=14, n_val=6, n_test=10)


def test_idx_layouts_plain_gzip_torchvision(tmp_path, mnist_arrays):
    _write_mnist(tmp_path / "raw_gz" / "raw", mnist_arrays, gz=True)
    _write_mnist(tmp_path / "tv" / "MNIST" / "raw", mnist_arrays, gz=True)
    _write_mnist(tmp_path / "plain", mnist_arrays, gz=False)
    for root in ("raw_gz", "tv", "plain"):
        tr_x, tr_y, te_x, te_y = mnist.load_mnist_arrays(str(tmp_path / root))
        np.testing.assert_array_equal(tr_x, mnist_arrays["train_images"])
        np.testing.assert_array_equal(te_y, mnist_arrays["test_labels"])
        assert tr_y.dtype == np.int64 and te_x.shape == (10, 28, 28)


def test_mnist_missing_paths_raise(tmp_path):
    with pytest.raises(ConfigError, match="train-images-idx3-ubyte"):
        mnist.generate_mnist(None)
    missing = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match="nowhere"):
        mnist.generate_mnist(str(missing))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError) as err:
        mnist.generate_mnist(str(tmp_path / "empty"))
    assert "empty" in str(err.value) and "t10k-labels-idx1-ubyte" in str(err.value)


def test_mnist_val_held_out_of_train(mnist_dir, mnist_arrays, monkeypatch):
    seen = {}

    def spy(images, labels, **kw):
        seen.update(images=images, labels=labels)
        return {}

    monkeypatch.setattr(mnist, "build_splits", spy)
    mnist.generate_mnist(str(mnist_dir), n_train=12, n_val=8, n_test=5)
    flat = {k: {v.tobytes() for v in imgs} for k, imgs in seen["images"].items()}
    assert len(flat["train"]) == 12 and len(flat["val"]) == 8 and len(flat["test"]) == 5
    assert not flat["train"] & flat["val"]
    all_train = {(v.astype(np.float32) / 255.0).tobytes() for v in mnist_arrays["train_images"]}
    assert flat["train"] | flat["val"] == all_train
    with pytest.raises(ConfigError, match="exceeds"):
        mnist.generate_mnist(str(mnist_dir), n_train=15, n_val=6, n_test=5)


def test_mnist_splits_structure(mnist_splits):
    assert set(mnist_splits) == SPLITS
    assert [len(mnist_splits[s]) for s in ("train", "val", "test_orig")] == [14, 6, 10]
    train = mnist_splits["train"]
    # standardised with train statistics
    np.testing.assert_allclose(train.x.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(train.x.std(0), 1.0, atol=1e-3)
    for name, gs in mnist_splits.items():
        assert gs.x.shape[1] == 5 and gs.y.dtype == np.int64
        assert set(gs.y.tolist()) <= set(range(10))
        if name != "test_noisyc":  # three replicated intensity channels
            np.testing.assert_array_equal(gs.x[:, 0], gs.x[:, 1])
        n = gs.num_nodes
        assert (n <= 75).all() and (n > 1).all()
        # point graphs: centroids stored, no edges; each graph is complete when derived
        assert gs.points and gs.coord.shape == (gs.total_nodes, 2) and gs.edge_index.size == 0
        for i in (0, len(gs) - 1):
            e, w = gs.edges(i)
            assert e.shape[1] == n[i] * (n[i] - 1) and len(w) == e.shape[1]
            assert (e[0] != e[1]).all() and (w > 0).all()
        sums = np.add.reduceat(gs.gt, gs.node_ptr[:-1])
        np.testing.assert_allclose(sums, 1.0, atol=1e-5)  # every blob image has bright nodes
        if name in ("train", "test_orig"):  # gt>0 nodes are brighter than every gt=0 node
            for i in range(len(gs)):
                x = gs.x[gs.node_ptr[i]:gs.node_ptr[i + 1], 0]
                g = gs.gt[gs.node_ptr[i]:gs.node_ptr[i + 1]]
                assert (g == 0).any() and x[g > 0].min() > x[g == 0].max()


def test_noisy_splits(mnist_splits):
    orig, noisy, noisyc = (mnist_splits[s] for s in ("test_orig", "test_noisy", "test_noisyc"))
    for gs in (noisy, noisyc):
        np.testing.assert_array_equal(gs.gt, orig.gt)
        np.testing.assert_array_equal(gs.coord, orig.coord)
        np.testing.assert_array_equal(gs.y, orig.y)
        np.testing.assert_array_equal(gs.x[:, 3:], orig.x[:, 3:])  # coordinates untouched
    d = noisy.x[:, :3] - orig.x[:, :3]
    np.testing.assert_allclose(d[:, 0], d[:, 1], atol=1e-6)
    np.testing.assert_allclose(d[:, 0], d[:, 2], atol=1e-6)
    assert 0.3 < d[:, 0].std() < 0.5
    dc = noisyc.x[:, :3] - orig.x[:, :3]
    assert not np.allclose(dc[:, 0], dc[:, 1]) and not np.allclose(dc[:, 1], dc[:, 2])
    assert abs(np.corrcoef(dc[:, 0], dc[:, 1])[0, 1]) < 0.2
    assert 0.5 < dc.std() < 0.7


# ------------------------------------------------------------------------ superpixel pipeline


def _digit_like() -> np.ndarray:
    """The first scikit-learn digit, in [0, 1], upscaled to 28x28."""
    return mnist.upscale_digits(load_digits().images[:1] / 16.0)[0]


def test_superpixel_features_adjacency_gt():
    img = _digit_like()
    intensity, coord = superpixels.image_superpixels(img)
    n = len(intensity)
    assert 1 < n <= 75 and coord.shape == (n, 2)
    assert (coord >= 0).all() and (coord < 1).all()
    labels = superpixels.slic_segments(img)
    for k, seg in enumerate(np.unique(labels)[:3]):  # mean intensity and centre of mass
        mask = labels == seg
        r, c = np.nonzero(mask)
        assert intensity[k] == pytest.approx(img[mask].mean(), abs=1e-5)
        assert coord[k] == pytest.approx([r.mean() / 28, c.mean() / 28], abs=1e-5)
    edges, weights, gts = superpixels.superpixel_graphs([(intensity, coord)])
    e, w, gt = edges[0], weights[0], gts[0]
    assert e.shape == (2, n * (n - 1)) and (e[0] != e[1]).all()
    for k in (0, 7, len(w) - 1):  # plain (not squared) distance, as in the reference
        i, j = e[:, k]
        dist = np.sqrt(((coord[i] - coord[j]).astype(np.float64) ** 2).sum())
        assert w[k] == pytest.approx(np.exp(-dist / (0.1 * np.pi) ** 2), rel=1e-5)
    a = superpixels.adjacency(coord)
    assert np.allclose(np.diag(a), 0) and np.allclose(a, a.T)
    assert gt.sum() == pytest.approx(1.0) and (gt[intensity < 0.5] == 0).all()
    bright = intensity >= 0.5
    np.testing.assert_allclose(gt[bright], intensity[bright] / intensity[bright].sum(), rtol=1e-5)
    assert superpixels.gt_attention(np.array([0.1, 0.49], np.float32)).sum() == 0


def test_pool_matches_serial():
    imgs, _ = _blob_images(9, seed=5)
    imgs = imgs.astype(np.float32) / 255.0
    serial = superpixels.images_to_superpixels(imgs, workers=1)
    pooled = superpixels.images_to_superpixels(imgs, workers=2, chunksize=3)
    assert len(pooled) == 9
    for (i1, c1), (i2, c2) in zip(serial, pooled, strict=True):
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(c1, c2)


def test_digits_offline_tiny():
    s = mnist.generate_digits(n_train=30, n_val=10, n_test=12)
    assert set(s) == SPLITS
    assert [len(s[k]) for k in ("train", "val", "test_orig", "test_noisy")] == [30, 10, 12, 12]
    assert all(gs.x.shape[1] == 5 for gs in s.values())
    assert (s["train"].num_nodes <= 75).all()
    with pytest.raises(ConfigError, match="1797"):
        mnist.generate_digits(n_train=1700, n_val=100, n_test=100)


def test_registry_mnist_and_digits(monkeypatch, tmp_path, mnist_dir):
    from ablate.data import load_graphsets

    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    a = load_graphsets("mnist_sp", path=str(mnist_dir), n_train=5, n_val=2, n_test=3)
    assert set(a) == SPLITS and len(a["test_noisyc"]) == 3
    assert len(list((tmp_path / "cache").glob("mnist_sp-*.npz"))) == 1
    b = load_graphsets("mnist_sp", path=str(mnist_dir), n_train=5, n_val=2, n_test=3)  # cached
    np.testing.assert_array_equal(a["test_noisy"].x, b["test_noisy"].x)
    d = load_graphsets("digits_sp", n_train=8, n_val=2, n_test=3)
    assert len(d["train"]) == 8 and d["val"].x.shape[1] == 5


# ------------------------------------------------------------------------------- TU fixture

SIZES = [3, 5, 8, 10, 20, 25, 26, 30, 40, 4, 6, 50]


def _write_tu(folder: Path, prefix: str, node_labels: bool) -> None:
    """A cycle per graph (both directions, plus one self loop), labels 1/2, node labels 1..3."""
    folder.mkdir(parents=True, exist_ok=True)
    ind, edges, off = [], [], 0
    for g, n in enumerate(SIZES):
        ind += [g + 1] * n
        for i in range(n):
            a, b = off + i + 1, off + (i + 1) % n + 1
            edges += [(a, b)] if g == 1 else [(a, b), (b, a)]  # graph 1 lists one direction
        if n >= 8:
            edges += [(off + 1, off + 5), (off + 5, off + 1)]  # node 0 gets degree 3
        off += n
    edges.append((1, 1))  # a self loop, must be dropped
    (folder / f"{prefix}_A.txt").write_text("".join(f"{a}, {b}\n" for a, b in edges))
    (folder / f"{prefix}_graph_indicator.txt").write_text("".join(f"{i}\n" for i in ind))
    (folder / f"{prefix}_graph_labels.txt").write_text(
        "".join(f"{1 + (g % 2)}\n" for g in range(len(SIZES))))
    if node_labels:
        (folder / f"{prefix}_node_labels.txt").write_text(
            "".join(f"{1 + k % 3}\n" for k in range(off)))
        (folder / f"{prefix}_node_attributes.txt").write_text(
            "".join(f"{0.5 * k}\n" for k in range(off)))


def _check_graphs(gs: GraphSet) -> None:
    for i in range(len(gs)):
        e = gs.edge_index[:, gs.edge_ptr[i]:gs.edge_ptr[i + 1]]
        n = gs.num_nodes[i]
        assert (e[0] != e[1]).all() and e.max() < n
        assert {tuple(p) for p in e.T} == {tuple(p) for p in e[::-1].T}  # symmetric
        assert e.shape[1] == 2 * (n + (n >= 8))  # cycle (+ chord), no duplicates


def test_tu_inductive_split_with_node_labels(tmp_path):
    _write_tu(tmp_path / "PROTEINS" / "raw", "PROTEINS", node_labels=True)
    s = tu.proteins(str(tmp_path), max_train_nodes=10, n_train_val=4, val_fraction=0.25)
    assert set(s) == {"train", "val", "test_large", "test_orig"}
    assert (len(s["train"]), len(s["val"]), len(s["test_orig"]), len(s["test_large"])) == (3, 1, 2,
                                                                                             8)
    for k in ("train", "val", "test_orig"):
        assert (s[k].num_nodes <= 10).all()
    large = sorted(s["test_large"].num_nodes.tolist())
    assert [n for n in SIZES if n > 10] == [n for n in large if n > 10]
    assert sorted(s["test_orig"].num_nodes) == [n for n in large if n <= 10]
    all_sizes = sorted(np.concatenate([s[k].num_nodes for k in ("train", "val", "test_large")]))
    assert all_sizes == sorted(SIZES)
    for gs in s.values():
        assert gs.x.shape[1] == 3 and (np.asarray(gs.x).sum(1) == 1).all()  # one-hot labels
        assert (gs.gt == 0).all() and gs.y.dtype == np.int64 and gs.edge_weight is None
        _check_graphs(gs)
        # graph labels 1/2 -> 0/1, alternating with the graph index (size identifies the graph)
        for n, y in zip(gs.num_nodes, gs.y, strict=True):
            assert y == SIZES.index(n) % 2
    # node labels 1..3 in file order -> one-hot channel (k % 3) of global node k
    big = s["test_large"]
    g = int(np.flatnonzero(big.num_nodes == 50)[0])
    start = sum(SIZES[:SIZES.index(50)])
    x = np.asarray(big.x[big.node_ptr[g]:big.node_ptr[g + 1]])
    np.testing.assert_array_equal(x.argmax(1), (start + np.arange(50)) % 3)


def test_tu_degree_features_and_collab(tmp_path, monkeypatch):
    _write_tu(tmp_path / "COLLAB", "COLLAB", node_labels=False)
    s = tu.collab(str(tmp_path), max_train_nodes=8, n_train_val=5, val_fraction=0.2)
    assert "test_orig" not in s  # all 5 small graphs used for train/val
    assert len(s["train"]) + len(s["val"]) == 5 and len(s["test_large"]) == 7
    for gs in s.values():
        assert gs.x.shape[1] == 4  # max degree 3 over the dataset, + 1
        _check_graphs(gs)
        for i in range(len(gs)):
            e = gs.edge_index[:, gs.edge_ptr[i]:gs.edge_ptr[i + 1]]
            deg = np.bincount(e[0], minlength=gs.num_nodes[i])
            x = np.asarray(gs.x[gs.node_ptr[i]:gs.node_ptr[i + 1]])
            np.testing.assert_array_equal(x.argmax(1), deg)
    from ablate.data import load_graphsets

    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    r = load_graphsets("collab", path=str(tmp_path), max_train_nodes=8, n_train_val=5,
                       val_fraction=0.2)
    np.testing.assert_array_equal(np.asarray(r["test_large"].x), np.asarray(s["test_large"].x))


def test_tu_missing_paths_raise(tmp_path):
    with pytest.raises(ConfigError, match="PROTEINS_A.txt"):
        tu.proteins(None)
    with pytest.raises(ConfigError, match="nowhere"):
        tu.dd(str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError) as err:
        tu.proteins(str(tmp_path))
    assert str(tmp_path) in str(err.value) and "PROTEINS_A.txt" in str(err.value)
