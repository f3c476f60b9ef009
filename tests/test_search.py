"""Optuna search through Ray Tune (ablate.runner.search.entry): composition of a search spec, splits,
store rows, resume and cap, final evaluation, resume after SIGKILL, optimum."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ablate.errors import ConfigError

TINY = ["data.n_train=40", "data.n_val=40", "data.n_test=40", "data.n_max_large=40"]
ROOT = Path(__file__).resolve().parents[1]
COLORS_SPLITS = {"val", "test_orig", "test_large", "test_largec"}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.mark.parametrize("overrides", [
    ["seed=range(0,3)", "data.n_train=200", "epochs=4", "+note=hi"],
    ["seeds=[0,1,2]", "data.n_train=200", "epochs=4", "+note=hi"],
    ["seed=0,1,2", "data.n_train=200", "++note=hi", "epochs=4.0"],
])
def test_search_spec_takes_the_override_forms_of_every_study(overrides):
    """One grammar: the same overrides give the same seeds and axes in a search study as in an
    ordinary study (both composed by ablate.runner.study.expand)."""
    from ablate.runner.study.expand import build_study
    from ablate.runner.study.search_spec import arm_config, load_search_spec

    study, _ = build_study("threshold", overrides)
    spec = load_search_spec("threshold_search", overrides)
    ordinary = study.trials[0].config
    searched = arm_config(spec, "colors_chebygin_unsup")
    assert spec.seeds == study.spec.seeds == [0, 1, 2]
    for axis in ("data_params", "extra", "epochs", "dataset"):
        assert getattr(searched, axis) == getattr(ordinary, axis), axis
    assert searched.data_kwargs["n_train"] == 200 and dict(searched.extra) == {"note": "hi"}


def test_search_spec_keys_sections_and_errors():
    from ablate.runner.study.expand import build_study
    from ablate.runner.study.search_spec import build_space, final_config, load_search_spec

    spec = load_search_spec("threshold_search", [
        "search.threshold.low=1e-3", "~search.ratio", "arms=colors_chebygin_sup,colors_chebygin_unsup",
        "final_seeds=range(100,105)", "final_data.n_test=60", "max_trials=null", "n_trials=7",
        "data.n_train=200", "~data.n_train", "dry_run=true", "study=threshold_search"])
    assert list(spec.arms) == ["colors_chebygin_sup", "colors_chebygin_unsup"]
    assert spec.search["threshold"]["low"] == 1e-3 and "ratio" not in spec.search
    assert (spec.final_seeds, spec.max_trials, spec.n_trials, spec.dry_run) == (
        [100, 101, 102, 103, 104], None, 7, True)
    assert spec.data == {} and spec.final_data == {"n_test": 60}
    cfg = final_config(spec, "colors_chebygin_sup")
    assert cfg.data_kwargs["n_test"] == 60 and cfg.seeds == (100, 101, 102, 103, 104)
    assert build_space(spec.search, cfg)["threshold"].low == 1e-3
    for bad, words in [(["bogus=1"], ["unknown key 'bogus'", "valid keys", "n_trials", "epochs"]),
                       (["arms=nope"], ["unknown arm 'nope'", "colors_chebygin_sup"]),
                       (["backbone=gin,gcn"], ["single value"]),
                       (["n_trials=-1"], ["n_trials"]),
                       (["search.depth.low=1"], ["search.PARAM.KEY"]),
                       (["seeds=[0]"], [">= 3 trained models"])]:
        with pytest.raises(ConfigError) as e:
            load_search_spec("threshold_search", bad)
        assert all(w in str(e.value) for w in words) and "\n" not in str(e.value), (bad, e.value)
    for grammar_error in (["seed=range("], ["a=b=c=["]):  # one parser, one message
        with pytest.raises(ConfigError, match="cannot parse overrides") as ordinary:
            build_study("threshold", grammar_error)
        with pytest.raises(ConfigError, match="cannot parse overrides") as search:
            load_search_spec("threshold_search", grammar_error)
        assert str(search.value) == str(ordinary.value)


def test_cli_unknown_key_exits_2_and_dry_run_lists_arms(capsys):
    from ablate.run import main

    assert main(["study=threshold_search", "bogus=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: unknown key 'bogus'")
    assert main(["study=threshold_search", "dry_run=true", "arms=colors_chebygin_sup",
                 "search.threshold.low=1e-3", "epochs=50"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("colors_chebygin_sup: {'supervision': 'sup'} epochs=50")
    assert "'threshold': (0.001, 0.1, True)" in out and "colors_chebygin_unsup" not in out


def test_each_finished_search_trial_is_one_line_with_the_arms_count(tmp_path, capsys,
                                                                    monkeypatch):
    """A search study shows its progress: a line per search trial as Tune reports it done
    (finished, pruned or failed, its objective, the arm's count), written to stderr; a failed
    one ends with its error, cut to `SHORT_ERROR` characters (before: 'failed' alone), as
    does the line of an attempt run again. Each row and failure line carries the attempt's
    node and created_at, as a grid trial's (before: none, and node '')."""
    import json
    from types import SimpleNamespace

    import ablate.runner.execute.tune_callback as tune_callback
    from ablate.runner.execute.store import FAILURES, Store
    from ablate.runner.search.tuning import SHORT_ERROR, store_writer
    from ablate.runner.study.search_spec import load_search_spec

    arm = "colors_chebygin_unsup"
    spec = load_search_spec("threshold_search", [*TINY, "epochs=4", f"arms={arm}",
                                                 f"results_dir={tmp_path}"])
    store = Store(spec.results_dir, spec.name)
    writer = store_writer(store, spec, arm, 4, n_new=3)
    error = "RuntimeError: " + "x" * 400  # one line, as `trial_error` gives it
    monkeypatch.setattr(tune_callback, "trial_error", lambda trial: error)
    for number, epoch, how in ((0, 4, "ok"), (1, 2, "ok"), (2, 1, "retry"), (2, 1, "failed")):
        trial = SimpleNamespace(trial_id=f"t{number}", config={"optuna_trial": number,
                                                                 "threshold": 0.01})
        writer.on_trial_result(0, [], trial, {"epoch": epoch, "seed_accs": "[0.5, 0.6, 0.7]",
                                              "val_acc": 0.6, "node_ip": "10.0.0.7"})
        {"ok": writer.on_trial_complete, "retry": writer.on_trial_recover,
         "failed": writer.on_trial_error}[how](0, [], trial)
    err = capsys.readouterr().err.splitlines()
    short = error[:SHORT_ERROR - 3] + "..."
    assert [e.split(" | ")[0] for e in err] == [
        f"[threshold_search] {arm}: search trial #0 finished 4 epochs, val objective "
        "0.600; 1/3 done (0 pruned, 0 failed)",
        f"[threshold_search] {arm}: search trial #1 pruned by ASHA at epoch 2, val objective "
        "0.600; 2/3 done (1 pruned, 0 failed)",
        f"[threshold_search] {arm}: search trial #2 failed (attempt 1 of 3), run again: {short}",
        f"[threshold_search] {arm}: search trial #2 failed (attempt 2), val objective 0.600; "
        f"3/3 done (1 pruned, 1 failed): {short}"]
    assert writer.written == [0, 1, 2]
    df = store.read()
    assert df.created_at.notna().all() and set(df.node) == {"10.0.0.7"}
    assert set(df[df.optuna_trial == 2].error) == {error}  # the rows keep it whole
    log = [json.loads(line) for line in (store.dir / FAILURES).read_text().splitlines()]
    assert [(e["attempt"], e["node"], e["error"]) for e in log] == [(1, "10.0.0.7", error),
                                                                    (2, "10.0.0.7", error)]
    assert all(e["created_at"] for e in log)


def test_a_search_failure_line_has_the_fields_of_a_grid_trials(tmp_path):
    """failures.jsonl: a search trial's failed attempt has the fields of a grid trial's, its
    node and its rows' created_at among them (a line's ``time`` is when it was logged)."""
    import json
    import pickle
    from types import SimpleNamespace

    from ablate.runner.execute.store import FAILURES, Store
    from ablate.runner.execute.tune_callback import StoreCallback
    from ablate.runner.search.tuning import store_writer
    from ablate.runner.study.expand import build_study
    from ablate.runner.study.search_spec import load_search_spec

    study, _ = build_study("smoke", ["dataset=colors", "backbone=chebygin", "seed=0",
                                     "seeds_per_trial=1", *TINY])
    t = study.trials[0]
    grid = Store(tmp_path, "smoke")
    display = SimpleNamespace(finish=lambda *a: None, retry=lambda *a: None, unstored=None)
    member = {"trial_id": t.trial_id, "status": "error", "error": "RuntimeError: boom",
              "final": True, "records": [], "curves": []}
    StoreCallback(grid, {t.trial_id: t}, {}, display, {t.trial_id: [t.trial_id]}).on_trial_result(
        0, [], SimpleNamespace(config={"trial": {"trial_id": t.trial_id}}),
        {"payload": pickle.dumps({"members": [member], "meta": {"node": "10.0.0.7"},
                                  "final": True})})
    arm = "colors_chebygin_unsup"
    spec = load_search_spec("threshold_search", [*TINY, f"arms={arm}", f"results_dir={tmp_path}"])
    search = Store(spec.results_dir, spec.name)
    trial = SimpleNamespace(trial_id="t0", config={"optuna_trial": 0, "threshold": 0.01},
                            node_ip="10.0.0.8")
    store_writer(search, spec, arm, 2).on_trial_error(0, [], trial)
    lines = []
    for store in (grid, search):
        [line] = [json.loads(x) for x in (store.dir / FAILURES).read_text().splitlines()]
        assert {line["created_at"]} == set(store.read().created_at), line
        lines.append(line)
    assert set(lines[0]) == set(lines[1]) >= {"node", "created_at"}, lines
    assert [x["node"] for x in lines] == ["10.0.0.7", "10.0.0.8"]


def test_objective_sees_train_and_val_only():
    """The trainable's data: no test split is loaded, and every seed reports a val accuracy."""
    from ablate.runner.search.trainable import search_splits, train_jointly
    from ablate.runner.study.search_spec import arm_config, build_space, load_search_spec

    spec = load_search_spec("threshold_search", [*TINY, "epochs=2", "arms=colors_chebygin_sup"])
    cfg = arm_config(spec, "colors_chebygin_sup", threshold=0.01)
    assert set(build_space(spec.search, cfg)) == {"threshold", "kl_weight"}
    splits = search_splits(cfg)
    assert set(splits) == {"train", "val"}
    seen = []
    train_jointly(cfg, splits, lambda epoch, accs: seen.append((epoch, len(accs))))
    assert seen == [(1, 3), (2, 3)]


@pytest.mark.slow  # the default suite stays under 10 min; CI runs -m slow too
def test_run_search_rows_resume_cap_and_final_rows(ray_env):
    """A tiny real search in-process: one store row per member, numbered as Optuna numbers its
    trials; a rerun continues the same Optuna study and max_trials caps it; the final
    evaluation writes tuned and reference rows on every split."""
    import optuna

    from ablate.runner.execute.ray_env import start_ray
    from ablate.runner.execute.store import Store
    from ablate.runner.search.final import best_trial, final_evaluation, summary
    from ablate.runner.search.tuning import open_study, run_search
    from ablate.runner.study.search_spec import load_search_spec

    arm = "colors_chebygin_unsup"
    spec = load_search_spec("threshold_search", [
        *TINY, "epochs=2", f"arms={arm}", "n_trials=1", "grace_period=2",
        "final_seeds=[5]", f"results_dir={ray_env / 'results'}"])
    store = Store(spec.results_dir, spec.name)
    start_ray(None)

    def finished() -> dict[int, float]:
        _, study = open_study(spec, arm)
        return {t.number: t.params["threshold"] for t in study.get_trials()
                if t.state == optuna.trial.TrialState.COMPLETE}

    assert run_search(spec, arm, store) == 1
    rows = store.read().query("role == 'search'")
    assert len(rows) == 3 and set(rows.fold) == {-1} and set(rows.split) == {"val"}
    assert sorted(rows.seed) == [0, 1, 2] and set(rows.optuna_trial) == {0}  # a row per member
    assert rows.pruned.dtype == bool and (rows.pruned == (rows.epochs_run < 2)).all()

    spec.n_trials, spec.max_trials = 2, 2  # the rerun asks for 2 more; the cap lets 1 run
    assert run_search(spec, arm, store) == 1
    assert run_search(spec, arm, store) == 0
    optuna_numbers = finished()
    assert sorted(optuna_numbers) == [0, 1]  # one Optuna study, continued
    rows = store.read().query("role == 'search'")
    assert sorted(rows.optuna_trial.unique()) == [0, 1] and len(rows) == 2 * 3
    for number, g in rows.groupby("optuna_trial"):  # optuna_trial is Optuna's own number
        assert g.threshold.iloc[0] == pytest.approx(optuna_numbers[number])

    best = best_trial(store, arm)
    final_evaluation(spec, arm, best, store)
    final = store.read().query("role != 'search'")
    assert set(final.role) == {"tuned", "reference"}
    for role, g in final.groupby("role"):
        assert set(g.split) == COLORS_SPLITS and set(g.seed) == {5}, role
    assert set(final[final.role == "tuned"].optuna_trial) == {best["optuna_trial"]}
    assert final[final.role == "tuned"].threshold.iloc[0] == pytest.approx(
        best["params"]["threshold"])
    text = summary(spec, store)
    assert "2 search trials" in text and "tuned" in text and "reference" in text


@pytest.mark.slow  # starts Ray; CI runs -m slow too
def test_a_final_config_that_raises_is_stored_failed(ray_env, capsys):
    """A final evaluation whose trial raises in its worker (here COLORS' generator refuses
    n_colors=0, which only it checks: a config error, not retried) is stored as failed rows
    with its error in one line, the other configs go on, the summary leaves it out, and the
    command exits 1: no traceback. A rerun runs it again (failed rows are not complete)."""
    from ablate.runner.execute.ray_env import start_ray
    from ablate.runner.execute.store import Store
    from ablate.runner.search.final import final_evaluation, summary
    from ablate.runner.study.search_spec import load_search_spec

    arm = "colors_chebygin_unsup"
    spec = load_search_spec("threshold_search", [
        *TINY, "epochs=1", f"arms={arm}", "final_seeds=[5]", "final_data.n_colors=0",
        f"results_dir={ray_env / 'results'}"])
    spec.baselines = {"global_pool": {"pool_layers": [], "supervision": "unsup"}}
    store = Store(spec.results_dir, spec.name)
    start_ray(None)
    best = {"optuna_trial": 0, "params": {"threshold": 0.02}}
    assert final_evaluation(spec, arm, best, store) == ["tuned", "reference", "global_pool"]
    rows = store.read()
    assert set(rows.status) == {"error"} and set(rows.role) == {"tuned", "reference",
                                                                "global_pool"}
    assert all(e.startswith("ConfigError: n_colors must be >= 2") and "\n" not in e
               for e in rows.error), set(rows.error)
    assert not store.completed()  # a rerun runs them again
    err = capsys.readouterr().err
    assert (f"{arm}: final tuned failed (not retried: a retry cannot fix this error): "
            "ConfigError: n_colors") in err
    assert "nan" not in summary(spec, store)


def _ray_errors():
    """Every kind of Ray error a final task can end in (Ray 2.60): its own exception, a memory
    kill (`RayError` only), a node or worker that died, no node able to run it, an actor's
    death, a lost object; and one exception that is not Ray's (a bug of the driver)."""
    from ray import exceptions as rx

    cause = ValueError("n_colors must be >= 2\nmore detail")
    return [rx.RayTaskError("_run", "Traceback (most recent call last):\n  ...", cause),
            rx.OutOfMemoryError("Task was killed due to the node running low on memory.\n"
                                "Memory on the node (IP: 10.0.0.2) was 7.5GB / 8GB"),
            rx.NodeDiedError("The node 10.0.0.2 running this task died.\nMore"),
            rx.TaskUnschedulableError("no node has 64 CPUs"),
            rx.WorkerCrashedError(), rx.RayActorError(error_msg="The actor died."),
            rx.ObjectLostError("ab" * 14, None, "final.py:90")]


@pytest.mark.parametrize("error", _ray_errors(), ids=lambda e: type(e).__name__)
def test_a_final_task_ended_by_any_ray_error_is_stored_failed_and_the_others_kept(
        error, tmp_path, monkeypatch, capsys):
    """Whatever Ray error ends a final task (a memory-monitor kill, a node that died, no node
    to run it: not only the task's own exception), that role is stored as failed rows with the
    error in one line, the other roles' results are kept, and the command exits 1 with no
    traceback; any other exception is the driver's own and is raised."""
    import ray

    import ablate.data
    from ablate.run import main
    from ablate.runner.execute.store import Store
    from ablate.runner.execute.tune_callback import error_line
    from ablate.runner.search import entry
    from ablate.runner.study.kinds import trial_kind
    from ablate.trial.provenance import code_provenance

    graph, calls = trial_kind("graph"), []

    class Task:  # `ray.remote(...)(fn)`: a call is recorded, nothing runs
        def __init__(self, fn):
            self.fn = fn

        def remote(self, cfg):
            calls.append(cfg)
            return len(calls) - 1

    def get(ref):  # the second role (reference) ends in `error`; the others finish
        if ref == 1:
            raise error
        cfg = calls[ref]
        rows = [{**graph.columns(cfg), **code_provenance(), "seed": s, "split": "test_orig",
                 "status": "ok", "accuracy": 0.5} for s in cfg.seeds]
        return SimpleNamespace(records=rows, curves=[])

    monkeypatch.setattr(ray, "remote", lambda **kw: Task)
    monkeypatch.setattr(ray, "get", get)
    monkeypatch.setattr(ablate.data, "load_graphsets", lambda *a, **k: {})
    monkeypatch.setattr(ablate.runner.execute.ray_env, "start_ray", lambda address: False)
    monkeypatch.setattr(entry, "run_search", lambda spec, arm, store, started: 0)
    monkeypatch.setattr(entry, "best_trial", lambda store, arm: {
        "optuna_trial": 0, "params": {"threshold": 0.02}})
    load = entry.load_search_spec

    def with_baseline(name, argv):  # a third role, after the one that fails
        spec = load(name, argv)
        spec.baselines = {"global_pool": {"pool_layers": [], "supervision": "unsup"}}
        return spec

    monkeypatch.setattr(entry, "load_search_spec", with_baseline)
    arm = "colors_chebygin_unsup"
    argv = ["study=threshold_search", *TINY, f"arms={arm}", "final_seeds=[5]",
            f"results_dir={tmp_path}"]
    if not isinstance(error, ray.exceptions.RayError):
        with pytest.raises(type(error)):
            main(argv)
        return
    assert main(argv) == 1
    rows = Store(tmp_path, "threshold_search").read()
    roles = dict(zip(rows.role, rows.status))
    assert roles == {"tuned": "ok", "reference": "error", "global_pool": "ok"}, roles
    failed = rows[rows.role == "reference"]
    assert set(failed.error) == {error_line(error)} and "\n" not in failed.error.iloc[0]
    out, err = capsys.readouterr()
    # only what is known: Ray does not retry every failure (a task no node can run fails at
    # once); the task's own error is retried in it only where a retry may fix it (ValueError:
    # not, `ablate.errors.retryable`)
    how = ("not retried: a retry cannot fix this error" if getattr(error, "cause", None)
           else "Ray retries a failed task up to 2 times")
    assert f"{arm}: final reference failed ({how}): {error_line(error)}" in err
    assert "failed after" not in err
    assert f"final evaluation failed for {arm} reference" in out
    assert "Traceback" not in out + err


def test_a_final_task_that_raises_outside_ray_is_the_drivers_error(tmp_path, monkeypatch):
    """An exception that is not Ray's (a bug of the driver) is not stored as a failed trial."""
    test_a_final_task_ended_by_any_ray_error_is_stored_failed_and_the_others_kept(
        KeyError("records"), tmp_path, monkeypatch, None)


def _optuna_trials(db: Path) -> int:
    import optuna

    if not db.exists():
        return 0
    st = optuna.load_study(study_name="colors_chebygin_unsup", storage=f"sqlite:///{db}")
    return sum(t.state == optuna.trial.TrialState.COMPLETE for t in st.get_trials(deepcopy=False))


def _tune_folders() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("ablate-*search-*"))


@pytest.mark.slow  # the default suite stays under 10 min; CI runs -m slow too
def test_resume_after_sigkill(tmp_path):
    """Kill the driver once a trial is in SQLite; a rerun continues the same study to max_trials."""
    from ablate.runner.execute.store import read_trials

    cmd = [sys.executable, "-m", "ablate.run", "study=threshold_search", f"results_dir={tmp_path}",
           *TINY, "epochs=2", "arms=colors_chebygin_unsup", "max_trials=3", "n_trials=3",
           "max_concurrent=1", "grace_period=2", "seeds=[0,1,2]", "final_seeds=[5,6,7]"]
    env = {**os.environ, "RAY_AUTH_MODE": "token", "PYTHONPATH": str(ROOT)}
    db = tmp_path / "threshold_search" / "colors_chebygin_unsup" / "optuna.db"
    log = tmp_path / "first_run.log"
    tune_before = _tune_folders()
    with open(log, "wb") as err:
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err,
                             start_new_session=True)
        deadline = time.time() + 150
        while time.time() < deadline and _optuna_trials(db) < 1 and p.poll() is None:
            time.sleep(0.5)
        with contextlib.suppress(ProcessLookupError):  # it may have finished before the kill
            os.killpg(p.pid, signal.SIGKILL)  # the driver and the Ray processes it started
        p.wait()
    first = _optuna_trials(db)
    assert first >= 1, log.read_text()[-2000:]  # a slow machine may finish the run first
    total = max(3, first + 1)  # the rerun must add trials to the same study, not restart it
    rerun = [a if not a.startswith("max_trials=") else f"max_trials={total}" for a in cmd]
    proc = subprocess.Popen(rerun, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=240)
    out = subprocess.CompletedProcess(rerun, proc.returncode, stdout, stderr)
    assert out.returncode == 0, out.stderr[-2000:]
    # the embedded Ray it started is stopped and its session folder removed, as a grid run's
    from ablate.runner.execute.ray_env import ray_temp_dir
    from ablate.runner.execute.reap import SESSION_MARK

    left = [s for s in ray_temp_dir().glob("session_*")
            if (s / SESSION_MARK).is_file() and (s / SESSION_MARK).read_text() == str(proc.pid)]
    assert not left, left
    assert "colors_chebygin_unsup: search trial #" in out.stderr, out.stderr[-2000:]
    # the killed driver's Tune folder is gone (the rerun removed it) and so is the rerun's own
    assert not _tune_folders() - tune_before, _tune_folders() - tune_before
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
    """OptunaSearch (TPE, seeded) + ASHA with the spec's space, given as the search's
    define-by-run `DefineSpace`, gets near log10 t = -2; every Tune config carries its
    Optuna trial number."""
    import math

    import optuna
    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    from ablate.runner.search.tuning import DefineSpace
    from ablate.runner.study.search_spec import arm_config, build_space, load_search_spec

    spec = load_search_spec("threshold_search", [*TINY, "arms=colors_chebygin_unsup"])
    space = build_space(spec.search, arm_config(spec, "colors_chebygin_unsup"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), str(ROOT)]))  # for workers
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")  # a new local Ray, never one already running here
    try:
        searcher = OptunaSearch(space=DefineSpace(space), metric="val_acc", mode="max",
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
    assert sorted(r.config["optuna_trial"] for r in grid) == list(range(16))


def test_optuna_db_appears_only_when_complete(tmp_path):
    """The SQLite file is built under a temp name and renamed: a kill mid-schema leaves no
    half-made database, and a leftover temp file is cleared by the next run."""
    import optuna

    from ablate.runner.search.tuning import create_db

    db = tmp_path / "optuna.db"
    (tmp_path / ".optuna.db.999.tmp").write_bytes(b"half-made")
    create_db(db, "arm")
    assert db.exists() and not list(tmp_path.glob(".*.tmp"))
    study = optuna.load_study(study_name="arm", storage=f"sqlite:///{db}")
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE


@pytest.mark.slow  # a Ray cluster of two nodes; CI runs -m slow too
def test_a_search_on_another_node_gets_the_prepared_data_and_declares_its_memory(
        tmp_path, monkeypatch, local_cluster):
    """Search trials travel as grid trials do: a head without CPUs, a second node whose dataset
    cache is another folder; each search trial declares its host memory to Ray, the node
    receives the driver's prepared file once, byte for byte, and the search completes there."""
    import ablate.data.cache
    from ablate.data import load_graphsets
    from ablate.runner.execute import ship
    from ablate.runner.execute.ray_env import start_ray
    from ablate.runner.execute.store import Store
    from ablate.runner.search import tuning
    from ablate.runner.search.tuning import run_search
    from ablate.runner.study.search_spec import arm_config, load_search_spec

    driver_cache, node_cache = tmp_path / "driver", tmp_path / "node2"
    monkeypatch.delenv("ABLATE_CACHE", raising=False)  # each node its own disk
    monkeypatch.setattr(ablate.data.cache, "cache_dir", lambda: driver_cache)
    cluster = local_cluster(num_cpus=0)
    cluster.add_node(num_cpus=2, env_vars={"ABLATE_CACHE": str(node_cache)})
    cluster.wait_for_nodes()
    arm = "colors_chebygin_unsup"
    spec = load_search_spec("threshold_search", [
        *TINY, "epochs=2", f"arms={arm}", "n_trials=2", "grace_period=2", "max_concurrent=2",
        f"ray_address={cluster.address}", f"results_dir={tmp_path / 'results'}"])
    cfg = arm_config(spec, arm)
    load_graphsets(cfg.dataset, **cfg.data_kwargs)  # the driver prepares, as entry.main does
    start_ray(spec.ray_address)
    asked = []
    resources = tuning.search_resources
    monkeypatch.setattr(tuning, "search_resources",
                        lambda *a: asked.append(resources(*a)) or asked[-1])
    assert run_search(spec, arm, Store(spec.results_dir, spec.name)) == 2
    [(declared, pieces)] = asked
    assert declared["memory"] > 0 and declared["cpu"] == spec.cpus_per_trial and len(pieces) == 1
    [sent] = driver_cache.glob("*.npz")
    assert (node_cache / sent.name).read_bytes() == sent.read_bytes()
    [got] = ship.received(node_cache)  # once for the node's trials
    assert got["file"] == sent.name


def search_with_layer(layer: str) -> str:
    """A tiny search study (2 Optuna trials of 1 epoch, tiny COLORS) with `backbone=layer`."""
    return SEARCH_WITH_LAYER.replace("LAYER", layer)


SEARCH_WITH_LAYER = """
kind: search
fixed: {dataset: colors, backbone: "LAYER", epochs: 1}
data: {n_train: 40, n_val: 40, n_test: 40, n_max_large: 40}
arms:
  mine: {supervision: unsup}
search:
  threshold: {low: 1.0e-4, high: 1.0e-1, log: true}
seeds: [0, 1, 2]
final_seeds: [5]
n_trials: 2
grace_period: 1
max_concurrent: 1
"""


@pytest.mark.slow  # a real local Ray: about 30 s here; CI runs -m slow too
def test_a_users_layer_reaches_the_search_trials_and_the_final_tasks(ray_env, tmp_path,
                                                                     monkeypatch):
    """A search study with ``backbone=module:Class`` whose module lies in a folder only on the
    driver's sys.path (not the working directory, not PYTHONPATH): the Tune trials and the
    final evaluation's Ray tasks import it, as a grid study's trials do (the driver sends
    `import_paths()`, the workers apply them: `ray_env.worker_env`)."""
    from test_dense_layers import USER_LAYER

    from ablate.run import main
    from ablate.runner.execute.store import Store

    work, lib = tmp_path / "work", tmp_path / "lib"
    work.mkdir()
    lib.mkdir()
    (lib / "user_layers_search.py").write_text(USER_LAYER)
    (work / "mine_search.yaml").write_text(search_with_layer("user_layers_search:MeanConv"))
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(lib))
    assert str(lib) not in os.environ.get("PYTHONPATH", "")
    assert main(["study=./mine_search.yaml", f"results_dir={tmp_path / 'results'}"]) == 0
    df = Store(tmp_path / "results", "mine_search").read()
    assert (df.status == "ok").all(), set(df.error)  # before: no module named 'user_layers_search'
    assert set(df.role) == {"search", "tuned", "reference"}
    assert set(df[df.role == "search"].optuna_trial) == {0, 1}
    assert set(df.backbone) == {"user_layers_search:MeanConv"}


BOOM_LAYER = """
import os

import torch

from ablate.errors import ConfigError


class Boom(torch.nn.Module):
    '''Fits the driver's check of a user's layer (3 -> 4 features) and raises on a real
    model's sizes, so only in a worker: the error named in BOOM_DIR/raise, each attempt counted
    in BOOM_DIR/attempts. 'KIND once' fails the first construction only (BOOM_DIR/raised marks
    it done); 'exit' is the worker's death; 'late KIND' fails at the first training step after
    the model's first evaluation (epoch 2, once epoch 1 is reported) instead.'''

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.late, self.evaluated = "", False
        if (in_channels, out_channels) != (3, 4):
            folder = os.environ["BOOM_DIR"]
            with open(os.path.join(folder, "attempts"), "a") as f:
                f.write("attempt\\n")
            with open(os.path.join(folder, "raise")) as f:
                kind = f.read().strip()
            if kind.startswith("late "):
                self.late = kind[len("late "):]
            else:
                _fail(kind)
        self.lin = torch.nn.Linear(in_channels, out_channels)

    def forward(self, x, adj, mask):
        if self.late and self.training and self.evaluated:
            kind, self.late = self.late, ""
            _fail(kind)
        self.evaluated = self.evaluated or not self.training
        return self.lin(adj @ x + x)


def _fail(kind):
    if kind.endswith(" once"):
        kind, marker = kind[:-len(" once")], os.path.join(os.environ["BOOM_DIR"], "raised")
        if os.path.exists(marker):
            kind = ""
        else:
            open(marker, "w").close()
    if kind == "exit":
        os._exit(1)
    if kind:
        error = {"ConfigError": ConfigError, "RuntimeError": RuntimeError}[kind]
        raise error(f"boom ({kind})\\nsecond line")
"""



def _boom(tmp_path, monkeypatch, kind: str) -> Path:
    """The failing layer in a folder only on the driver's sys.path; BOOM_DIR for the workers
    (set before Ray starts, so they inherit it)."""
    lib = tmp_path / "lib"
    lib.mkdir(exist_ok=True)
    (lib / "boom_search.py").write_text(BOOM_LAYER)
    (tmp_path / "raise").write_text(kind)
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.setenv("BOOM_DIR", str(tmp_path))
    return tmp_path / "attempts"


@pytest.mark.slow  # a real local Ray: about 30 s here; CI runs -m slow too
def test_a_search_whose_trials_all_fail_exits_1_with_their_error(ray_env, tmp_path, monkeypatch,
                                                                  capsys):
    """A search trial that raises in its worker is stored with its own error in one line (the
    type and first message line, `error_line`, as a grid trial's), the summary says how many
    search trials failed and why in one line, and the command exits 1 (before: exit 0, 'no
    finished unpruned trial yet' and rows saying 'trial raised (see Ray logs)')."""
    from ablate.run import main
    from ablate.runner.execute.store import Store

    _boom(tmp_path, monkeypatch, "RuntimeError")
    work = tmp_path / "work"
    work.mkdir()
    (work / "boom_search.yaml").write_text(search_with_layer("boom_search:Boom"))
    monkeypatch.chdir(work)
    assert main(["study=./boom_search.yaml", f"results_dir={tmp_path / 'results'}"]) == 1
    df = Store(tmp_path / "results", "boom_search").read()
    assert set(df.role) == {"search"} and set(df.optuna_trial) == {0, 1}
    assert set(df.status) == {"error"} and set(df.error) == {"RuntimeError: boom (RuntimeError)"}
    out, err = capsys.readouterr()
    assert "mine: 2 search trial(s) failed: 2 x RuntimeError: boom (RuntimeError)" in out, out
    assert "search trials failed in this run: mine 2 of 2" in out, out
    assert "Traceback" not in out


@pytest.mark.slow  # a real local Ray: about 20 s here; CI runs -m slow too
def test_a_final_config_is_retried_only_when_a_retry_may_fix_it(ray_env, tmp_path, monkeypatch,
                                                                  capsys):
    """The final evaluation retries by the grid runner's rule (`ablate.errors.retryable`): a
    config error that fails every time runs once per role (before: three times, Ray's
    retry_exceptions=True), a runtime fault runs 1 + FINAL_RETRIES times; both are stored as
    failed rows with their error in one line, and the failure line says which it was."""
    from ablate.runner.execute.ray_env import start_ray
    from ablate.runner.execute.store import Store
    from ablate.runner.search.final import FINAL_RETRIES, final_evaluation
    from ablate.runner.study.search_spec import load_search_spec

    attempts = _boom(tmp_path, monkeypatch, "ConfigError")
    arm = "colors_chebygin_unsup"
    spec = load_search_spec("threshold_search", [
        *TINY, "epochs=1", f"arms={arm}", "final_seeds=[5]", "backbone=boom_search:Boom",
        f"results_dir={ray_env / 'results'}"])
    store = Store(spec.results_dir, spec.name)
    start_ray(None)
    best = {"optuna_trial": 0, "params": {"threshold": 0.02}}
    roles = ["tuned", "reference"]
    assert final_evaluation(spec, arm, best, store) == roles
    assert len(attempts.read_text().splitlines()) == len(roles)  # once each: not retried
    assert set(store.read().error) == {"ConfigError: boom (ConfigError)"}
    assert (f"{arm}: final tuned failed (not retried: a retry cannot fix this error): "
            "ConfigError: boom (ConfigError)") in capsys.readouterr().err

    attempts.unlink()
    (tmp_path / "raise").write_text("RuntimeError")  # may pass on a retry: retried
    assert final_evaluation(spec, arm, best, store) == roles  # failed rows: run again
    assert len(attempts.read_text().splitlines()) == len(roles) * (1 + FINAL_RETRIES)
    assert set(store.read().error) == {"RuntimeError: boom (RuntimeError)"}
    assert (f"{arm}: final tuned failed (tried {1 + FINAL_RETRIES} times): RuntimeError: "
            "boom (RuntimeError)") in capsys.readouterr().err


def _run_boom_search(tmp_path, monkeypatch, kind: str, *overrides: str) -> int:
    """`search_with_layer` with the `BOOM_LAYER` failing as `kind` says, one search trial; the
    command's exit code."""
    from ablate.run import main

    attempts = _boom(tmp_path, monkeypatch, kind)
    assert not attempts.exists()
    work = tmp_path / "work"
    work.mkdir()
    (work / "boom_search.yaml").write_text(search_with_layer("boom_search:Boom"))
    monkeypatch.chdir(work)
    return main(["study=./boom_search.yaml", f"results_dir={tmp_path / 'results'}", "n_trials=1",
                 *overrides])


def _failures(tmp_path) -> list[dict]:
    import json

    log = tmp_path / "results" / "boom_search" / "failures.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.slow  # a real local Ray: about 40 s each here; CI runs -m slow too
@pytest.mark.parametrize("kind, error, epochs", [
    ("RuntimeError once", "RuntimeError: boom (RuntimeError)", 1),
    ("exit once", "ActorDiedError: The actor died", 1),  # the worker's process dies
    # in epoch 2, after epoch 1 was reported: the retry reports epoch 1 again
    ("late RuntimeError once", "RuntimeError: boom (RuntimeError)", 2),
])
def test_a_search_trial_that_fails_once_is_retried_and_the_study_finishes(
        kind, error, epochs, ray_env, tmp_path, monkeypatch, capsys, recwarn):
    """A search trial whose first attempt raises an error a retry may fix, or whose worker
    dies, is recorded and run again (`max_failures`, default 2, as a grid study's): the study
    finishes, exit 0; its rows are the passing attempt's (``attempt`` 2), the failed attempt
    has its line in failures.jsonl and the summary says a search trial passed on a retry
    (before: the trial was stored failed at once and the command exited 1). The arm's
    cv_folds and objective are recorded beside its Optuna study (the rerun check reads them).
    Rows and the failure line carry the attempt's node and created_at, as a grid trial's
    (before: none and ''). A retry that reports an epoch its failed attempt reported gives
    Optuna that epoch's value without a warning (before: Optuna's UserWarning "The reported
    value is ignored because this `step=1` is already reported", the failed attempt's kept)."""
    import json

    import optuna

    from ablate.runner.execute.store import Store

    assert _run_boom_search(tmp_path, monkeypatch, kind, f"epochs={epochs}") == 0
    df = Store(tmp_path / "results", "boom_search").read()
    assert (df.status == "ok").all(), set(df.error)
    search = df[df.role == "search"]
    assert set(search.optuna_trial) == {0} and set(search.attempt) == {2}
    assert set(df[df.role != "search"].attempt) == {1}
    assert search.created_at.notna().all() and (search.node != "").all(), search.node
    [failure] = _failures(tmp_path)
    assert (failure["trial_id"], failure["attempt"], failure["status"]) == (
        "mine-trial00000", 1, "error")
    assert failure["error"].startswith(error) and "\n" not in failure["error"], failure
    assert failure["created_at"] and "node" in failure, failure
    if kind.startswith("late"):  # epoch 1 was reported from the node it ran on
        assert failure["node"] == search.node.iloc[0], failure
    out, err = capsys.readouterr()
    assert "search trial #0 failed (attempt 1 of 3), run again: " + error in err, err[-3000:]
    assert f"search trial #0 finished {epochs} epochs (attempt 2)" in err
    assert ("mine: 1 search trial(s) run again after a failed attempt, 1 passed on a retry"
            in out), out
    assert "search trials failed in this run" not in out
    told = [str(w.message) for w in recwarn if "optuna" in w.filename or "reported" in
            str(w.message)]
    assert not told, told
    db = tmp_path / "results" / "boom_search" / "mine" / "optuna.db"
    [trial] = optuna.load_study(study_name="mine", storage=f"sqlite:///{db}").trials
    # every epoch but the last, which ASHA stops at (max_t): Tune tells it as the value
    assert sorted(trial.intermediate_values) == list(range(1, epochs))
    assert trial.state.name == "COMPLETE" and trial.value == search.objective.iloc[0]
    record = tmp_path / "results" / "boom_search" / "mine" / "settings.json"  # its protocol
    assert json.loads(record.read_text()) == {"cv_folds": 0, "objective": "mean"}


@pytest.mark.slow  # a real local Ray: about 30 s each here; CI runs -m slow too
@pytest.mark.parametrize("kind, max_failures, runs", [
    ("ConfigError", 2, 1),  # a retry cannot fix a config error: run once
    ("RuntimeError", 1, 2),  # may pass on a retry: 1 + max_failures attempts in all
])
def test_a_search_trial_is_retried_only_when_a_retry_may_fix_it(
        kind, max_failures, runs, ray_env, tmp_path, monkeypatch, capsys):
    """Search trials retry by the grid runner's rule (`ablate.errors.retryable`): one that
    fails every time with a config error runs once, one with a runtime fault 1 +
    `max_failures` times; each failed attempt is recorded (failures.jsonl), the trial's rows
    are its last attempt's, failed, and the command exits 1."""
    from ablate.runner.execute.store import Store

    assert _run_boom_search(tmp_path, monkeypatch, kind, f"max_failures={max_failures}") == 1
    assert len((tmp_path / "attempts").read_text().splitlines()) == runs
    df = Store(tmp_path / "results", "boom_search").read()
    assert set(df.role) == {"search"} and set(df.status) == {"error"}
    assert set(df.attempt) == {runs} and set(df.error) == {f"{kind}: boom ({kind})"}
    assert [(f["attempt"], f["error"]) for f in _failures(tmp_path)] == [
        (n, f"{kind}: boom ({kind})") for n in range(1, runs + 1)]
    out = capsys.readouterr().out
    assert "search trials failed in this run: mine 1 of 1" in out, out
    assert ("run again after a failed attempt, 0 passed" in out) == (runs > 1), out


def _stored_search_trial(spec, arm: str, number: int = 0, **params) -> dict:
    """One stored search row of `arm` as a search trial writes it (`tuning.store_writer`)."""
    from ablate.config import axes
    from ablate.runner.study.search_spec import arm_config

    cfg = arm_config(spec, arm, **{"threshold": 0.01, **params})
    return {**axes(cfg), "search_arm": arm, "role": "search", "optuna_trial": number,
            "pruned": False, "epochs_run": cfg.epochs, "objective": 0.5, "seed": 0, "fold": -1,
            "split": "val", "accuracy": 0.5, "status": "ok", "error": ""}


class _RayWouldStart(Exception):
    """Raised in place of starting Ray: the run got past its checks."""


def _stop_before_ray(monkeypatch) -> None:
    """Starting Ray raises `_RayWouldStart`: a run that gets past its checks stops there."""
    import ablate.runner.execute.ray_env

    def no_ray(address):
        raise _RayWouldStart

    monkeypatch.setattr(ablate.runner.execute.ray_env, "start_ray", no_ray)


def _store_files(root: Path) -> dict:
    """Every file of a results folder but the lock a run takes (the store's bookkeeping)."""
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != ".lock"}


def _assert_refused(main, argv: list[str], arm: str, words: str, capsys, root: Path) -> None:
    """The run is refused in one line naming the arm and what its store holds, and writes
    nothing: no study file kept, no record, no row."""
    before = _store_files(root)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: arm {arm}: ") and "\n" not in err, err
    assert f"holds its search on {words}; give another results_dir=" in err, err
    assert _store_files(root) == before


@pytest.mark.parametrize("change, words", [
    ("backbone=gin", "backbone chebygin_ref, this run asks for gin"),
    ("data.n_train=41", "data.n_train 40, this run asks for 41"),
    ("epochs=3", "epochs 2, this run asks for 3"),
    ("+note=hi", "+note (unset), this run asks for hi"),
    ("lr=0.01", "lr 0.001, this run asks for 0.01"),
])
def test_a_rerun_with_another_fixed_axis_is_refused_before_ray(change, words, tmp_path,
                                                              monkeypatch, capsys):
    """An arm's Optuna study searches one configuration: a rerun into the same results_dir that
    gives the arm another value of any fixed axis (its whole resolved config as a search trial
    records it, not only the data set) is one line, exit 2, before Ray starts, naming the arm,
    the axis and both values; nothing stored is touched (before: the study went on, mixing
    trials of two configurations). Other seeds, another search range or device are the same
    search and go on."""
    from ablate.run import main
    from ablate.runner.execute.store import Store
    from ablate.runner.study.search_spec import load_search_spec

    _stop_before_ray(monkeypatch)
    arm = "colors_chebygin_unsup"
    argv = ["study=threshold_search", *TINY, "epochs=2", f"arms={arm}", f"results_dir={tmp_path}"]
    spec = load_search_spec("threshold_search", argv)
    store = Store(tmp_path, "threshold_search")
    for n, t in enumerate((0.01, 0.002)):  # two trials: the searched value is not compared
        store.write(f"{arm}-trial{n:05d}", [_stored_search_trial(spec, arm, n, threshold=t)])
    _assert_refused(main, [*argv, change], arm, words, capsys, tmp_path)

    for same in ([], ["seeds=[3,4,5]", "search.threshold.low=1e-5", "device=cpu"]):
        with pytest.raises(_RayWouldStart):  # past the check, as far as starting Ray
            main([*argv, *same])


def _members(spec, arm: str, accs: list[float], objective: float, folds: int = 0) -> list[dict]:
    """The stored rows of one search trial of `arm` whose members (fold-major: `folds` folds,
    or none, x seeds 0, 1, 2) scored `accs`, its objective `objective`."""
    who = [(f, s) for f in (range(folds) if folds else [-1]) for s in (0, 1, 2)]
    return [{**_stored_search_trial(spec, arm), "seed": s, "fold": f, "accuracy": a,
             "objective": objective} for (f, s), a in zip(who, accs, strict=True)]


@pytest.mark.parametrize("record, stored, change, words", [
    # the record a search writes beside the arm's Optuna study (tuning.write_settings)
    (True, "one seed", "cv_folds=3", "cv_folds 0, this run asks for 3"),
    (True, "one seed", "objective=mean_minus_std", "objective mean, this run asks for "
     "mean_minus_std"),
    # a store written before the record: what its rows show
    (False, "5 folds", "cv_folds=0", "cv_folds 5, this run asks for 0"),
    (False, "5 folds", "cv_folds=3", "cv_folds 5, this run asks for 3"),
    (False, "mean - std", "objective=mean", "objective mean_minus_std, this run asks for mean"),
    (False, "mean", "objective=mean_minus_std", "objective mean, this run asks for "
     "mean_minus_std"),
])
def test_a_rerun_with_another_cv_folds_or_objective_is_refused_before_ray(
        record, stored, change, words, tmp_path, monkeypatch, capsys):
    """``cv_folds`` and ``objective`` decide what an objective value is: a rerun into the same
    results_dir with another value than the arm's search ran with is one line, exit 2, before
    Ray starts, naming the arm, the setting and both values, and nothing stored is touched
    (before: the Optuna study went on, mixing values that cannot be compared). A store written
    before the record is read by what its rows show (the members' folds; the objective a
    trial's accuracies give); rows that cannot tell are not compared, and the same settings
    go on."""
    import numpy as np

    from ablate.run import main
    from ablate.runner.execute.store import Store
    from ablate.runner.study.search_spec import load_search_spec

    _stop_before_ray(monkeypatch)
    arm = "colors_chebygin_unsup"
    argv = ["study=threshold_search", *TINY, "epochs=2", f"arms={arm}", f"results_dir={tmp_path}"]
    held = {"one seed": [], "5 folds": ["cv_folds=5"], "mean - std": ["objective=mean_minus_std"],
            "mean": []}[stored]
    spec = load_search_spec("threshold_search", [*argv, *held])
    store = Store(tmp_path, "threshold_search")
    accs = [0.4, 0.5, 0.9]
    rows = {"one seed": [_stored_search_trial(spec, arm)],  # cannot tell its objective
            "5 folds": _members(spec, arm, [0.5] * 15, 0.5, folds=5),
            "mean - std": _members(spec, arm, accs, 0.6 - float(np.std(accs))),
            "mean": _members(spec, arm, accs, 0.6)}[stored]
    store.write(f"{arm}-trial00000", rows)
    if record:
        from ablate.runner.search.tuning import settings_path, write_settings

        write_settings(spec, arm)
        assert settings_path(spec, arm).exists()

    _assert_refused(main, [*argv, change], arm, words, capsys, tmp_path)
    with pytest.raises(_RayWouldStart):  # the settings it ran with: past the check
        main([*argv, *held])


def test_a_store_whose_rows_cannot_tell_its_objective_is_not_refused(tmp_path, monkeypatch):
    """A store written before the record whose trials cannot tell the objective they were
    scored by (every member alike: mean and mean - std agree) goes on under either."""
    from ablate.run import main
    from ablate.runner.execute.store import Store
    from ablate.runner.study.search_spec import load_search_spec

    _stop_before_ray(monkeypatch)
    arm = "colors_chebygin_unsup"
    argv = ["study=threshold_search", *TINY, "epochs=2", f"arms={arm}", f"results_dir={tmp_path}"]
    spec = load_search_spec("threshold_search", argv)
    Store(tmp_path, "threshold_search").write(f"{arm}-trial00000",
                                              _members(spec, arm, [0.5] * 3, 0.5))
    for objective in ("mean", "mean_minus_std"):
        with pytest.raises(_RayWouldStart):
            main([*argv, f"objective={objective}"])


@pytest.mark.parametrize("text", ["{\"cv_folds\": 0, \"obj", "[0, \"mean\"]"])
def test_a_damaged_settings_record_is_refused_in_one_line(text, tmp_path, monkeypatch, capsys):
    """An arm's settings.json that is not the JSON object a search writes (truncated, edited by
    hand) is a damaged store: one line naming the file, exit 2, before Ray starts (before: a
    JSONDecodeError's traceback, or a record that was silently not compared)."""
    from ablate.run import main
    from ablate.runner.search.tuning import settings_path
    from ablate.runner.study.search_spec import load_search_spec

    _stop_before_ray(monkeypatch)
    arm = "colors_chebygin_unsup"
    argv = ["study=threshold_search", *TINY, "epochs=2", f"arms={arm}", f"results_dir={tmp_path}"]
    path = settings_path(load_search_spec("threshold_search", argv), arm)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: arm {arm}: {path} ") and "\n" not in err, err
    assert path.read_text() == text  # nothing touched


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_missing_data_path_is_refused_in_one_line_as_in_a_grid_study(dry_run, tmp_path,
                                                                       monkeypatch, capsys):
    """A search study's ``data.path`` that does not exist is refused by the grid studies' rule
    (`ablate.runner.plan.datasets.check_recipe_paths`), in the same line, exit 2: by its dry
    run (before: the arms were listed, exit 0) and by its run before anything is written or
    Ray starts."""
    from ablate.run import main

    _stop_before_ray(monkeypatch)
    missing, results = tmp_path / "no_such_folder", tmp_path / "results"
    assert main(["study=tu", f"data.path={missing}", "dry_run=true", "estimate=off"]) == 2
    grid = capsys.readouterr().err.strip()
    assert grid.startswith(f"error: dataset proteins: PROTEINS directory '{missing}' "
                           "(data.path) does not exist") and "\n" not in grid, grid
    argv = ["study=tu_search", "arms=proteins_weak", f"data.path={missing}",
            f"results_dir={results}", *(["dry_run=true"] if dry_run else [])]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert err.strip() == grid and not out, (out, err)
    assert not results.exists()  # nothing written


@pytest.mark.parametrize("dry_run", [True, False])
def test_two_arms_made_alike_by_an_override_are_refused_in_one_line(dry_run, tmp_path,
                                                                    monkeypatch, capsys):
    """An override that sets for every arm what told two arms apart (``supervision=unsup`` on
    threshold_search, whose arms differ by supervision) leaves two arms of the same
    configuration, which would run the same search twice: one line naming both, exit 2, by
    its dry run as by its run, before anything is written or Ray starts (before: both arms
    searched). One of them alone goes on."""
    from ablate.run import main

    _stop_before_ray(monkeypatch)
    results = tmp_path / "results"
    argv = ["study=threshold_search", *TINY, "epochs=2", "supervision=unsup",
            f"results_dir={results}", *(["dry_run=true"] if dry_run else [])]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    err = err.strip()
    assert err.startswith("error: arms colors_chebygin_unsup and colors_chebygin_sup are the "
                          "same configuration") and "\n" not in err and not out, (out, err)
    assert "arms=colors_chebygin_unsup" in err and not results.exists()
    alone = [*argv, "arms=colors_chebygin_sup"]
    if dry_run:
        assert main(alone) == 0
    else:
        with pytest.raises(_RayWouldStart):  # past the checks, as far as starting Ray
            main(alone)
