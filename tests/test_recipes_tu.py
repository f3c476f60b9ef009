"""The reference's TU protocol (docs/recipes.md): GCN-style layers (ChebyNet K=3 for COLLAB),
pooling before layer 3 (PROTEINS, D&D) or after the last layer (COLLAB), weak attention
tuned by k-fold cross-validation with Optuna (studies/tu_search.yaml), final models trained
on all train/val graphs. Tiny TU folders are written by the helpers of test_data_real.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_data_real import _write_tu

from ablate.data import tu
from ablate.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
# the 8 fixture graphs with N <= 25 (sizes 3..25) are all train/val; 4 larger ones are tested
TINY = ["data.max_train_nodes=25", "data.n_train_val=8", "data.val_fraction=0.25"]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def tu_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tu_recipe")
    _write_tu(root / "PROTEINS", "PROTEINS", node_labels=True)
    return root


def test_tu_final_trains_on_all_train_val_graphs(tu_dir):
    kw = dict(max_train_nodes=10, n_train_val=4, val_fraction=0.25)
    held = tu.proteins(str(tu_dir), **kw)
    final = tu.proteins(str(tu_dir), final=True, **kw)
    assert (len(held["train"]), len(held["val"]), len(final["train"]), len(final["val"])) == (3, 1, 4, 1)
    both = sorted(np.concatenate([held["train"].num_nodes, held["val"].num_nodes]))
    assert sorted(final["train"].num_nodes) == both  # train = train + val (sizes are unique)
    np.testing.assert_array_equal(final["val"].x, held["val"].x)
    for split in ("test_large", "test_orig"):  # the test graphs do not move
        np.testing.assert_array_equal(final[split].num_nodes, held[split].num_nodes)
        np.testing.assert_array_equal(final[split].x, held[split].x)


def test_tu_study_is_the_reference_recipe():
    from ablate.runner.study.expand import build_study

    study, _ = build_study("tu", ["data.path=/data"])
    cfgs = [t.config for t in study.trials]
    # the authors' commands: PROTEINS -K 1; D&D and COLLAB -K 3 (ChebyNet, mean, no hidden)
    arch = {"proteins": ("gcn", 1, (2,)), "dd": ("chebynet", 3, (2,)), "collab": ("chebynet", 3, (3,))}
    for c in cfgs:
        backbone, K, pool = arch[c.dataset]
        assert (c.backbone, c.K, c.aggregation, c.hidden) == (backbone, K, "mean", 0)
        assert (c.filters, c.readout, c.dropout) == ((64, 64, 64), "max", 0.1)
        assert (c.epochs, c.lr_decay_epochs) == (50, (25, 35, 45))
        assert c.pool_layers in ((), pool)
        assert dict(c.data_params)["final"] is True  # reported models train on train + val
    rows = {(c.dataset, dict(c.data_params).get("max_train_nodes"),
             c.supervision if c.pool_layers else "global") for c in cfgs}
    splits = {"proteins": [None], "dd": [None, 300], "collab": [None]}  # D&D-200 and D&D-300
    assert rows == {(d, n, r) for d in arch for n in splits[d] for r in ("global", "weak")}
    assert len({c.seeds for c in cfgs}) == 10


def test_tu_study_draws_a_split_per_seed_and_keeps_collab_init():
    """study=tu as the reference runs it: every run its own data seed (here split_seed = seed),
    so the ten runs of a row see ten splits; COLLAB's weak row keeps the framework's init."""
    from ablate.runner.study.expand import build_study

    study, _ = build_study("tu")
    for dataset in ("proteins", "dd", "collab"):
        rows = [t for t in study.trials if t.dataset == dataset]
        assert all(dict(t.data_params)["split_seed"] == t.config.seeds[0] for t in rows)
        n_splits = 20 if dataset == "dd" else 10  # D&D-200 and D&D-300: a split per seed each
        assert len({t.data_hash for t in rows}) == n_splits and all(len(t.config.seeds) == 1 for t in rows)
    weak = {t.dataset: t.config.init_dist for t in study.trials if t.config.pool_layers}
    assert weak == {"proteins": "normal", "dd": "normal", "collab": "default"}
    fixed, _ = build_study("tu", ["data.split_seed=111"])  # one split for all: still possible
    assert {dict(t.data_params)["split_seed"] for t in fixed.trials} == {111}


def test_tu_split_seed_changes_the_split(tu_dir):
    kw = dict(max_train_nodes=10, n_train_val=4, val_fraction=0.25)
    held_out = {tuple(tu.proteins(str(tu_dir), split_seed=s, **kw)["test_large"].num_nodes)
                for s in range(4)}  # the graph sizes are distinct: they name the graphs
    assert len(held_out) > 1


def test_tu_search_spec_tunes_the_reference_space(tu_dir):
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    from ablate.runner.search.final import final_jobs
    from ablate.runner.study.search_spec import arm_config, build_space, load_search_spec

    assert load_search_spec("tu_search", []).data == {}  # no data.path: downloaded on first use
    with pytest.raises(ConfigError, match="final_data"):
        load_search_spec("tu_search", [f"data.path={tu_dir}", "data.final=true"])
    spec = load_search_spec("tu_search", [f"data.path={tu_dir}"])
    assert (spec.cv_folds, spec.objective, spec.final_data) == (5, "mean_minus_std", {"final": True})
    assert {arm_config(spec, a).dataset for a in spec.arms} == {"proteins", "dd", "collab"}
    cfg = arm_config(spec, "proteins_weak")
    assert (cfg.backbone, cfg.pool_layers, cfg.supervision) == ("gcn", (2,), "weak")
    assert "final" not in cfg.data_kwargs  # the search never trains on its val folds' graphs
    space = build_space(spec.search, cfg)
    assert space["threshold"] == FloatDistribution(1e-4, 2e-2)
    assert space["kl_weight"] == FloatDistribution(0.1, 10.0)
    assert space["scorer"] == CategoricalDistribution(["fc", "fc_hidden"])  # hidden 0 or 32
    assert space["init_dist"] == CategoricalDistribution(["normal", "uniform"])
    jobs = final_jobs(spec, "collab_weak", {"params": {"threshold": 0.005, "scorer": "fc_hidden"}})
    assert set(jobs) == {"tuned", "reference", "global_pool"}
    assert (jobs["tuned"].threshold, jobs["tuned"].scorer, jobs["tuned"].K) == (0.005, "fc_hidden", 3)
    assert jobs["global_pool"].pool_layers == () and jobs["tuned"].pool_layers == (3,)
    assert all(c.data_kwargs["final"] is True and len(c.seeds) == 10 for c in jobs.values())
    # COLLAB keeps the framework's init of p (reference: --scale None, no --tune_init)
    collab = arm_config(spec, "collab_weak")
    assert collab.init_dist == "default" and not {"init_dist", "init_scale"} & set(
        build_space(spec.search, collab))
    assert (jobs["tuned"].init_dist, jobs["reference"].init_dist) == ("default", "default")
    assert final_jobs(spec, "proteins_weak", {"params": {}})["reference"].init_dist == "normal"


def test_cv_folds_partition_train_and_val(tu_dir):
    from ablate.runner.search.trainable import cv_splits, objective, search_splits
    from ablate.runner.study.search_spec import arm_config, load_search_spec

    spec = load_search_spec("tu_search", [f"data.path={tu_dir}", *TINY])
    splits = search_splits(arm_config(spec, "proteins_weak"))
    pool = sorted(np.concatenate([splits["train"].num_nodes, splits["val"].num_nodes]))
    folds = cv_splits(splits, 3)
    assert len(folds) == 3 and all(set(f) == {"train", "val"} for f in folds)
    held = sorted(np.concatenate([f["val"].num_nodes for f in folds]))
    assert held == pool  # every train/val graph is scored exactly once
    for f in folds:
        assert not set(f["train"].num_nodes) & set(f["val"].num_nodes)
        assert sorted(np.concatenate([f["train"].num_nodes, f["val"].num_nodes])) == pool
    assert [len(f["val"]) for f in cv_splits(splits, 3)] == [len(f["val"]) for f in folds]
    with pytest.raises(ConfigError, match="cv_folds"):
        cv_splits(splits, 9)
    accs = [0.5, 0.7, 0.6, 0.8]  # 2 folds x 2 seeds, fold-major
    assert objective(accs, 2) == pytest.approx(0.65)
    assert objective(accs, 2, "mean_minus_std") == pytest.approx(0.65 - 0.05)


def test_train_jointly_one_member_per_fold_and_seed(tu_dir):
    from ablate.runner.search.trainable import cv_splits, search_splits, train_jointly
    from ablate.runner.study.search_spec import arm_config, load_search_spec

    spec = load_search_spec("tu_search", [f"data.path={tu_dir}", *TINY, "epochs=2", "seeds=[0,1]"])
    cfg = arm_config(spec, "proteins_weak", threshold=0.01, scorer="fc_hidden")
    seen = []
    train_jointly(cfg, cv_splits(search_splits(cfg), 2), lambda e, accs: seen.append((e, len(accs))))
    assert seen == [(1, 4), (2, 4)]


@pytest.mark.slow  # the default suite stays under 10 min; CI runs -m slow too
def test_tu_search_end_to_end(tmp_path, tu_dir):
    """2 Optuna trials of 2-fold CV on a fabricated PROTEINS, then the final rows on train+val."""
    from ablate.runner.execute.store import read_trials

    cmd = [sys.executable, "-m", "ablate.run", "study=tu_search", f"data.path={tu_dir}", *TINY,
           f"results_dir={tmp_path}", "arms=proteins_weak", "n_trials=2", "epochs=2", "cv_folds=2",
           "seeds=[0,1]", "final_seeds=[5]", "max_concurrent=1", "grace_period=2"]
    env = {**os.environ, "RAY_AUTH_MODE": "token", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    df = read_trials(tmp_path, "tu_search")
    search = df[df.role == "search"]
    assert set(search.split) == {"val"} and set(search.fold) == {0, 1}
    assert search.groupby("optuna_trial").size().tolist() == [4, 4]  # 2 folds x 2 seeds
    assert not any(json.loads(p).get("final") for p in search.data_params)  # CV on train + val
    final = df[df.role != "search"]
    assert set(final.role) == {"tuned", "reference", "global_pool"}
    assert all('"final": true' in p for p in final.data_params)
    assert "test_large" in set(final[final.role == "tuned"].split)
    assert "global_pool" in out.stdout and "2-fold CV" in out.stdout


@pytest.fixture(scope="module")
def named_dir(tmp_path_factory) -> Path:
    """A tiny TU set under a name of the collection (tu:MUTAG), fabricated as PROTEINS is."""
    root = tmp_path_factory.mktemp("tu_named_search")
    _write_tu(root / "MUTAG", "MUTAG", node_labels=True)
    return root


def test_tu_search_takes_any_tu_set_by_name(named_dir, capsys):
    """`dataset=tu:NAME` on the command line replaces every arm's data set (as it replaces the
    grid's and the variants' in a grid study): each arm keeps its architecture on that set,
    init is tuned where the arm keeps the reference init, a command-line data.KEY replaces an
    arm's own, and the dry run names the data set of every arm. Before: the arms' PROTEINS,
    D&D and COLLAB won silently."""
    from ablate.run import main
    from ablate.runner.search.final import final_jobs
    from ablate.runner.study.search_spec import arm_config, build_space, load_search_spec

    args = ["dataset=tu:MUTAG", f"data.path={named_dir}"]
    spec = load_search_spec("tu_search", args)
    cfgs = {a: arm_config(spec, a) for a in spec.arms}
    assert {c.dataset for c in cfgs.values()} == {"tu:MUTAG"}
    assert (cfgs["proteins_weak"].backbone, cfgs["collab_weak"].pool_layers) == ("gcn", (3,))
    assert {"init_dist", "init_scale"} <= set(build_space(spec.search, cfgs["proteins_weak"]))
    assert not {"init_dist", "init_scale"} & set(build_space(spec.search, cfgs["collab_weak"]))
    jobs = final_jobs(spec, "dd_weak", {"params": {"threshold": 0.005}})
    assert {c.dataset for c in jobs.values()} == {"tu:MUTAG"}
    assert all(c.data_kwargs["final"] is True for c in jobs.values())
    assert cfgs["dd300_weak"].data_kwargs["max_train_nodes"] == 300  # the arm's, unless given
    spec = load_search_spec("tu_search", [*args, "data.max_train_nodes=20"])
    assert arm_config(spec, "dd300_weak").data_kwargs["max_train_nodes"] == 20
    assert main(["study=tu_search", *args, "arms=proteins_weak,collab_weak", "dry_run=true"]) == 0
    out = capsys.readouterr().out
    assert out.count("dataset=tu:MUTAG") == 2 and "'proteins'" not in out, out
    # without the override the arms keep their own data sets (and the reference's spaces)
    spec = load_search_spec("tu_search", [f"data.path={named_dir}"])
    assert [arm_config(spec, a).dataset for a in spec.arms] == ["proteins", "dd", "dd", "collab"]


def test_an_arms_store_of_another_data_set_is_refused_before_ray(named_dir, tmp_path, capsys):
    """An arm's Optuna study and rows are of one data set: rerunning it with dataset=tu:NAME
    into the same results_dir is one line (exit 2) before Ray starts, not a study continued on
    other data."""
    from ablate.config import axes
    from ablate.run import main
    from ablate.runner.execute.store import Store
    from ablate.runner.study.search_spec import arm_config, load_search_spec

    spec = load_search_spec("tu_search", [f"data.path={named_dir}", f"results_dir={tmp_path}"])
    cfg = arm_config(spec, "proteins_weak", threshold=0.01)
    row = {**axes(cfg), "search_arm": "proteins_weak", "role": "search", "optuna_trial": 0,
           "pruned": False, "epochs_run": 1, "objective": 0.5, "seed": 0, "fold": 0,
           "split": "val", "accuracy": 0.5, "status": "ok", "error": ""}
    Store(tmp_path, "tu_search").write("proteins_weak-trial00000", [row])
    argv = ["study=tu_search", "dataset=tu:MUTAG", "arms=proteins_weak",
            f"data.path={named_dir}", *TINY, f"results_dir={tmp_path}"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: arm proteins_weak: ") and "\n" not in err, err
    assert "holds its search on dataset proteins, this run asks for tu:MUTAG" in err
    import ray

    assert not ray.is_initialized()


@pytest.mark.slow  # a real local Ray, about a minute here; CI runs -m slow too
def test_tu_search_end_to_end_on_a_tu_set_by_name(tmp_path, named_dir):
    """study=tu_search dataset=tu:MUTAG: the search and the final rows are MUTAG's."""
    from ablate.run import main
    from ablate.runner.execute.store import read_trials

    argv = ["study=tu_search", "dataset=tu:MUTAG", f"data.path={named_dir}", *TINY,
            f"results_dir={tmp_path}", "arms=proteins_weak", "n_trials=1", "epochs=1",
            "cv_folds=2", "seeds=[0,1]", "final_seeds=[5]", "grace_period=1"]
    try:
        assert main(argv) == 0
    finally:
        import ray

        ray.shutdown()
    df = read_trials(tmp_path, "tu_search")
    assert set(df.dataset) == {"tu:MUTAG"} and (df.status == "ok").all(), set(df.error)
    assert set(df.role) == {"search", "tuned", "reference", "global_pool"}
