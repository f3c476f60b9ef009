"""Host memory at full size: a worker Ray kills for memory is an ordinary failed trial.

The kill is real: `_oom_study.py` runs in a process of its own with an embedded Ray whose
memory monitor threshold sits 1.5 GB above the machine's current use, and one trial
allocates until the monitor kills its worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ablate.runner.store import FAILURES, read_trials
from ablate.runner.tune_callback import MEMORY_KILLED

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def _oom_study(results: Path, calm: Path, tmp: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(ROOT)]),
           "ABLATE_CACHE": str(tmp / "cache"), "RAY_AUTH_MODE": "token"}
    return subprocess.run([sys.executable, str(TESTS / "_oom_study.py"), str(results), str(calm)],
                          env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_a_worker_killed_for_memory_is_a_failed_trial_retried_and_resumed(tmp_path):
    results, calm = tmp_path / "results", tmp_path / "calm"
    run = _oom_study(results, calm, tmp_path)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "Traceback" not in out and "Caught unexpected exception" not in out, out
    summary = run.stdout.splitlines()[0]
    assert "2 trials, 1 run" in summary and "1 failed, 1 retries" in summary, out
    assert MEMORY_KILLED in run.stdout and str(results / "oom" / FAILURES) in run.stdout
    rows = read_trials(results, "oom")
    assert sorted(rows.status) == ["error", "ok"]
    assert (rows[rows.status == "error"].error == MEMORY_KILLED).all()
    log = [json.loads(x) for x in (results / "oom" / FAILURES).read_text().splitlines()]
    assert [(e["attempt"], e["error"]) for e in log] == [(1, MEMORY_KILLED), (2, MEMORY_KILLED)]

    calm.touch()  # the rerun's hog behaves: only the failed trial runs again
    again = _oom_study(results, calm, tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 run, 1 skipped" in again.stdout.splitlines()[0]
    assert set(read_trials(results, "oom").status) == {"ok"}
