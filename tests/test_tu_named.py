"""Any TU data set by name (`dataset=tu:NAME`) and the split protocols (issue 52).

The loader against PyG's own `TUDataset` on the real fixture files (PyG as the independent
reader), stratified folds, the first download of a set with no published checksum, and the
bad inputs (one line each)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from ablate.data import dataset_recipe_hash, download, load_graphsets, resolve_params
from ablate.data.cache import read_meta
from ablate.data.folds import cv_split, stratified_folds
from ablate.data.tu_named import read_named
from ablate.errors import ConfigError

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "tu"
SETS = [("MUTAG", False), ("ENZYMES", True), ("ENZYMES", False), ("NCI1", False),
        ("IMDB-BINARY", False)]
need_fixtures = pytest.mark.skipif(not (FIXTURES / "MUTAG.zip").is_file(),
                                   reason="the shared TU fixtures are not here")


@pytest.fixture(scope="module")
def unzipped(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tu")
    for name in {n for n, _ in SETS}:
        with zipfile.ZipFile(FIXTURES / f"{name}.zip") as z:
            z.extractall(root)
    return root


@need_fixtures
@pytest.mark.parametrize("name, attr", SETS)
def test_each_fixture_set_reads_as_pygs_tudataset(unzipped, tmp_path, name, attr):
    """Graph count, node features (labels, attributes first as PyG puts them, or one-hot
    degree as PyG's `OneHotDegree`), edges and labels equal PyG's reader, graph for graph."""
    import shutil

    import torch_geometric.transforms as T
    from torch_geometric.datasets import TUDataset
    from torch_geometric.utils import degree

    ours = read_named(name, str(unzipped), attr)
    shutil.copytree(unzipped / name, tmp_path / name / "raw")
    theirs = TUDataset(str(tmp_path), name, use_node_attr=attr)
    assert len(ours) == len(theirs)
    if theirs[0].x is None:  # no node labels: one-hot degree over the whole set
        top = max(int(degree(g.edge_index[0], g.num_nodes).max()) for g in theirs)
        theirs.transform = T.OneHotDegree(top)
    assert ours.num_features == theirs[0].x.shape[1]
    for i in range(len(theirs)):
        a, b = ours.graph(i), theirs[i]
        assert a.num_nodes == b.num_nodes and int(a.y) == int(b.y), i
        assert torch.equal(torch.as_tensor(np.asarray(a.x)), b.x.float()), i
        assert set(map(tuple, a.edge_index.t().tolist())) == set(map(tuple, b.edge_index.t().tolist())), i


def test_stratified_folds_cover_every_graph_once_and_keep_class_proportions():
    rng = np.random.default_rng(0)
    y = rng.choice(3, size=517, p=[0.6, 0.3, 0.1])
    folds = stratified_folds(y, 10, seed=4)
    allids = np.concatenate(folds)
    assert len(folds) == 10 and len(allids) == len(y) and len(np.unique(allids)) == len(y)
    share = np.bincount(y) / len(y)
    for test in folds:
        counts = np.bincount(y[test], minlength=3)
        # stratified: each class's count in a fold is floor or ceil of its even share
        assert (np.abs(counts - np.bincount(y) / 10) < 1).all(), counts
        assert np.allclose(counts / len(test), share, atol=0.1)
    assert all(np.array_equal(a, b) for a, b in zip(folds, stratified_folds(y, 10, seed=4)))
    assert not all(np.array_equal(a, b) for a, b in zip(folds, stratified_folds(y, 10, seed=5)))


def test_a_cv_split_is_disjoint_and_complete():
    y = np.repeat([0, 1], [60, 40])
    for f in range(5):
        tr, va, te = cv_split(y, 5, f, seed=1, val_fraction=0.1)
        both = np.concatenate([tr, va, te])
        assert len(both) == 100 and len(np.unique(both)) == 100
        assert len(te) == 20 and len(va) == 8
        assert np.bincount(y[va]).tolist() == [5, 3]  # stratified inner validation split


@need_fixtures
def test_protocols_make_the_splits_they_name(unzipped, monkeypatch, tmp_path):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    cv = load_graphsets("tu:MUTAG", path=str(unzipped), protocol="cv", fold=3)
    assert sorted(cv) == ["test_orig", "train", "val"]
    assert len(cv["train"]) + len(cv["val"]) + len(cv["test_orig"]) == 188
    assert len(cv["test_orig"]) in (18, 19)
    ind = load_graphsets("tu:MUTAG", path=str(unzipped))  # inductive, median limit
    limit = int(np.median(read_named("MUTAG", str(unzipped)).num_nodes))
    assert ind["train"].num_nodes.max() <= limit < ind["test_large"].num_nodes.max()
    assert resolve_params("tu:MUTAG")["protocol"] == "inductive"
    # the fold is part of the recipe; where the files are is not
    assert dataset_recipe_hash("tu:MUTAG", {"protocol": "cv", "fold": 1}) != \
        dataset_recipe_hash("tu:MUTAG", {"protocol": "cv", "fold": 2})
    assert dataset_recipe_hash("tu:MUTAG", {"path": "/a"}) == dataset_recipe_hash("tu:MUTAG")


@pytest.mark.parametrize("name, params, words", [
    ("tu:NCI2", {}, ["unknown TU data set 'NCI2'", "did you mean 'tu:NCI1'"]),
    ("tu:", {}, ["give a TU name after 'tu:'"]),
    ("tu:MUTAG", {"protocol": "cv", "fold": 10}, ["data.fold must be in 0..9"]),
    ("tu:MUTAG", {"protocol": "cv", "fold": -1}, ["data.fold must be >= 0"]),
    ("tu:MUTAG", {"protocol": "loo"}, ["data.protocol", "inductive, cv"]),
    ("NCI1", {}, ["unknown dataset 'NCI1'", "did you mean 'tu:NCI1'"]),
])
def test_bad_names_and_folds_are_one_line(name, params, words):
    with pytest.raises(ConfigError) as e:
        resolve_params(name, params)
    assert "\n" not in str(e.value)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_a_name_outside_the_list_reads_the_users_own_files(tmp_path):
    assert resolve_params("tu:MY_SET", {"path": str(tmp_path)})["path"] == str(tmp_path)


@need_fixtures
def test_node_attributes_where_the_set_has_none(unzipped):
    with pytest.raises(ConfigError, match="MUTAG has no node attributes"):
        read_named("MUTAG", str(unzipped), node_attr=True)


def test_supervision_without_ground_truth_is_refused():
    from ablate.config import TrialConfig, resolve

    for sup in ("sup", "gt"):
        with pytest.raises(ConfigError, match="needs ground-truth attention"):
            resolve(TrialConfig(dataset="tu:NCI1", backbone="chebygin", pool_layers=(2,),
                                supervision=sup))
    cfg = resolve(TrialConfig(dataset="tu:NCI1", backbone="chebygin", pool_layers=(2,),
                              supervision="weak"))
    assert cfg.K == 3 and cfg.epochs == 50  # the authors' TU recipe, ChebyNet K = 3


@need_fixtures
def test_first_download_of_a_set_without_a_published_sum_records_it(tmp_path, monkeypatch):
    """tu:MUTAG from a server on 127.0.0.1: no known checksum, so the zip is trusted on first
    use and its SHA-256 recorded beside the files and in the prepared cache."""
    import hashlib

    from test_download import Server

    blob = (FIXTURES / "MUTAG.zip").read_bytes()
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(download.ENV_ALLOW, raising=False)
    srv = Server({"MUTAG.zip": blob})
    try:
        splits = load_graphsets("tu:MUTAG", url=srv.url, protocol="cv", fold=0)
    finally:
        srv.close()
    assert srv.gets == ["/base/MUTAG.zip"]
    record = json.loads((tmp_path / "cache" / "data" / "MUTAG" / download.SOURCE_RECORD).read_text())
    assert record["sha256"] == hashlib.sha256(blob).hexdigest() and record["checked"] is False
    from ablate.data import dataset_cache_path

    meta = read_meta(dataset_cache_path("tu:MUTAG", {"protocol": "cv", "fold": 0}))
    assert meta["source"]["sha256"] == record["sha256"]
    assert len(splits["test_orig"]) in (18, 19)
    from ablate.config import TrialConfig
    from ablate.trial.graph import run_trial

    recs = run_trial(TrialConfig(dataset="tu:MUTAG", backbone="gcn", pool_layers=(), epochs=1,
                                 loo_auc=False, data_params={"url": srv.url, "protocol": "cv"}))
    assert {r["dataset_source"] for r in recs} == {f"sha256:{record['sha256']} (first use)"}


def test_offline_without_a_data_path_is_one_line(tmp_path, monkeypatch):
    """A TU set not yet here, no network (the tests' closed loopback port), no data.path: one
    line naming the URL tried and the folder to fill by hand."""
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(download.ENV_ALLOW, raising=False)
    with pytest.raises(ConfigError) as e:
        load_graphsets("tu:NCI1")
    text = str(e.value)
    assert "cannot download" in text and "NCI1.zip" in text and "\n" not in text
    assert str(tmp_path / "cache" / "data" / "NCI1") in text
