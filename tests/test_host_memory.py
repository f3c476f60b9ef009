"""Host memory at full size: a worker Ray kills for memory is an ordinary failed trial.

The kill is real: `_oom_study.py` runs in a process of its own with an embedded Ray whose
memory monitor threshold sits 3 GB above the machine's current use, and one trial
allocates until the monitor kills its worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ablate.runner.execute.store import FAILURES, read_trials
from ablate.runner.execute.tune_callback import MEMORY_KILLED

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def _oom_study(results: Path, calm: Path, tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT)]),
           "ABLATE_CACHE": str(tmp / "cache"), "RAY_AUTH_MODE": "token"}
    return subprocess.run([sys.executable, str(TESTS / "_oom_study.py"), str(results), str(calm)],
                          env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)


@pytest.mark.slow  # the default suite stays under 10 min; CI runs -m slow too
def test_a_worker_killed_for_memory_is_a_failed_trial_retried_and_resumed(tmp_path):
    results, calm = tmp_path / "results", tmp_path / "calm"
    run = _oom_study(results, calm, tmp_path)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "Traceback" not in out and "Caught unexpected exception" not in out, out
    first, rerun = run.stdout.split("exit 1\n")  # the first run: exit 1 (a trial failed)
    summary = first.splitlines()[0]
    assert "2 trials, 1 run" in summary and "1 failed, 1 retries" in summary, out
    assert MEMORY_KILLED in first and str(results / "oom" / FAILURES) in first
    log = [json.loads(x) for x in (results / "oom" / FAILURES).read_text().splitlines()]
    assert [(e["attempt"], e["error"]) for e in log] == [(1, MEMORY_KILLED), (2, MEMORY_KILLED)], (
        log, out)
    # the rerun (the hog behaves now) runs only the failed trial, and completes
    assert "1 run, 1 skipped" in rerun.splitlines()[0] and rerun.strip().endswith("exit 0"), out
    assert set(read_trials(results, "oom").status) == {"ok"}


@pytest.mark.slow
def test_each_trial_declares_its_memory_and_ray_runs_no_more_than_fit(ray_env, monkeypatch,
                                                                      local_cluster):
    """A node with 3 CPUs but memory for two of the trials: Ray assigns each trial the memory
    its pack declared and never runs three at once."""
    from ablate.data import load_graphsets
    from ablate.runner.execute.driver import run_study
    from ablate.runner.plan.resources import trials_memory
    from ablate.runner.study.compose import StudySpec
    from ablate.runner.study.expand import Study, expand
    from ablate.runner.study.kinds import TRIAL_KINDS

    monkeypatch.setitem(TRIAL_KINDS, "memheld", "_memory_kinds:HELD")
    data = {"n_train": 30, "n_val": 20, "n_test": 20, "n_max_large": 30}
    spec = StudySpec(name="mem", kind="memheld", fixed={"dataset": "colors", "epochs": 1,
                                                         "backbone": "chebygin", "+hold": 2.0},
                     data=data, seeds=[0, 1, 2, 3], seeds_per_trial=1, gpus_per_trial=0)
    study = Study(spec, expand(spec))
    load_graphsets("colors", **data)  # prepared: the footprint is known
    need = trials_memory([study.trials[0]])
    assert need and all(trials_memory([t]) == need for t in study.trials)
    cluster = local_cluster(num_cpus=3, memory=int(2.5 * need))
    summary = run_study(study, ray_env / "results", ray_address=cluster.address,
                        progress="none")
    assert summary.exit_code == 0 and summary.ok == 4
    rows = read_trials(ray_env / "results", "mem")
    assert set(rows.assigned_memory) == {float(need)}
    spans = rows.groupby("trial_id")[["started_at", "finished_at"]].first().to_numpy()
    moments = sorted(t for a, b in spans for t in ((a, 1), (b, -1)))
    running = np.cumsum([d for _, d in moments])
    assert running.max() == 2  # two fit: they ran together, never three


def test_an_error_outside_tune_is_one_line_with_a_memory_kill_named():
    """Errors the driver catches itself (Tune's controller, a search's final evaluation): the
    trial's own exception in one line, Ray's memory-monitor kill said as in the store."""
    from ray.exceptions import RayTaskError

    from ablate.runner.execute.tune_callback import error_line

    cause = ValueError("n_colors must be >= 2\nmore detail")
    wrapped = RayTaskError("_run", "Traceback (most recent call last):\n  File x\nValueError", cause)
    assert error_line(wrapped) == "ValueError: n_colors must be >= 2"
    assert error_line(RuntimeError("")) == "RuntimeError"
    oom = RuntimeError("Task was killed due to the node running low on memory.\nMemory on the node")
    assert error_line(oom) == MEMORY_KILLED
