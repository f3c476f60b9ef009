"""Prepared datasets reach the other nodes of a cluster in bounded pieces, once per node.

A real `ray.cluster_utils.Cluster`: a head without CPUs (the driver's node) and two worker
nodes, each with a dataset cache folder of its own (its own disk). The driver prepares two
recipes; every node that runs a trial of a recipe receives that recipe's file exactly
once, in pieces of at most the chunk size, byte for byte the driver's file.
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("RAY_AUTH_MODE", "token")  # before `import ray` (DESIGN.md)

import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import ablate.data.cache  # noqa: E402
from ablate.runner import ship  # noqa: E402
from ablate.runner.compose import StudySpec  # noqa: E402
from ablate.runner.driver import run_study  # noqa: E402
from ablate.runner.store import read_trials  # noqa: E402
from ablate.runner.study import Study, expand  # noqa: E402

DIGITS = {"n_train": 24, "n_val": 8, "n_test": 8}
CHUNK = 16 << 10


def test_each_node_receives_each_recipe_it_runs_once_in_bounded_pieces(ray_env, monkeypatch):
    tmp = ray_env
    driver_cache = tmp / "driver"
    monkeypatch.delenv("ABLATE_CACHE", raising=False)  # each node has its own disk
    monkeypatch.setattr(ablate.data.cache, "cache_dir", lambda: driver_cache)
    monkeypatch.setattr(ship, "CHUNK_BYTES", CHUNK)
    spec = StudySpec(name="ship", fixed={"dataset": "digits_sp", "backbone": "gcn",
                                         "pool_layers": [], "epochs": 1, "loo_auc": False},
                     data=DIGITS, grid={"data.gt": ["intensity", "any"]}, seeds=[0, 1, 2],
                     seeds_per_trial=1, gpus_per_trial=0)
    study = Study(spec, expand(spec))
    assert len(study.trials) == 6 and len({t.data_hash for t in study.trials}) == 2
    caches = {}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    for k, cpus in ((1, 2), (2, 1)):
        folder = tmp / f"node{k}"
        node = cluster.add_node(num_cpus=cpus, env_vars={"ABLATE_CACHE": str(folder)})
        caches[node.node_id] = folder
    cluster.wait_for_nodes()
    try:
        summary = run_study(study, tmp / "results", ray_address=cluster.address,
                            progress="none")
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
    assert summary.exit_code == 0 and summary.ok == 6
    rows = read_trials(tmp / "results", "ship")
    files = {t.data_hash: driver_cache / f"digits_sp-{t.data_hash}.npz" for t in study.trials}
    hash_of = {t.trial_id: t.data_hash for t in study.trials}
    for node_id, folder in caches.items():
        ran = {hash_of[tid] for tid in rows[rows.node_id == node_id].trial_id}
        got = ship.received(folder)
        assert sorted(e["file"] for e in got) == sorted(files[h].name for h in ran)  # once each
        for e in got:
            sent = driver_cache / e["file"]
            size = sent.stat().st_size
            assert e["bytes"] == size and e["chunks"] == math.ceil(size / CHUNK) > 1
            assert (folder / e["file"]).read_bytes() == sent.read_bytes()
    assert set(rows.node_id) == set(caches)  # both nodes ran trials (and so received)
