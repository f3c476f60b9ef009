"""A study whose one trial outgrows the node's memory, run in a process of its own.

`python tests/_oom_study.py RESULTS CALM_FILE` starts an embedded Ray whose memory monitor
kills a worker once the node's memory use passes a threshold set 3 GB above what is used
now (`RAY_memory_usage_threshold`), and runs a study of two trials, one at a time (each
takes every CPU): one reports at once; ``+hog`` (unless CALM_FILE exists) allocates and
touches memory until its worker is killed.
Then it creates CALM_FILE and runs the same study again (a rerun resumes the failed trial).
Prints each run's summary line, its failure lines and its exit code (``exit N``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

HEADROOM = 3e9  # bytes above today's use at which Ray's monitor kills: room for Ray's own
# processes (about 1 GB once started) and for other work on the machine moving by a GB or so


def _meminfo() -> dict[str, int]:
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, value = line.split(":", 1)
        out[key] = int(value.split()[0]) * 1024
    return out


def hog_trial(cfg):
    """``+hog=true``: allocate 64 MB at a time (touched) until killed, up to 2 GB past the
    threshold; then give up with an error the test would see. Otherwise one quick record."""
    extra = dict(cfg.extra)
    if extra.get("hog") and not Path(extra["calm"]).exists():
        import numpy as np

        chunks = []
        info = _meminfo()
        limit = info["MemTotal"] - info["MemAvailable"] + HEADROOM + 2e9
        while (info := _meminfo())["MemTotal"] - info["MemAvailable"] < limit:
            chunks.append(np.ones(8 << 20))
            time.sleep(0.02)
        time.sleep(20)  # the monitor checks every 250 ms
        raise RuntimeError("Ray's memory monitor never killed this worker")
    rec = {"seed": cfg.seeds[0], "split": "val", "status": "ok", "error": "", "accuracy": 1.0}
    return SimpleNamespace(records=[rec], curves=[])


def _settle(below: float, wait_s: float = 60.0) -> None:
    """Wait until the node's memory use is back under `below` bytes: the killed hog's memory
    is given back by then, so the monitor does not kill the rerun's worker for it."""
    end = time.time() + wait_s
    while time.time() < end:
        info = _meminfo()
        if info["MemTotal"] - info["MemAvailable"] < below:
            return
        time.sleep(0.2)


def main(results: str, calm: str) -> int:
    """The study, then (CALM_FILE created) the same study again on the same Ray: each run's
    summary line, failure lines and ``exit N``."""
    info = _meminfo()
    used = info["MemTotal"] - info["MemAvailable"]
    os.environ["RAY_memory_usage_threshold"] = f"{(used + HEADROOM) / info['MemTotal']:.4f}"
    os.environ["RAY_memory_monitor_refresh_ms"] = "100"
    from ablate.runner.execute.driver import run_study
    from ablate.runner.execute.ray_env import start_ray
    from ablate.runner.study.compose import StudySpec
    from ablate.runner.study.expand import Study, expand
    from ablate.runner.study.kinds import TRIAL_KINDS

    TRIAL_KINDS["hog"] = "_oom_study:HOG"
    spec = StudySpec(name="oom", kind="hog", fixed={"+calm": calm},
                     grid={"+hog": [False, True]}, seeds=[0],
                     cpus_per_trial=os.cpu_count() or 1,  # one trial at a time: the hog is killed
                     gpus_per_trial=0, max_failures=1)
    start_ray(None)  # one embedded Ray (its memory monitor as set above) for both runs
    for rerun in (False, True):
        if rerun:
            Path(calm).touch()  # the hog behaves now: the rerun resumes the failed trial
            _settle(used + HEADROOM / 2)
        summary = run_study(Study(spec, expand(spec)), results, progress="none")
        print(summary.line())
        for line in summary.failure_lines():
            print(line)
        print(f"exit {summary.exit_code}")
    return 0


def _kind():
    from _ray_kinds import _FunctionKind

    return _FunctionKind("hog", hog_trial, datasets=False, resolve=False)


HOG = _kind()

if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
