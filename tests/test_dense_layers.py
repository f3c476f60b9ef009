"""Backbones beyond the paper's (`ablate.models.backbones`): PyG's dense layers by name and a
user's dense layer by 'package.module:Class', inside GraphNet, packed, through the runner."""

from __future__ import annotations

import copy
import os
import re
import textwrap
from pathlib import Path

import pytest
import torch
from _packs import TINY, tmp_cache  # noqa: F401 (tmp_cache: autouse fixture)
from test_batched import _assert_matches, _sequential, tiny

from ablate.config import BACKBONES, TrialConfig, inapplicable, resolve, trial_id
from ablate.errors import ConfigError
from ablate.models import Graph, GraphNet
from ablate.models.backbones import DENSE_LAYERS, check_layer
from ablate.trial import packed
from ablate.trial.graph import run_trial_full

DENSE = tuple(DENSE_LAYERS)


def _batch(B: int = 3, N: int = 7, C: int = 5, seed: int = 0):
    """Random symmetric graphs padded to N nodes: x (B, N, C), A (B, N, N), mask (B, N)."""
    g = torch.Generator().manual_seed(seed)
    n = torch.tensor([N, N - 2, N - 3])[:B]
    mask = torch.arange(N) < n.unsqueeze(1)
    A = (torch.rand(B, N, N, generator=g) < 0.45).float()
    A = torch.triu(A, 1)
    A = (A + A.transpose(1, 2)) * mask.unsqueeze(1) * mask.unsqueeze(2)
    x = torch.randn(B, N, C, generator=g) * mask.unsqueeze(-1)
    return x, A, mask


def _pyg(name: str, conv: torch.nn.Module) -> torch.nn.Module:
    """A fresh PyG layer of `name` holding `conv`'s parameters (the independent reference)."""
    import torch_geometric.nn.dense as dense

    cls = getattr(dense, DENSE_LAYERS[name].split(":")[1])
    state = copy.deepcopy(conv.state_dict())
    # DenseGINConv resets the MLP it is given: its own copy
    ref = cls(copy.deepcopy(conv.nn)) if name == "dense_gin" else cls(conv.in_channels,
                                                                        conv.out_channels)
    ref.load_state_dict(state)
    return ref


@pytest.mark.parametrize("name", DENSE)
def test_network_equals_pyg_layers_applied_directly(name):
    """Global pool: GraphNet's output is PyG's layers applied in turn (ReLU between), the sum
    readout and the head, computed here from PyG's own modules."""
    cfg = resolve(TrialConfig(dataset="colors", backbone=name, pool_layers=(), filters=(6, 8)))
    torch.manual_seed(0)
    net = GraphNet(cfg, 5, 3).eval()
    x, A, mask = _batch()
    h = x
    for layer in net.layers:
        h = torch.relu(_pyg(name, layer.conv)(h, A, mask))
    want = net.head((h * mask.unsqueeze(-1)).sum(1))
    with torch.no_grad():
        got = net(x, Graph(A, mask)).out
    torch.testing.assert_close(got, want.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", DENSE)
def test_a_pooled_out_node_leaves_with_its_edges(name):
    """After pooling (a mask update), a dense layer sees the induced subgraph: on the kept
    nodes its output equals PyG's layer on that subgraph built explicitly, graph by graph."""
    cfg = resolve(TrialConfig(dataset="colors", backbone=name, pool_layers=(), filters=(4,)))
    torch.manual_seed(1)
    layer = GraphNet(cfg, 5, 2).layers[0].eval()
    x, A, mask = _batch(seed=3)
    keep = mask.clone()
    keep[0, [1, 4]] = False
    keep[1, 0] = False
    with torch.no_grad():
        out = layer(x, Graph(A, keep))
        ref = _pyg(name, layer.conv)
        for b in range(x.shape[0]):
            ids = keep[b].nonzero().squeeze(1)
            sub = torch.relu(ref(x[b, ids][None], A[b][ids][:, ids][None]))[0]
            torch.testing.assert_close(out[b, ids], sub, rtol=1e-5, atol=1e-6)
            assert out[b, ~keep[b]].abs().max() == 0


@pytest.mark.parametrize("name", DENSE)
def test_declared_units_cover_the_tensors_a_dense_layer_holds(name):
    """`footprint.DENSE_UNITS`: the (N, N) tensors alive at once evaluating a model of the layer
    on one 400-node graph, pooled and not (A, made before, is one of the units), and not
    absurdly more."""
    from test_footprint import _adjacency, _Live

    from ablate.trial import footprint

    n = 400
    unit = 4 * n * n
    for pool in ((), (2,)):
        cfg = resolve(TrialConfig(dataset="dd", backbone=name, pool_layers=pool, threshold=1e-3))
        net = GraphNet(cfg, 8, 2).eval()
        mask = torch.arange(n).unsqueeze(0) < n - 7
        A, x = _adjacency(n, 1), torch.randn(1, n, 8)
        with torch.no_grad(), _Live() as live:
            net(x, Graph(A, mask))
        units = footprint.dense_units(cfg)
        assert units - 2 < live.peak / unit + 1 <= units, (pool, live.peak / unit)


def test_names_resolve_as_documented_and_the_papers_ids_stay():
    assert set(DENSE) <= set(BACKBONES)
    gin = resolve(TrialConfig(dataset="colors", backbone="dense_gin"))
    gcn = resolve(TrialConfig(dataset="colors", backbone="dense_gcn"))
    assert (gin.K, gin.hidden, gcn.K, gcn.hidden) == (1, 256, 1, 0)  # COLORS: hidden 256 for GIN
    assert {"K", "hidden"} <= inapplicable(gcn) and "hidden" not in inapplicable(gin)
    assert trial_id(gin, "d") != trial_id(resolve(TrialConfig(dataset="colors", backbone="gin")), "d")


@pytest.mark.parametrize("kw, says", [
    (dict(backbone="dense_gcn", hidden=32), "backbone dense_gcn has no MLP"),
    (dict(backbone="dense_gin", K=2), "backbone dense_gin has K = 1"),
    (dict(backbone="dense_gni"), "did you mean 'dense_gin'?"),
    (dict(backbone="no_such_pkg_xyz.layers:Conv"), "no module named 'no_such_pkg_xyz'"),
    (dict(backbone="torch.nn:Linearr"), "torch.nn has no attribute 'Linearr'"),
    (dict(backbone="torch:relu"), "is a builtin_function_or_method, not a torch.nn.Module class"),
    (dict(backbone="torch.nn:Bilinear"), "Bilinear(3, 4) raised TypeError"),
    (dict(backbone="torch.nn:Linear"), "forward(x, adj, mask) on a tiny batch raised TypeError"),
    (dict(backbone="user_wrong_shape:Same"), "returned (2, 3, 3), not (2, 3, 4)"),
])
def test_bad_backbones_are_one_line(kw, says, tmp_path, monkeypatch):
    (tmp_path / "user_wrong_shape.py").write_text(
        "import torch\nclass Same(torch.nn.Module):\n    def __init__(self, i, o):\n"
        "        super().__init__()\n    def forward(self, x, adj, mask):\n        return x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as e:
        resolve(TrialConfig(dataset="colors", **kw))
    assert says in str(e.value) and "\n" not in str(e.value), str(e.value)


def _doc_layer() -> str:
    """The user's layer docs/usage.md shows (`# mylayers.py`): the one these tests train."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "usage.md").read_text()
    return re.search(r"^```python\n(# mylayers\.py.*?)^```", text, re.M | re.S).group(1)


USER_LAYER = _doc_layer()


def test_a_users_layer_trains_in_a_pack_as_seed_by_seed(tmp_path, monkeypatch):
    (tmp_path / "user_layers_pack.py").write_text(USER_LAYER)
    monkeypatch.syspath_prepend(str(tmp_path))
    check_layer("user_layers_pack:MeanConv")
    cfg = tiny(backbone="user_layers_pack:MeanConv", supervision="sup", epochs=2, seeds=(0, 1))
    assert packed.eligible(resolve(cfg))
    _assert_matches(run_trial_full(cfg), _sequential(cfg), (0, 1))


UNPACKABLE = """
import torch


class KeepPresent(torch.nn.Module):
    \"\"\"A layer with a data-dependent shape (the present nodes gathered): not vmappable.\"\"\"

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin = torch.nn.Linear(in_channels, out_channels)

    def forward(self, x, adj, mask):
        out = torch.zeros(*x.shape[:-1], self.lin.out_features)
        idx = mask.nonzero(as_tuple=True)
        out[idx] = self.lin((adj @ x + x)[idx])
        return out
"""


def test_a_layer_that_cannot_be_vmapped_trains_seed_by_seed(tmp_path, monkeypatch):
    from ablate.models.backbones import unpackable

    (tmp_path / "user_unpackable.py").write_text(UNPACKABLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = tiny(backbone="user_unpackable:KeepPresent", epochs=1, seeds=(0, 1), eval_every=1)
    assert "does not run under torch.func.vmap" in unpackable(cfg.backbone)
    assert not packed.eligible(resolve(cfg)) and packed.pack_key(resolve(cfg)) is None
    with pytest.raises(ConfigError, match="cannot train in a pack: its forward does not run"):
        packed.check_pack([resolve(cfg)])
    res = run_trial_full(cfg)
    assert {r["batched_seeds"] for r in res.records} == {1}
    assert {r["status"] for r in res.records} == {"ok"} and {r["seed"] for r in res.records} == {0, 1}


@pytest.mark.parametrize("name", [
    "dense_gcn", "dense_gin",
    pytest.param("dense_graph", marks=pytest.mark.slow),
    pytest.param("dense_sage", marks=pytest.mark.slow),
    pytest.param("dense_gat", marks=pytest.mark.slow),
])
def test_dense_members_train_in_a_pack_as_seed_by_seed(name):
    """Every record and curve of a packed (vmapped) pack equals the seed-by-seed run's."""
    cfg = tiny(backbone=name, supervision="sup", epochs=2, seeds=(0, 1))
    _assert_matches(run_trial_full(cfg), _sequential(cfg), (0, 1))


@pytest.mark.slow
def test_weak_supervision_with_a_dense_layer_packs_as_seed_by_seed():
    cfg = tiny(backbone="dense_gcn", supervision="weak", epochs=2, seeds=(0, 1))
    _assert_matches(run_trial_full(cfg), _sequential(cfg), (0, 1))


# --- end to end: a user's layer and a user's trial kind from a study file, through Ray ---

USER_KIND = '''
"""A user's trial kind: the graph kind under the user's own path."""
from ablate.trial.graph import KIND
'''

STUDY = f"""
kind: user_kind_e2e:KIND
description: a user's dense layer and trial kind
fixed: {{dataset: colors, backbone: "user_layers_e2e:MeanConv", epochs: 1, loo_auc: false}}
data: {dict(TINY)}
grid: {{pool_layers: [[], [1]]}}
seeds: [0, 1]
gpus_per_trial: 0
"""


def _users_folders(tmp_path, monkeypatch):
    """The user's layer and study file in the folder they run from (`work`, made the working
    directory) and their kind in a folder only on the driver's sys.path (`lib`)."""
    work, lib = tmp_path / "work", tmp_path / "lib"
    work.mkdir()
    lib.mkdir()
    (work / "user_layers_e2e.py").write_text(USER_LAYER)
    (lib / "user_kind_e2e.py").write_text(USER_KIND)
    (work / "mine.yaml").write_text(textwrap.dedent(STUDY))
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(lib))
    assert str(lib) not in os.environ.get("PYTHONPATH", "")


@pytest.mark.slow  # a real local Ray: about a minute here
def test_a_users_layer_and_kind_from_a_study_file_run_on_ray(ray_env, tmp_path, monkeypatch):
    """The study file, the layer (in the folder the user runs from) and the kind (in a folder
    only on the driver's sys.path, not on PYTHONPATH) import in the Ray workers."""
    from ablate.run import main
    from ablate.runner.execute.store import read_trials

    _users_folders(tmp_path, monkeypatch)
    assert main(["study=./mine.yaml", f"results_dir={tmp_path / 'results'}", "progress=none"]) == 0
    df = read_trials(tmp_path / "results", "mine")
    assert set(df.backbone) == {"user_layers_e2e:MeanConv"} and (df.status == "ok").all()
    assert df.trial_id.nunique() == 4 and set(df.seed) == {0, 1}  # global / attention x seeds


@pytest.mark.slow
def test_without_the_drivers_folders_the_workers_cannot_import_the_kind(ray_env, tmp_path,
                                                                        monkeypatch, capsys):
    """The control: with no folders sent (`import_paths` empty), the workers do not find the
    kind that only the driver's sys.path holds, and say so in one line."""
    from ablate.run import main
    from ablate.runner.execute import driver

    _users_folders(tmp_path, monkeypatch)
    monkeypatch.setattr(driver, "import_paths", lambda: [])
    assert main(["study=./mine.yaml", f"results_dir={tmp_path / 'results'}", "progress=none"]) == 1
    out = capsys.readouterr()
    assert "trial kind 'user_kind_e2e:KIND': no module named 'user_kind_e2e'" in out.out + out.err


def test_bad_kinds_and_layers_in_a_study_file_are_one_line_before_ray(ray_env, tmp_path,
                                                                      monkeypatch, capsys):
    from ablate.run import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "user_notkind.py").write_text("KIND = 3\nclass Kind:\n    pass\n")
    cases = [("kind: user_notkind:KIND", "trial kind 'user_notkind:KIND' is a int, not an instance"),
             ("kind: user_notkind:Kind", "is a class, not an instance of ablate.trial.kind.TrialKind"),
             ("kind: user_nokind_xyz:KIND", "no module named 'user_nokind_xyz'"),
             ("fixed: {backbone: 'user_notkind:Kind'}", "is the class user_notkind.Kind, not a "
                                                        "torch.nn.Module class")]
    for i, (line, says) in enumerate(cases):
        (tmp_path / f"bad{i}.yaml").write_text(f"{line}\ndata: {dict(TINY)}\n")
        for dry in ("true", "false"):
            assert main([f"study=./bad{i}.yaml", f"dry_run={dry}",
                         f"results_dir={tmp_path / 'r'}"]) == 2
            err = capsys.readouterr().err.strip()
            assert err.startswith("error: ") and "\n" not in err and says in err, err
    import ray

    assert not ray.is_initialized()
