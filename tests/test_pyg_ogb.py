"""OGB's graph property prediction class as a study's data set (`dataset=pyg
data.target=ogb.graphproppred:PygGraphPropPredDataset`): a tiny folder in OGB's own layout
(raw csv.gz files, a scaffold split folder, the release marker), read by OGB's code itself,
which skips the download when the raw files are there. What is checked: OGB's (1, 1) long
labels become one class per graph, its split (tensors of ids under 'train' / 'valid' /
'test') becomes train / val / test_orig, a multi-task set (molpcba's 128 tasks) is refused
in one line, the command line of docs/recipes.md parses, and a tiny study (OGB's `meta_dict`
form, a nested data.kwargs) trains through the runner on a real local Ray whose workers never
import ogb. The real download is not exercised: tests never touch the network.

ogb's import starts a thread asking PyPI for a newer ogb (`outdated.check_outdated`;
OUTDATED_IGNORE only silences its warnings, not the request): with `outdated` made
unimportable ogb skips the check, so every test here imports ogb that way."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from _pyg_study import pyg_study

from ablate.data import load_graphsets
from ablate.errors import ConfigError

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ogb") is None,
                                reason="ogb is not installed (bash install.sh '[test]' installs it)")

OGB = "ogb.graphproppred:PygGraphPropPredDataset"


def _csv(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.writelines(",".join(str(v) for v in np.atleast_1d(r)) + "\n" for r in rows)


def ogb_folder(root: Path, name: str, n: int = 40, tasks: int = 1) -> tuple[Path, dict]:
    """`root/<name with _>`, as OGB's zip unpacks: rings (label 1) and paths (label 0) of
    4..12 nodes, 9 integer atom features and 3 bond features as the mol sets, each undirected
    edge once (OGB adds the inverse), a shuffled scaffold split 20 / 10 / 10. With `tasks` > 1
    labels are random 0/1 with missing (NaN) entries, as molpcba's."""
    folder = root / name.replace("-", "_")
    rng = np.random.default_rng(0)
    edges, nodes, n_edges, x, bonds, y = [], [], [], [], [], []
    for i in range(n):
        k, ring = int(rng.integers(4, 13)), i % 2 == 1
        src = np.arange(k - (not ring))
        edges += list(zip(src, (src + 1) % k))
        nodes.append(k)
        n_edges.append(len(src))
        x += [[6 + ring, 2] + [0] * 7] * k
        bonds += [[0, 0, int(ring)]] * len(src)
        y.append([int(ring)] if tasks == 1 else
                 [float("nan") if rng.random() < 0.3 else float(rng.integers(0, 2)) for _ in range(tasks)])
    raw = folder / "raw"
    for file, rows in (("edge", edges), ("num-node-list", nodes), ("num-edge-list", n_edges),
                       ("node-feat", x), ("edge-feat", bonds), ("graph-label", y)):
        _csv(raw / f"{file}.csv.gz", rows)
    ids = dict(zip(("train", "valid", "test"), np.split(rng.permutation(n), [n // 2, 3 * n // 4])))
    for part, part_ids in ids.items():
        _csv(folder / "split" / "scaffold" / f"{part}.csv.gz", part_ids)
    (folder / "RELEASE_v1.txt").write_text("")  # else OGB asks (input()) whether to update
    return folder, {"split": ids, "y": np.asarray([r[0] for r in y]), "nodes": np.asarray(nodes)}


@pytest.fixture
def ogb_env(tmp_path, monkeypatch) -> Path:
    """ogb importable without its PyPI version check; the dataset cache in tmp."""
    monkeypatch.setenv("OUTDATED_IGNORE", "1")
    monkeypatch.setitem(sys.modules, "outdated", None)  # ogb: `from outdated import ...` fails
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    version = pytest.importorskip("ogb.version")
    assert version.check_outdated is None, "ogb was imported before with its version check on"
    return tmp_path


def test_ogb_labels_and_split_become_ours(ogb_env):
    import torch
    from ogb.graphproppred import PygGraphPropPredDataset

    from ablate.data.pyg_user import pyg_safe_globals

    root = ogb_env / "ogb"
    _, truth = ogb_folder(root, "ogbg-molhiv")
    with pyg_safe_globals():  # OGB 1.3.6 reads its processed file with a bare torch.load
        theirs = PygGraphPropPredDataset(name="ogbg-molhiv", root=str(root))
    assert len(theirs) == 40 and theirs[0].y.shape == (1, 1) and theirs[0].y.dtype == torch.long
    split = theirs.get_idx_split()
    assert sorted(split) == ["test", "train", "valid"] and split["train"].dtype == torch.long

    sets = load_graphsets("pyg", target=OGB, kwargs={"name": "ogbg-molhiv", "root": str(root)})
    assert sorted(sets) == ["test_orig", "train", "val"]
    for ours, part in (("train", "train"), ("val", "valid"), ("test_orig", "test")):
        ids = truth["split"][part]
        assert len(sets[ours]) == len(ids)
        assert list(sets[ours].y) == list(truth["y"][ids])
        assert list(sets[ours].num_nodes) == list(truth["nodes"][ids])
    assert sum(len(s) for s in sets.values()) == 40
    g = sets["train"].graph(0)  # OGB's integer atom features as given; edges both ways
    ring = int(g.y) == 1
    assert np.asarray(g.x).shape == (g.num_nodes, 9) and (np.asarray(g.x)[:, 0] == 6 + ring).all()
    assert g.edge_index.shape[1] == 2 * (g.num_nodes - (not ring))


def test_a_multi_task_set_is_refused_in_one_line(ogb_env):
    root = ogb_env / "ogb"
    ogb_folder(root, "ogbg-molpcba", tasks=128)
    with pytest.raises(ConfigError) as e:
        load_graphsets("pyg", target=OGB, kwargs={"name": "ogbg-molpcba", "root": str(root)})
    assert "\n" not in str(e.value)
    assert "y has 128 values" in str(e.value) and "one class per graph" in str(e.value)


def test_the_documented_command_line_parses(ogb_env, capsys):
    """docs/recipes.md's OGB command, dry run: planned, the class imported, nothing trained."""
    from ablate.run import main

    root = ogb_env / "ogb"
    ogb_folder(root, "ogbg-molhiv")
    assert main(["study=tu_beyond", "dataset=pyg", f"data.target={OGB}",
                 f"data.kwargs={{name: ogbg-molhiv, root: '{root}'}}", "data.protocol=own",
                 "data.fold=0", "dry_run=true", f"results_dir={ogb_env / 'results'}"]) == 0
    out = capsys.readouterr().out
    assert "6 trials (0 done, 6 to run)" in out and '"protocol": "own"' in out
    assert '["name", "ogbg-molhiv"]' in out


@pytest.mark.slow
def test_a_tiny_study_on_ogbs_class_runs_through_ray(ogb_env, ray_env, monkeypatch):
    """OGB's own `meta_dict` form (a folder of any name, described in full; a nested
    data.kwargs), its scaffold split, trained on a real local Ray. The workers get an `ogb`
    that cannot be imported: they read the prepared graphs, never OGB."""
    import pandas as pd
    from ogb import graphproppred

    from ablate.run import main
    from ablate.runner.execute.store import read_trials

    folder, _ = ogb_folder(ogb_env / "mine", "tiny-ogb")
    master = pd.read_csv(Path(graphproppred.__file__).parent / "master.csv", index_col=0,
                         keep_default_na=False)
    meta = {**master["ogbg-molhiv"].to_dict(), "dir_path": str(folder)}
    shadow = ogb_env / "shadow" / "ogb"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('a Ray worker imported ogb')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(shadow.parent), os.environ["PYTHONPATH"]]))
    data = {"target": OGB, "kwargs": {"name": "tiny-ogb", "meta_dict": meta}}
    study = ogb_env / "ogb.yaml"
    study.write_text(pyg_study("OGB's class on a tiny local folder", f"data: {json.dumps(data)}"))
    out = ogb_env / "results"
    assert main([f"study={study}", f"results_dir={out}"]) == 0
    df = read_trials(str(out), "ogb")
    assert set(df["dataset"]) == {"pyg"} and set(df["split"]) == {"val", "test_orig"}
    assert (df["status"] == "ok").all() and df["trial_id"].nunique() == 2
