"""A Ray Tune trial worker's resident memory before its data (`WORKER_BYTES` in
ablate/trial/footprint.py): after the imports of the runner's trainable
(`ablate.runner.execute.worker`) and a graph trial, and after a first small
trial (COLORS at a tiny size, one epoch), in fresh workers of an embedded Ray, one trial at a
time. Median over `--repeats` workers; writes JSON.

    python benchmarks/bench_worker_base.py --repeats 3 --out benchmarks/results/DIR/worker_base.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _status_mb(key: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith(key + ":")) / 1024


def trainable(config: dict) -> None:
    from ray import tune

    start = _status_mb("VmRSS")
    import torch

    import ablate.runner.execute.worker  # noqa: F401 - what the runner's trainable imports
    from ablate.config import TrialConfig, resolve
    from ablate.data import load_graphsets
    from ablate.trial.graph import run_seed

    imports = _status_mb("VmRSS")
    tiny = (("n_max_large", 40), ("n_test", 40), ("n_train", 64), ("n_val", 40))
    cfg = resolve(TrialConfig(dataset="colors", data_params=tiny, epochs=1, device="cpu"))
    run_seed(cfg, load_graphsets(cfg.dataset, **cfg.data_kwargs), 0, torch.device("cpu"))
    tune.report({"start_mb": start, "after_imports_mb": imports,
                 "after_small_trial_mb": _status_mb("VmRSS"), "peak_mb": _status_mb("VmHWM")})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    from ablate.runner.execute.ray_env import quiet_ray_env
    from ablate.trial.provenance import git_sha, tree_state

    quiet_ray_env()
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    import ray
    from ray import tune

    ray.init(address="local", include_dashboard=False, num_cpus=1,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    t0 = time.time()
    tuner = tune.Tuner(tune.with_resources(trainable, {"cpu": 1}),
                       tune_config=tune.TuneConfig(num_samples=args.repeats),
                       run_config=tune.RunConfig(verbose=0))
    rows = [r.metrics for r in tuner.fit()]
    ray.shutdown()
    keys = ("start_mb", "after_imports_mb", "after_small_trial_mb", "peak_mb")
    doc = {"workers": [{k: round(r[k], 1) for k in keys} for r in rows],
           "median": {k: round(statistics.median(r[k] for r in rows), 1) for k in keys},
           "wall_s": round(time.time() - t0, 1), "git_sha": git_sha(),
           "git_dirty": tree_state(str(ROOT)), "machine": {"cores": os.cpu_count(),
                                                        "python": platform.python_version()},
           "command": " ".join(sys.argv)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["median"]))


if __name__ == "__main__":
    main()
