"""Prepared data as the cache stores them (issue 25): compact, memory-mapped, versioned.

MNIST-75SP graphs are point graphs (centroids; the adjacency derived per batch, bit for bit
what was stored before), the noisy tests share test_orig's arrays, TU features are one-hot
indices; recipes keep their hashes (so trial ids do not change) and trials their records;
a file in an older format is rebuilt with one line; leave-one-out attention runs only where
there is ground truth and up to `LOO_MAX_NODES` nodes.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from ablate.config import TrialConfig, resolve
from ablate.data import dataset_cache_path, dataset_recipe_hash, load_graphsets
from ablate.data.cache import FORMAT, read_meta
from ablate.data.graphs import GraphSet
from ablate.data.kernel import adjacency, adjacency_batch
from ablate.data.onehot import OneHot
from ablate.trial.batches import SIZE_BREAK, collate, eval_batches
from ablate.trial.evaluate import evaluate, loo_plan
from ablate.trial.graph import run_trial
from ablate.trial.setup import seeded_model
from ablate.trial.weak import LOO_MAX_NODES

ROOT = Path(__file__).resolve().parents[1]
BEFORE = json.loads((ROOT / "tests" / "fixtures" / "digits_records_before_issue25.json").read_text())
TINY_DIGITS = {"n_train": 24, "n_val": 8, "n_test": 8}


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# ------------------------------------------------------------------------- identity


# recipe hashes computed by the code before issue 25 (commit 8c81261): storage changed, the
# data did not, so recipes (and the trial ids hashed from them) are the same. Issue 26 made
# MNIST-75SP and digits as the authors made them (new data, new hashes: `RECIPES_ISSUE26`);
# their data of before are the recipe with slic=v0.19 and noise=nodes, which keeps its hash.
EARLIER = (("noise", "nodes"), ("slic", "v0.19"))
RECIPES_BEFORE = {
    ("colors", ()): "c3649632a45abe75",
    ("triangles", ()): "215c687d92f6b785",
    ("digits_sp", EARLIER): "dfe5bb3195fe3287",
    ("digits_sp", (("final", True), ("gt", "any"), *EARLIER)): "d5154f477e1dbfab",
    ("mnist_sp", (("final", True), *EARLIER)): "c27c5d10ef1a3e97",
    ("mnist_sp", (("final", True), ("gt", "any"), *EARLIER)): "f2a356049b654bdc",
    ("proteins", (("final", True), ("split", "earlier"), ("split_seed", 0))): "48c8290d2a46f6f0",
    ("dd", (("final", True), ("split", "earlier"), ("split_seed", 3))): "366100ae428f8666",
    ("collab", (("final", True), ("split", "earlier"), ("split_seed", 9))): "65fa0e1905106eff",
}
# the recipes of issue 26 (SLIC as scikit-image 0.15, the authors' noise scale): docs/recipes.md
RECIPES_ISSUE26 = {
    ("digits_sp", ()): "993cd2b5e043c5ff",
    ("digits_sp", (("final", True), ("gt", "any"))): "b3be2fd0af889509",
    ("mnist_sp", (("final", True),)): "e6aca41fc6d69f18",
    ("mnist_sp", (("final", True), ("gt", "any"))): "653203162aedd377",
}

# the TU recipes of issue 33 (the authors' split rule, split=authors): new data, new hashes;
# the rule before is split=earlier, which keeps its hash (RECIPES_BEFORE)
RECIPES_ISSUE33 = {
    ('proteins', (('final', True), ('split_seed', 0))): "e20f1950404473e5",
    ('dd', (('final', True), ('split_seed', 3))): "6b515c4bdc8e9c36",
    ('dd', (('final', True), ('max_train_nodes', 300), ('split_seed', 3))): "1eb1f711142a16e2",
    ('collab', (('final', True), ('split_seed', 9))): "dfc0aafd3c3ade60",
}


@pytest.mark.parametrize("name,params", list(RECIPES_BEFORE))
def test_recipe_hashes_are_those_before_the_storage_change(name, params):
    assert dataset_recipe_hash(name, dict(params)) == RECIPES_BEFORE[(name, params)]


@pytest.mark.parametrize("name,params", list(RECIPES_ISSUE33))
def test_tu_recipe_hashes_of_issue_33(name, params):
    assert dataset_recipe_hash(name, dict(params)) == RECIPES_ISSUE33[(name, params)]


@pytest.mark.parametrize("name,params", list(RECIPES_ISSUE26))
def test_mnist_recipe_hashes_of_issue_26(name, params):
    assert dataset_recipe_hash(name, dict(params)) == RECIPES_ISSUE26[(name, params)]


def _close(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() <= b.keys() and all(_close(a[k], b[k]) for k in a)
    return a == b


@pytest.mark.parametrize("row", sorted(BEFORE["rows"]))
def test_digits_records_equal_those_before_the_storage_change(cache, row):
    """Seed by seed with dense leave-one-out (global_seq), a pack (sup), weak supervision's
    two stages (gin_weak): the records of the code before issue 25 (stored in the fixture),
    on the data of before (issue 26's slic=v0.19, noise=nodes)."""
    kw = dict(BEFORE["rows"][row])
    cfg = TrialConfig(dataset="digits_sp", data_params={**BEFORE["data"], **dict(EARLIER)},
                      epochs=BEFORE["epochs"],
                      **{k: tuple(v) if isinstance(v, list) else v for k, v in kw.items()})
    got = json.loads(json.dumps(run_trial(cfg), default=str))  # the fixture's JSON types
    want = BEFORE["records"][row]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        bad = [k for k in w if k != "data_params" and not _close(w[k], g.get(k))]
        assert not bad, {k: (w[k], g.get(k)) for k in bad}
        assert json.loads(g["data_params"]) == {**json.loads(w["data_params"]), **dict(EARLIER)}


# ------------------------------------------------------------------------- the file


def test_point_graphs_store_centroids_and_share_arrays(cache):
    splits = load_graphsets("digits_sp", **TINY_DIGITS)
    path = dataset_cache_path("digits_sp", TINY_DIGITS)
    meta = read_meta(path)
    assert meta["format"] == FORMAT
    with zipfile.ZipFile(path) as z:
        members = {i.filename[:-4] for i in z.infolist()}
    assert "train/coord" in members and not any("edge_weight" in m for m in members)
    noisy = {m for m in members if m.startswith("test_noisy")}
    assert noisy == {"test_noisy/x", "test_noisyc/x"}  # their own features only
    assert meta["layout"]["test_noisyc"]["fields"]["coord"] == "test_orig/coord"
    for gs in splits.values():  # read back memory-mapped, read-only
        assert isinstance(gs.x, np.memmap) and not gs.x.flags.writeable and gs.points
    e, w = splits["val"].edges(0)  # the public view: the complete graph with its weights
    n = splits["val"].num_nodes[0]
    assert e.shape == (2, n * (n - 1)) and w.dtype == np.float32
    data = splits["val"].graph(0)
    assert data.edge_index.dtype == torch.long and data.edge_weight.shape == (n * (n - 1),)


def test_derived_adjacency_is_bit_for_bit_the_stored_one_of_before(cache):
    """`adjacency_batch` (torch, per padded batch) against `adjacency` (NumPy, per graph,
    stored as float32 before): every entry equal."""
    gs = load_graphsets("digits_sp", **TINY_DIGITS)["train"]
    b = collate(gs)
    for i in range(len(gs)):
        n0, n1 = gs.node_ptr[i], gs.node_ptr[i + 1]
        want = adjacency(np.array(gs.coord[n0:n1])).astype(np.float32)
        got = b.A[i, : n1 - n0, : n1 - n0].numpy()
        assert np.array_equal(got, want)
        assert not b.A[i, n1 - n0:].any() and not b.A[i, :, n1 - n0:].any()  # padding
    one = adjacency_batch(b.coord[:3], b.mask[:3])
    assert torch.equal(one, b.A[:3])


def test_one_hot_features_collate_as_their_dense_rows():
    rng = np.random.default_rng(0)
    sizes = np.array([3, 5, 2])
    index = rng.integers(-1, 4, sizes.sum()).astype(np.int32)
    hot = OneHot(index, 4)
    ptr = np.concatenate([[0], np.cumsum(sizes)])
    edges = np.zeros((2, 0), np.int64)
    zero = np.zeros(4, np.int64)
    a = GraphSet(hot, np.zeros(10, np.float32), ptr, edges, zero, np.arange(3))
    b = a.replace(x=np.asarray(hot))
    assert np.array_equal(np.asarray(a.subset([2, 0]).x), np.asarray(b.subset([2, 0]).x))
    assert torch.equal(collate(a, np.array([1, 2])).x, collate(b, np.array([1, 2])).x)
    assert OneHot.from_dense(np.asarray(hot)).index.tolist() == index.tolist()


def test_an_older_cache_file_is_rebuilt_with_one_line(cache, capsys):
    path = dataset_cache_path("digits_sp", TINY_DIGITS)
    path.parent.mkdir(parents=True)
    old = {"__meta__": np.array(json.dumps({"name": "digits_sp", "splits": ["train"]})),
           "train/x": np.zeros((2, 5), np.float32)}  # format 1: no "format" key
    np.savez(path, **old)
    capsys.readouterr()
    assert len(load_graphsets("digits_sp", **TINY_DIGITS)["train"]) == 24
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "format 1" in lines[0] and "rebuilding" in lines[0], lines
    assert read_meta(path)["format"] == FORMAT
    assert sorted(p.name for p in cache.iterdir()) == [path.name]  # no temp file left
    path.write_bytes(path.read_bytes()[:1000])  # a torn file (not ours: atomic writes)
    assert len(load_graphsets("digits_sp", **TINY_DIGITS)["val"]) == 8
    assert "rebuilding" in capsys.readouterr().err


def _env() -> dict:
    import os

    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_preparation_prints_no_traceback_when_its_pool_ends(tmp_path):
    """The superpixel pool's workers used to inherit the driver's SIGTERM handler and print a
    traceback each when the pool shut them down."""
    script = ("from ablate.runner.execute.signals import raise_on_sigterm; raise_on_sigterm(); "
              "from ablate.data import load_graphsets; "
              "load_graphsets('digits_sp', n_train=200, n_val=4, n_test=4)")  # 2 pool chunks
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, env={**_env(), "ABLATE_CACHE": str(tmp_path)})
    assert run.returncode == 0 and run.stderr == "", run.stderr


# ------------------------------------------------------------------------- leave-one-out


def _edge_set(sizes, gt_graphs=()) -> GraphSet:
    """Rings of `sizes` nodes, 2 features; ground truth on node 0 of the graphs `gt_graphs`."""
    xs, edges, gts = [], [], []
    for g, n in enumerate(sizes):
        i = np.arange(n)
        edges.append(np.stack([np.concatenate([i, (i + 1) % n]), np.concatenate([(i + 1) % n, i])]))
        xs.append(np.ones((n, 2), np.float32))
        gt = np.zeros(n, np.float32)
        if g in gt_graphs:
            gt[0] = 1.0
        gts.append(gt)
    return GraphSet.from_graphs(xs, edges, np.zeros(len(sizes), np.int64), gts)


def test_leave_one_out_only_with_ground_truth_and_up_to_the_size_limit():
    cfg = resolve(TrialConfig(dataset="proteins", backbone="gcn", pool_layers=(),
                              filters=(4,)))
    assert loo_plan(cfg, "test_large", _edge_set([5, 6])) == (False, "")  # no ground truth
    assert loo_plan(cfg, "val", _edge_set([5, 6], (0,)))[0] is False
    big = LOO_MAX_NODES + 20
    gs = _edge_set([5, 6, 7, big], gt_graphs=(0, 1, 2, 3))
    loo, note = loo_plan(cfg, "test_large", gs)
    assert loo and "1 of 4 graphs above 256 nodes" in note
    batches = eval_batches(gs, 100)
    assert all((b.n_nodes.max() <= SIZE_BREAK) or (b.n_nodes.min() > SIZE_BREAK)
               for _, b in batches)  # no batch straddles the limit
    model = seeded_model(cfg, 0, 2, 2, torch.device("cpu"))
    rec = evaluate(model, batches, cfg, loo=True)
    small = evaluate(model, eval_batches(gs.subset([0, 1, 2]), 100), cfg, loo=True)
    assert rec["attn_auc_l0"] == small["attn_auc_l0"] and rec["ft"] == small["ft"]
    assert rec["n_graphs"] == 4 and rec["accuracy"] is not None


def test_mnist_recipes_name_the_slic_kernels_unless_they_are_the_pinned_ones(monkeypatch):
    """Another scikit-image or NumPy release may place other superpixels: its MNIST recipes get
    other hashes (so other trial ids); the pinned versions keep issue 26's (issue 35)."""
    import ablate.data as data

    params = {"final": True}
    pinned = dataset_recipe_hash("mnist_sp", params)
    assert pinned == RECIPES_ISSUE26[("mnist_sp", (("final", True),))]
    monkeypatch.setattr(data, "slic_versions", lambda: {"scikit-image": "0.27", "numpy": "2.4"})
    assert dataset_recipe_hash("mnist_sp", params) != pinned
    assert dataset_recipe_hash("colors") == RECIPES_BEFORE[("colors", ())]  # no SLIC in it
