"""The runner on a real local Ray: failures, a dead worker node, fake GPUs, a killed driver.

Every study here uses tiny datasets (40-80 graphs per split) and a few epochs.
Trial kinds that inject faults live in `_ray_kinds.py`, which the Ray workers
import through PYTHONPATH.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

os.environ.setdefault("RAY_AUTH_MODE", "token")  # before `import ray` (DESIGN.md)

import ray  # noqa: E402

from ablate.runner.execute.driver import run_study  # noqa: E402
from ablate.runner.execute.ray_env import gpus_per_trial, start_ray  # noqa: E402
from ablate.runner.execute.store import FAILURES, Store, read_trials  # noqa: E402
from ablate.runner.study.compose import StudySpec  # noqa: E402
from ablate.runner.study.expand import Study, build_study, expand  # noqa: E402
from ablate.runner.study.kinds import TRIAL_KINDS  # noqa: E402

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
TINY = {"n_train": 40, "n_val": 40, "n_test": 40, "n_max_large": 40}
COLORS_SPLITS = {"val", "test_orig", "test_large", "test_largec"}


@pytest.fixture
def env(ray_env, monkeypatch):
    """`ray_env` plus the test trial kinds (importable by the driver and the workers)."""
    monkeypatch.setitem(TRIAL_KINDS, "faulty", "_ray_kinds:FAULTY")
    monkeypatch.setitem(TRIAL_KINDS, "held", "_ray_kinds:HELD")
    monkeypatch.setitem(TRIAL_KINDS, "barrier", "_ray_kinds:BARRIER")
    return ray_env


def _study(name: str, kind: str = "graph", fixed: dict | None = None, grid: dict | None = None,
           seeds=(0,), data: dict | None = None, **settings) -> Study:
    spec = StudySpec(name=name, kind=kind, fixed={"dataset": "colors", "backbone": "chebygin",
                                                  **(fixed or {})},
                     data=dict(TINY if data is None else data), grid=dict(grid or {}),
                     seeds=list(seeds), **settings)
    return Study(spec, expand(spec))


def _check_one_row_set_per_trial(study: Study, results: Path, splits=COLORS_SPLITS):
    """Every trial has exactly one file holding exactly seeds x splits rows, no duplicates."""
    files = sorted(p.stem for p in (results / study.name / "trials").glob("*.parquet"))
    assert files == sorted(t.trial_id for t in study.trials)
    df = read_trials(results, study.name)
    assert not df.duplicated(["trial_id", "seed", "split"]).any()
    for t in study.trials:
        rows = df[df.trial_id == t.trial_id]
        assert set(rows.seed) == set(t.config.seeds)
        assert set(rows.split) == splits
        assert len(rows) == len(t.config.seeds) * len(splits)
    return df


@pytest.mark.slow  # the default suite stays under 10 min; CI runs -m slow too
def test_nan_and_raising_trials_are_recorded_retried_and_reported(env):
    study = _study("faults", kind="faulty", seeds=(0, 1), seeds_per_trial=2, max_failures=1,
                   fixed={"epochs": 2, "+marker_dir": str(env / "markers")},
                   grid={"+fault": ["", "raise", "nan", "raise_once"]}, gpus_per_trial=0)
    fault = {dict(t.config.extra)["fault"]: t.trial_id for t in study.trials}
    out = io.StringIO()
    start_ray(None)  # one embedded Ray for both runs below (run_study keeps a running one)
    s = run_study(study, env / "results", progress="lines", stream=out)

    assert s.exit_code == 1 and s.ok == 2 and s.skipped == 0 and not s.remaining
    assert s.failed == sorted([fault["raise"], fault["nan"]])
    assert s.retries == 3  # raise, nan and raise_once were each retried once
    assert "2 failed" in s.line() and str(env / "results" / "faults") in s.line()
    assert "4/4 finished: 2 ok, 2 failed, 3 retried" in out.getvalue()

    df = _check_one_row_set_per_trial(study, env / "results")
    by = {f: df[df.trial_id == tid] for f, tid in fault.items()}
    assert set(by[""].status) == {"ok"} and set(by[""].attempt) == {1}
    assert set(by["raise_once"].status) == {"ok"} and set(by["raise_once"].attempt) == {2}
    assert set(by["raise"].status) == {"error"} and set(by["raise"].attempt) == {2}
    assert by["raise"].error.str.startswith("RuntimeError: injected fault").all()
    assert set(by["nan"].status) == {"nan"} and set(by["nan"].attempt) == {2}
    assert by["nan"].error.str.contains("non-finite training loss").all()
    assert by[""].accuracy.notna().all() and by["raise"].accuracy.isna().all()

    log = [json.loads(line) for line in
           (env / "results" / "faults" / FAILURES).read_text().splitlines()]
    got = sorted((e["trial_id"], e["attempt"], e["status"]) for e in log)
    assert got == sorted([(fault["raise"], 1, "error"), (fault["raise"], 2, "error"),
                          (fault["nan"], 1, "nan"), (fault["nan"], 2, "nan"),
                          (fault["raise_once"], 1, "error")])

    again = run_study(study, env / "results", progress="none")  # reruns only the failed ones
    assert again.skipped == 2 and again.failed == s.failed and again.exit_code == 1
    _check_one_row_set_per_trial(study, env / "results")


@pytest.mark.slow  # the default suite stays under 10 min; CI runs -m slow too
def test_worker_node_killed_mid_study_every_trial_ends_with_one_row_set(env, local_cluster):
    cluster = local_cluster(num_cpus=1)
    worker = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    markers = env / "markers"
    markers.mkdir()
    (markers / "hold").write_text(worker.node_id)  # trials on the worker wait to be killed
    study = _study("nodes", kind="held", fixed={"epochs": 20, "+marker_dir": str(markers)},
                   seeds=range(8), max_failures=2, data={**TINY, "n_train": 80},
                   gpus_per_trial=0)
    results = env / "results"
    box = {}
    driver = threading.Thread(target=lambda: box.update(s=run_study(
        study, results, ray_address=cluster.address, progress="none")))
    driver.start()
    store = Store(results, "nodes")
    deadline = time.time() + 180
    while not list(markers.glob(f"running-{worker.node_id}-*")):  # a trial on the worker
        if time.time() > deadline:
            pytest.fail("no trial ever ran on the worker node")
        time.sleep(0.05)
    n_before = len(store.trial_files())
    cluster.remove_node(worker, allow_graceful=False)
    driver.join(timeout=300)
    assert not driver.is_alive()

    s = box["s"]
    assert s.exit_code == 0 and s.ok == 8 and not s.failed and n_before < 8
    assert s.retries >= 1  # the trial that ran on the dead node
    df = _check_one_row_set_per_trial(study, results)
    assert set(df.status) == {"ok"}
    retried = df[df.attempt > 1]
    assert len(retried) and (retried.node_id != worker.node_id).all()  # rerun elsewhere
    log = (results / "nodes" / FAILURES).read_text()
    assert "died" in log or "node" in log.lower()


@pytest.mark.slow  # the default suite stays under 10 min; CI runs -m slow too
def test_fake_gpus_run_four_quarter_gpu_trials_at_once(env, local_cluster):
    cluster = local_cluster(num_cpus=4, num_gpus=1)
    study = _study("gpus", kind="barrier", seeds=range(4), gpus_per_trial=0.25,
                   cpus_per_trial=1, fixed={"+parties": 4, "+marker_dir": str(env / "barrier")})
    s = run_study(study, env / "results", ray_address=cluster.address, progress="none")
    ray.init(address=cluster.address)
    auto = gpus_per_trial("auto")
    assert s.exit_code == 0 and s.ok == 4
    df = read_trials(env / "results", "gpus")
    assert len(df) == 4 and set(df.status) == {"ok"}
    assert set(df.gpu_ids) == {"0"} and set(df.visible_gpu) == {"0"}  # the GPU Ray assigned
    assert set(df.cuda_visible_devices) == {"0"}
    assert df.started_at.max() < df.finished_at.min()  # all four inside at the same time
    assert auto == 0.25


def _cli(args: list[str], env: dict, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ablate.run", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, **kw)


def _wait_files(store: Store, n: int, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while len(store.trial_files()) < n:
        if proc.poll() is not None:
            pytest.fail(f"the driver exited early:\n{proc.stdout.read()}")
        if time.time() > deadline:
            pytest.fail("no progress")
        time.sleep(0.1)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.slow  # the default suite stays under 10 min; CI runs -m slow too
def test_killed_driver_rerun_resumes_without_duplicates_or_torn_files(env):
    """Ctrl-C (exit 130), SIGTERM (exit 143: batch schedulers, `docker stop`), SIGKILL, then a
    rerun that finishes: every stop keeps what finished, nothing runs twice, nothing is torn."""
    studies = env / "studies"
    studies.mkdir()
    (studies / "resume.yaml").write_text("""
description: driver-kill test
fixed: {dataset: colors, backbone: chebygin, epochs: 20}
data: {n_train: 80, n_val: 40, n_test: 40, n_max_large: 40}
seeds: "range(0,12)"
gpus_per_trial: 0
""")
    results = env / "results"
    store = Store(results, "resume")
    penv = {**os.environ, "ABLATE_STUDIES": str(studies)}
    args = ["study=resume", f"results_dir={results}", "progress=lines"]
    counts = [0]

    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):  # Tune stops gracefully
        proc = _cli(args, penv)
        _wait_files(store, counts[-1] + 1, proc)
        proc.send_signal(sig)
        try:
            out, _ = proc.communicate(timeout=120)
        finally:
            _kill_group(proc)
        assert proc.returncode == code, out
        assert "interrupted: rerun the same command to resume" in out
        assert "Traceback" not in out and "SIGTERM received" not in out, out
        assert not list(Path(tempfile.gettempdir()).glob(f"ablate-tune-resume-pid{proc.pid}-*"))
        counts.append(len(store.trial_files()))
        assert counts[-2] < counts[-1] < 12

    killed = _cli(args, penv)  # SIGKILL: nothing runs after it
    _wait_files(store, counts[-1] + 1, killed)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(timeout=60)
    _kill_group(killed)
    n = len(store.trial_files())
    assert counts[-1] < n < 12

    last = _cli(args, penv)
    out, _ = last.communicate(timeout=300)
    _kill_group(last)
    assert last.returncode == 0, out
    assert f"{n} skipped" in out and "(complete)" in out

    study_dir = results / "resume"
    for p in (study_dir / "trials").iterdir():  # no torn files: every result file reads
        if not p.name.startswith("."):
            assert pq.read_table(p).num_rows == 4
    study, _ = build_study("resume", directory=studies)
    df = _check_one_row_set_per_trial(study, results)
    assert set(df.status) == {"ok"} and len(df) == 48


@pytest.mark.slow  # the default suite stays under 10 min; CI runs -m slow too
def test_an_embedded_rays_logs_are_kept_and_named_when_a_trial_failed(env):
    """A run on its own embedded Ray removes the session folder when every trial is ok
    (test_edges) and keeps it, named on the summary, when a trial failed: Ray's logs are the
    first place to look."""
    import shutil

    study = _study("logs", kind="faulty", fixed={"epochs": 1, "+marker_dir": str(env / "m")},
                   grid={"+fault": ["raise"]}, max_failures=0, gpus_per_trial=0)
    assert not ray.is_initialized()  # the run starts (and stops) its own Ray
    s = run_study(study, env / "results", progress="none")
    try:
        assert s.exit_code == 1 and s.failed and not ray.is_initialized()
        logs = Path(s.ray_logs)
        assert logs.name == "logs" and logs.is_dir() and any(logs.iterdir())
        assert f"Ray's logs of this run: {logs}" in s.failure_lines()
    finally:
        if s.ray_logs:
            shutil.rmtree(Path(s.ray_logs).parent, ignore_errors=True)
