"""A user's own PyG dataset as a study's data set (`dataset=pyg`, issue 52): its own split or
the protocols, the graphs it becomes, one line where it cannot serve, and a tiny study from a
study file in the user's own folder, through a real local Ray."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from _pyg_study import pyg_study

from ablate.data import load_graphsets, resolve_params
from ablate.errors import ConfigError

USER_MODULE = '''
"""A user's graphs: rings and paths of 4..{top} nodes; label 1 for a ring."""
import torch
from torch_geometric.data import Data


class Rings(list):
    def __init__(self, n=40, top=12, split=False, float_y=False, no_y=False):
        g = torch.Generator().manual_seed(0)
        for i in range(n):
            k = int(torch.randint(4, top + 1, (1,), generator=g))
            src = torch.arange(k - (i % 2 == 0))
            ring = i % 2 == 1
            dst = (src + 1) % k
            edge = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
            y = torch.tensor([float(ring) + 0.5 if float_y else int(ring)])
            data = Data(x=torch.ones(k, 2) * i / n, edge_index=edge, num_nodes=k)
            if not no_y:
                data.y = y
            self.append(data)
        self._split = split

    def get_idx_split(self):
        if not self._split:
            raise AttributeError("no split")
        n = len(self)
        return {"train": torch.arange(0, n // 2), "valid": torch.arange(n // 2, 3 * n // 4),
                "test": torch.arange(3 * n // 4, n)}


class Plain(list):
    def __init__(self, n=40):
        self.extend(Rings(n))


def broken(**kw):
    raise RuntimeError("cannot open the archive")
'''


@pytest.fixture
def user(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "mygraphs.py").write_text(USER_MODULE)
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    yield folder
    sys.modules.pop("mygraphs", None)


def test_its_own_split_or_the_protocols(user):
    own = load_graphsets("pyg", target="mygraphs:Rings", kwargs={"split": True})
    assert [len(own[s]) for s in ("train", "val", "test_orig")] == [20, 10, 10]
    plain = load_graphsets("pyg", target="mygraphs:Plain")  # no get_idx_split: inductive
    assert sorted(plain) in (["test_large", "train", "val"], ["test_large", "test_orig", "train", "val"])
    limit = int(np.median(np.concatenate([plain[s].num_nodes for s in plain if s != "val"])))
    assert plain["train"].num_nodes.max() <= limit
    cv = load_graphsets("pyg", target="mygraphs:Plain", protocol="cv", folds=4, fold=1)
    assert len(cv["test_orig"]) == 10 and sorted(np.unique(cv["train"].y)) == [0, 1]
    g = own["train"].graph(1)  # a ring of k nodes: 2k directed edges, no self loop
    assert g.edge_index.shape[1] == 2 * g.num_nodes and int(g.y) == 1
    assert (g.edge_index[0] != g.edge_index[1]).all()


@pytest.mark.parametrize("params, words", [
    ({}, ["dataset pyg needs data.target="]),
    ({"target": "mygraphs.Rings"}, ["is not of the form"]),
    ({"target": "mygraphs:Rings", "protocol": "own2"}, ["data.protocol", "auto"]),
    ({"target": "mygraphs:Rings", "kwargs": [1, 2]}, ["data.kwargs must be a mapping"]),
])
def test_what_is_checked_before_anything_is_built(user, params, words):
    with pytest.raises(ConfigError) as e:
        resolve_params("pyg", params)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_nested_kwargs_come_back_from_the_runners_frozen_form():
    """A study's nested mapping (OGB's `meta_dict`) reaches the class as a mapping again; a
    list of pairs that was never a mapping (keys out of order) stays as it is."""
    from ablate.data.pyg_user import kwargs_of
    from ablate.runner.study.expand import _freeze

    kwargs = {"name": "x", "meta_dict": {"num tasks": "1", "dir_path": "/d", "deep": {"b": 1, "a": 2}},
              "pairs": [["z", 1], ["a", 2]], "ids": [1, 2]}
    assert kwargs_of(_freeze(kwargs)) == {
        "name": "x", "meta_dict": {"dir_path": "/d", "num tasks": "1", "deep": {"a": 2, "b": 1}},
        "pairs": (("z", 1), ("a", 2)), "ids": (1, 2)}


@pytest.mark.parametrize("params, words", [
    ({"target": "nomodule_here:Rings"}, ["no module named 'nomodule_here'"]),
    ({"target": "mygraphs:Ringz"}, ["has no attribute 'Ringz'", "did you mean 'Rings'"]),
    ({"target": "mygraphs:broken"}, ["raised RuntimeError: cannot open the archive"]),
    ({"target": "mygraphs:Rings", "kwargs": {"no_y": True}}, ["has no label y"]),
    ({"target": "mygraphs:Rings", "kwargs": {"float_y": True}}, ["a regression target"]),
    ({"target": "mygraphs:Plain", "protocol": "own"}, ["has no get_idx_split"]),
    ({"target": "mygraphs:Rings"}, ["get_idx_split() of Rings raised AttributeError: no split"]),
])
def test_where_it_cannot_serve_one_line(user, params, words):
    with pytest.raises(ConfigError) as e:
        load_graphsets("pyg", **params)
    assert "\n" not in str(e.value)
    for w in words:
        assert w in str(e.value), str(e.value)


@pytest.mark.slow
def test_a_study_file_in_the_users_folder_runs_through_ray(user, ray_env, capsys):
    """From the user's own folder, a study naming their class: planned and dry-run checked
    (a class that does not import is exit 2 before Ray), trained on a real local Ray."""
    from ablate.run import main
    from ablate.runner.execute.store import read_trials

    study = pyg_study("a user's PyG dataset",
                      'data: {target: "mygraphs:Rings", kwargs: {n: 48}, protocol: cv, folds: 4}\n'
                      "grid: {data.fold: [0, 1]}")
    (user / "mine.yaml").write_text(study)
    out = user / "results"
    assert main(["study=./mine.yaml", "data.target=mygraphs:Nope", "dry_run=true",
                 f"results_dir={out}"]) == 2
    assert "has no attribute 'Nope'" in capsys.readouterr().err
    assert main(["study=./mine.yaml", "supervision=sup", "pool_layers=[2]", f"results_dir={out}"]) == 2
    assert "needs ground-truth attention" in capsys.readouterr().err
    assert main(["study=./mine.yaml", f"results_dir={out}"]) == 0
    df = read_trials(str(out), "mine")
    assert set(df["dataset"]) == {"pyg"} and set(df["split"]) == {"val", "test_orig"}
    assert (df["status"] == "ok").all() and df["trial_id"].nunique() == 4
