"""Scheduling overhead of the study runner, against the naive way, in one benchmark run.

The study: short COLORS trials (the reference generator with 500 validation
and 1,000 graphs per test split, 3 epochs; ChebyGIN unsupervised / supervised /
top-k and GIN unsupervised attention rows x N seeds). Two ways to run the same
(config, seed) units on this machine:

- runner: `ablate.runner.execute.driver.run_study` as `python -m ablate.run` does it:
  dataset built once in the driver, embedded Ray, Tune with `reuse_actors`,
  seeds packed per trial, results written to the Parquet store;
- naive: Ray Tune, one seed per trial, `reuse_actors=False` (a fresh worker
  process per trial, so torch and PyG are imported again), and the dataset
  generated inside every trial (an empty dataset cache per trial).

Wall time runs from before Ray starts to after it stops. Compute is the time
spent inside the trial function (the runner's `trial_s` column; the naive
trial's own clock, dataset generation included). Overhead = 1 - (compute /
cores used) / wall. Targets: runner overhead <= 15 %, runner >= 3x faster.

    python benchmarks/bench_scheduling.py                 # 192 units (48 Ray trials), both ways
    python benchmarks/bench_scheduling.py --skip-naive    # the runner only (~3 min)
    python benchmarks/bench_scheduling.py --units 96 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_AUTH_MODE", "token")

# attention rows only: global-pool models are scored by leave-one-node-out attention,
# which costs minutes per seed on the 2,500 large test graphs (not a short trial)
ROWS = [{"backbone": "chebygin_ref", "supervision": "unsup"},
        {"backbone": "chebygin_ref", "supervision": "sup"},
        {"backbone": "chebygin_ref", "supervision": "unsup", "selection": "topk", "ratio": 0.5},
        {"backbone": "gin", "supervision": "unsup"}]


DATA = {"n_val": 500, "n_test": 1000}  # test splits: 1,000 graphs each (reference: 2,500)


def build(units: int, epochs: int, seeds_per_trial: int):
    """The benchmark study: len(ROWS) model rows x (units / len(ROWS)) seeds."""
    from ablate.runner.study.compose import StudySpec
    from ablate.runner.study.expand import Study, expand

    n_seeds = -(-units // len(ROWS))
    spec = StudySpec(name="bench", fixed={"dataset": "colors", "epochs": epochs},
                     data=dict(DATA), variants=[dict(r) for r in ROWS],
                     seeds=list(range(n_seeds)),
                     seeds_per_trial=seeds_per_trial, cpus_per_trial=1, gpus_per_trial=0,
                     max_failures=0)
    return Study(spec, expand(spec))


def run_runner(study, workdir: Path) -> dict:
    from ablate.runner.execute.driver import run_study
    from ablate.runner.execute.store import read_trials

    os.environ["ABLATE_CACHE"] = str(workdir / "cache-runner")  # built once, by the driver
    t0, t_wall0 = time.perf_counter(), time.time()
    s = run_study(study, workdir / "results", progress="none")
    wall = time.perf_counter() - t0
    assert s.exit_code == 0, s.line()
    df = read_trials(workdir / "results", study.name).drop_duplicates("trial_id")
    return {"mode": "runner", "ray_trials": len(study.trials),
            "seed_runs": sum(len(t.config.seeds) for t in study.trials), "wall_s": wall,
            "compute_s": float(df.trial_s.sum()), "cores": _cores(1),
            "phases": {k: round(v, 1) for k, v in s.timings.items()},
            "first_trial_start_s": float(df.started_at.min() - t_wall0),
            "last_trial_end_s": float(df.finished_at.max() - t_wall0)}


def _naive_trainable(config: dict) -> None:
    import tempfile
    import time

    from ray import tune

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as cache:  # nothing cached: generate the dataset
        os.environ["ABLATE_CACHE"] = cache
        from ablate.trial.graph import run_trial_full

        res = run_trial_full(config["cfg"])
    tune.report({"accuracy": res.records[0]["accuracy"], "compute_s": time.perf_counter() - t0})


def run_naive(study, workdir: Path) -> dict:
    import logging

    import ray
    from ray import tune

    cfgs = [t.config.replace(seeds=(s,)) for t in study.trials for s in t.config.seeds]
    t0 = time.perf_counter()
    ray.init(logging_level=logging.ERROR, log_to_driver=False, include_dashboard=False)
    tuner = tune.Tuner(
        tune.with_resources(_naive_trainable, {"cpu": 1}),
        param_space={"cfg": tune.grid_search(cfgs)},
        tune_config=tune.TuneConfig(reuse_actors=False),
        run_config=tune.RunConfig(storage_path=str(workdir / "naive"), verbose=0),
    )
    grid = tuner.fit()
    ray.shutdown()
    wall = time.perf_counter() - t0
    computes = [r.metrics["compute_s"] for r in grid if r.metrics and "compute_s" in r.metrics]
    assert len(computes) == len(cfgs), "some naive trials failed"
    return {"mode": "naive", "ray_trials": len(cfgs), "seed_runs": len(cfgs), "wall_s": wall,
            "compute_s": float(sum(computes)), "cores": _cores(1)}


def _cores(cpus_per_trial: float) -> int:
    n = os.cpu_count() or 1
    return int(n // cpus_per_trial * cpus_per_trial)


def table(rows: list[dict]) -> str:
    runner = next(r for r in rows if r["mode"] == "runner")
    out = ["| way | Ray trials | seed runs | wall (s) | sum of trial compute (s) | "
           "compute / cores (s) | overhead | runner speed-up |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ideal = r["compute_s"] / r["cores"]
        overhead = 1 - ideal / r["wall_s"]
        speed = r["wall_s"] / runner["wall_s"]
        out.append(f"| {r['mode']} | {r['ray_trials']} | {r['seed_runs']} | {r['wall_s']:.1f} | "
                   f"{r['compute_s']:.1f} | {ideal:.1f} | {100 * overhead:.1f} % | "
                   f"{speed:.2f}x |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--units", type=int, default=192, help="(config, seed) units, >= 48")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seeds-per-trial", type=int, default=4)
    p.add_argument("--skip-naive", action="store_true")
    p.add_argument("--json", type=Path, help="also write the numbers here")
    args = p.parse_args(argv)

    study = build(args.units, args.epochs, args.seeds_per_trial)
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [run_runner(study, Path(tmp))]
        if not args.skip_naive:
            rows.append(run_naive(study, Path(tmp)))
    load1 = os.getloadavg()
    import ray
    import torch

    print(f"# scheduling benchmark: {rows[0]['seed_runs']} COLORS (config, seed) units, "
          f"{args.epochs} epochs, data {DATA}")
    print(f"# {platform.node()}: {os.cpu_count()} cores, python {sys.version.split()[0]}, "
          f"torch {torch.__version__}, ray {ray.__version__}; load average "
          f"{load0[0]:.1f} before, {load1[0]:.1f} after")
    print(table(rows))
    r = rows[0]
    print(f"# runner phases (s): {r['phases']}; first trial started at "
          f"{r['first_trial_start_s']:.1f} s, last one ended at {r['last_trial_end_s']:.1f} s")
    overhead = 1 - r["compute_s"] / r["cores"] / r["wall_s"]
    verdict = [f"runner overhead {100 * overhead:.1f} % (target <= 15 %)"]
    if len(rows) > 1:
        verdict.append(f"runner {rows[1]['wall_s'] / r['wall_s']:.2f}x faster than naive "
                       "(target >= 3x)")
    print("# " + "; ".join(verdict))
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "load": [load0, load1], "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
