"""Optuna threshold search through Ray Tune (ablate.runner.search): splits, resume after SIGKILL, optimum."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TINY = ["data.n_train=40", "data.n_val=40", "data.n_test=40", "data.n_max_large=40"]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def test_objective_sees_train_and_val_only():
    """The trainable's data: no test split is loaded, and every seed reports a val accuracy."""
    from ablate.runner.search import _search_splits, arm_config, build_space, load_search_spec, train_jointly

    spec = load_search_spec("threshold_search", [*TINY, "epochs=2", "arms=colors_chebygin_sup"])
    cfg = arm_config(spec, "colors_chebygin_sup", threshold=0.01)
    assert set(build_space(spec.search, cfg)) == {"threshold", "kl_weight"}
    splits = _search_splits(cfg)
    assert set(splits) == {"train", "val"}
    seen = []
    train_jointly(cfg, splits, lambda epoch, accs: seen.append((epoch, len(accs))))
    assert seen == [(1, 3), (2, 3)]


def _optuna_trials(db: Path) -> int:
    import optuna

    if not db.exists():
        return 0
    st = optuna.load_study(study_name="colors_chebygin_unsup", storage=f"sqlite:///{db}")
    return sum(t.state == optuna.trial.TrialState.COMPLETE for t in st.get_trials(deepcopy=False))


def test_resume_after_sigkill(tmp_path):
    """Kill the driver once a trial is in SQLite; a rerun continues the same study to max_trials."""
    from ablate.runner.store import read_trials

    cmd = [sys.executable, "-m", "ablate.run", "study=threshold_search", f"results_dir={tmp_path}",
           *TINY, "epochs=2", "arms=colors_chebygin_unsup", "max_trials=3", "n_trials=3",
           "max_concurrent=1", "grace_period=2", "seeds=[0,1,2]", "final_seeds=[5,6,7]"]
    env = {**os.environ, "RAY_AUTH_MODE": "token", "PYTHONPATH": str(ROOT)}
    db = tmp_path / "threshold_search" / "colors_chebygin_unsup" / "optuna.db"
    p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    deadline = time.time() + 150
    while time.time() < deadline and _optuna_trials(db) < 1 and p.poll() is None:
        time.sleep(0.5)
    os.killpg(p.pid, signal.SIGKILL)  # the driver and the Ray processes it started
    p.wait()
    first = _optuna_trials(db)
    assert first >= 1, first  # on a slow machine the first run may finish before the kill
    total = max(3, first + 1)  # the rerun must add trials to the same study, not restart it
    rerun = [a if not a.startswith("max_trials=") else f"max_trials={total}" for a in cmd]
    out = subprocess.run(rerun, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert _optuna_trials(db) == total  # continued up to the total, not restarted
    df = read_trials(tmp_path, "threshold_search")
    search = df[df.role == "search"]
    assert sorted(search.optuna_trial.unique())[-1] >= 2 and set(search.split) == {"val"}
    assert {"tuned", "reference"} <= set(df.role) and "pruned" in df
    assert "test_orig" in set(df[df.role == "tuned"].split)
    assert "reference" in out.stdout and "tuned" in out.stdout


def _synthetic(config: dict) -> None:
    """A cheap objective with a known optimum: -(log10 t + 2)^2, max 0 at t = 0.01."""
    import math

    from ray import tune

    x = math.log10(config["threshold"])
    for step in range(1, 4):
        tune.report({"val_acc": -((x + 2.0) ** 2) * (1 + 1 / step)})


def test_tpe_finds_known_optimum(tmp_path, monkeypatch):
    """OptunaSearch (TPE, seeded) + ASHA with the spec's space gets near log10 t = -2."""
    import math

    import optuna
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    from ablate.runner.search import arm_config, build_space, load_search_spec

    spec = load_search_spec("threshold_search", [*TINY, "arms=colors_chebygin_unsup"])
    space = build_space(spec.search, arm_config(spec, "colors_chebygin_unsup"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))  # for workers
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        searcher = OptunaSearch(space=space, metric="val_acc", mode="max",
                                sampler=optuna.samplers.TPESampler(seed=0, n_startup_trials=5))
        grid = tune.Tuner(
            _synthetic,
            tune_config=tune.TuneConfig(metric="val_acc", mode="max", search_alg=searcher,
                                        num_samples=16, reuse_actors=True,
                                        scheduler=ASHAScheduler(max_t=3, grace_period=1)),
            run_config=tune.RunConfig(storage_path=str(tmp_path), verbose=0),
        ).fit()
        best = grid.get_best_result(metric="val_acc", mode="max", scope="last")
    finally:
        ray.shutdown()
    assert abs(math.log10(best.config["threshold"]) + 2.0) < 0.3  # within a factor 2 of 0.01


def test_optuna_db_appears_only_when_complete(tmp_path):
    """The SQLite file is built under a temp name and renamed: a kill mid-schema leaves no
    half-made database, and a leftover temp file is cleared by the next run."""
    import optuna

    from ablate.runner.search import _create_db

    db = tmp_path / "optuna.db"
    (tmp_path / ".optuna.db.999.tmp").write_bytes(b"half-made")
    _create_db(db, "arm")
    assert db.exists() and not list(tmp_path.glob(".*.tmp"))
    study = optuna.load_study(study_name="arm", storage=f"sqlite:///{db}")
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
