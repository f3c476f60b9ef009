"""The dry run's cost estimate: from the store's own records, from a short calibration here,
or none; then the wall time on this machine's trial slots."""

from __future__ import annotations

import re

import pytest
import torch

from ablate.run import main
from ablate.runner.execute.store import read_trials
from ablate.runner.plan import estimate as est
from ablate.runner.study.expand import build_study

TINY = """
description: estimate test
fixed: {dataset: colors, backbone: gin, supervision: unsup, epochs: 3}
data: {n_train: 32, n_val: 16, n_test: 16, n_max_large: 30}
variants:
  - {threshold: 0.03}
  - {threshold: 0.1, backbone: chebygin}
seeds: [0, 1]
gpus_per_trial: 0
"""


@pytest.fixture
def study_file(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


@pytest.mark.slow  # the default suite stays under 10 min; CI runs -m slow too
def test_records_of_the_same_shape_give_the_estimate(study_file, tmp_path, ray_env, capsys):
    results = tmp_path / "results"
    assert main([f"study={study_file}", f"results_dir={results}", "progress=none"]) == 0
    stored = read_trials(results, "tiny").drop_duplicates("trial_id")
    # other seeds and thresholds: the same cost shapes, so the records price them
    study, _ = build_study(str(study_file), ["seed=range(5,8)", "threshold=0.2"])
    cost = est.estimate(study, results, "records")
    assert cost.share("records") == 1.0 and cost.wall_s > 0
    stored["per_seed"] = stored["trial_s"] / stored["batched_seeds"].clip(lower=1)
    per_seed = stored.groupby("backbone")["per_seed"].median()  # a trial has one seed here
    for t in study.trials:
        c = cost.trials[t.trial_id]
        assert c.source == "records" and c.memory_mb > 0
        assert c.seconds == pytest.approx(per_seed[t.config.backbone] * len(t.config.seeds))
    capsys.readouterr()
    assert main([f"study={study_file}", "dry_run=true", f"results_dir={results}",
                 "epochs=4"]) == 0  # another epoch count: another shape, no estimate
    out = capsys.readouterr().out
    assert "from 0% records, 0% calibration, 100% none" in out


def test_calibration_prices_every_trial(study_file, tmp_path, capsys):
    assert main([f"study={study_file}", "dry_run=true", f"results_dir={tmp_path / 'r'}",
                 "estimate=calibrate"]) == 0
    out = capsys.readouterr().out
    assert "from 0% records, 100% calibration, 0% none" in out
    assert "calibration took" in out and " calibration\n" in out
    assert not (tmp_path / "r").exists()  # a dry run writes nothing to the store
    # the calibration prepared the data: the memory line says what a trial needs
    assert re.search(r"^memory per trial: \d+\.\d GB", out, re.M), out[-600:]
    assert "not known until" not in out


def test_a_shape_that_cannot_be_calibrated_has_no_estimate(study_file, tmp_path, monkeypatch):
    from ablate.trial import graph

    def no_memory(cfg):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(graph.GraphKind, "run", lambda self, cfg: no_memory(cfg))
    study, _ = build_study(str(study_file))
    cost = est.estimate(study, tmp_path, "calibrate")
    assert cost.share("none") == 1.0 and cost.wall_s is None
    assert "unknown wall" in cost.line()


def test_an_unknown_mode_is_one_line(study_file, capsys):
    assert main([f"study={study_file}", "dry_run=true", "estimate=guess"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown estimate 'guess'" in err[0] and "calibrate" in err[0]


def test_packs_go_longest_first_onto_the_least_loaded_slot():
    assert est.makespan([5, 4, 3, 3, 3], 2) == 10  # 5, 4, then 3s: 5+3 | 4+3+3 (the optimum is 9)
    assert est.makespan([1, 1, 1, 1], 4) == 1
    assert est.makespan([7], 3) == 7


def test_slots_are_capped_by_memory(monkeypatch):
    class Spec:
        cpus_per_trial = 1

    from ablate.runner.plan import resources

    monkeypatch.setattr(resources.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(resources, "node_memory_estimate", lambda: 7_000 * 2**20)
    assert est.slots_here(Spec, 0, None) == (8, "CPU")
    assert est.slots_here(Spec, 0, 3_000) == (2, "CPU")  # Ray's 7,000 MB at 3,000 MB per trial


def test_one_rule_says_how_many_trials_fit():
    from ablate.runner.plan.resources import trials_at_once

    assert trials_at_once({"CPU": 1, "GPU": 0, "memory": 0}, {"CPU": 8, "memory": 1e9}) == 8
    assert trials_at_once({"CPU": 1, "memory": 3e9}, {"CPU": 8, "memory": 7e9}) == 2
    assert trials_at_once({"CPU": 1, "GPU": 0.1}, {"CPU": 64, "GPU": 1}) == 10  # not 9: rounding
    assert trials_at_once({"CPU": 4}, {"CPU": 2}) == 1  # never 0
    assert trials_at_once({}, {"CPU": 2}) == 1


def test_stored_values_and_planned_values_key_alike():
    import numpy as np

    planned = est.shape_key({"K": 2, "hidden": None, "pool_layers": "1", "loo_auc": True},
                            "cpu")
    stored = est.shape_key({"K": np.float64(2.0), "hidden": float("nan"), "pool_layers": "1",
                            "loo_auc": np.bool_(True)}, "cpu")
    assert planned == stored
    assert est.shape_key({"threshold": 0.1, "K": 2}, "cpu") == est.shape_key({"K": 2}, "cpu")
