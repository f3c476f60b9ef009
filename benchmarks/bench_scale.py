"""Thousands of tiny trials through one driver: start-up, overhead per trial, memory, store.

The study: tiny COLORS trials (two variants, global pooling and unsupervised attention;
half the trials each; one epoch; 16 graphs per split; one seed per trial), run with
``python -m ablate.run`` on an embedded Ray in a child process, exactly as a user runs it
(planning, store, dataset, Ray, the hand-over to Tune, trials, Parquet files). Per size it
prints:

- first trial started / stored: seconds from the command's start to the first trial's
  start on a worker (its ``started_at``) and to its file in the store (the file's mtime);
- wall: the command's start to its exit;
- overhead per trial: (wall - summed trial compute / trial slots) / trials, the time per
  trial not spent computing (start-up and shut-down included); and the same over the
  steady state only (from the first trial's start to the last one's end);
- driver peak RSS: the driver process's own peak resident memory (``ru_maxrss``);
- store: the study folder's size on disk and its files.

Targets (issue 30): first trial within 10 s of the start at 10,000 trials; overhead per
trial within 20% from 1,000 to 10,000; driver peak RSS at most 1 GB.

``--instant`` runs trials that train nothing (one record, returned at once; the study's
trial kind is `INSTANT` below, which the workers import from this file): what is left is
the runner's own cost per trial (Tune, Ray, the payload, the store's write).

    python benchmarks/bench_scale.py                   # 1,000 and 10,000 trials (~25 min here)
    python benchmarks/bench_scale.py --trials 200      # one size
    python benchmarks/bench_scale.py --instant         # the runner alone, trials that train nothing
    python benchmarks/bench_scale.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))  # this checkout's ablate, installed or not

STUDY = """\
description: tiny COLORS trials for the scale benchmark (benchmarks/bench_scale.py)
kind: graph
fixed:
  epochs: 1
data:
  n_train: 16
  n_val: 16
  n_test: 16
  n_max_large: 40
variants:
  - {{pool_layers: []}}
  - {{supervision: unsup}}
seeds: range(0,{seeds})
seeds_per_trial: 1
cpus_per_trial: 1
gpus_per_trial: 0
max_failures: 0
"""
INSTANT_KIND = "kind: instant\n"


def instant_trial(cfg) -> SimpleNamespace:
    """A trial that trains nothing: one record of its seed, at once."""
    rec = {"seed": cfg.seeds[0], "split": "val", "status": "ok", "error": "", "accuracy": 1.0}
    return SimpleNamespace(records=[rec], curves=[])


def _instant_kind():
    """The graph trial kind (its config, columns, ids) whose trials are `instant_trial`,
    without a dataset; made on first use (`INSTANT`), so importing this file stays light."""
    from ablate.trial.graph import GraphKind

    class Instant(GraphKind):
        name, datasets = "instant", False

        def run(self, cfg):
            return instant_trial(cfg)

        def pack_key(self, cfg):
            return None

    return Instant()


def __getattr__(name: str):  # `INSTANT`, the kind the driver and the workers load by path
    if name == "INSTANT":
        return _instant_kind()
    raise AttributeError(name)


def _child(argv: list[str], out: Path) -> int:
    """The driver: `ablate.run.main` in this process, then its own peak RSS to `out`."""
    sys.path.insert(0, str(ROOT))
    from ablate.run import main
    from ablate.runner.study.kinds import TRIAL_KINDS

    TRIAL_KINDS["instant"] = "bench_scale:INSTANT"

    code = main(argv)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    out.write_text(json.dumps({"code": code, "peak_rss_mb": peak_kb / 1024}))
    return code


def run_size(trials: int, work: Path, instant: bool = False) -> dict:
    """Run the study with `trials` trials in a fresh results folder and dataset cache."""
    from ablate.runner.execute.store import read_trials

    seeds = -(-trials // 2)
    folder = work / f"n{trials}{'-instant' if instant else ''}"
    folder.mkdir()
    study = folder / "scale.yaml"
    study.write_text(STUDY.format(seeds=seeds).replace("kind: graph\n", INSTANT_KIND)
                     if instant else STUDY.format(seeds=seeds))
    results, out, log = folder / "results", folder / "child.json", folder / "stderr.log"
    env = {**os.environ, "ABLATE_CACHE": str(folder / "cache"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, __file__, "--child", str(out), f"study={study}",
           f"results_dir={results}", "progress=lines"]
    t_wall0 = time.time()
    t0 = time.perf_counter()
    with open(log, "w") as err:
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True)
    wall = time.perf_counter() - t0
    child = json.loads(out.read_text())
    assert proc.returncode == 0, (proc.stdout, log.read_text()[-2000:])
    df = read_trials(results, "scale").drop_duplicates("trial_id")
    files = list((results / "scale").rglob("*"))
    stored = [f.stat().st_mtime for f in (results / "scale" / "trials").glob("*.parquet")]
    cores = os.cpu_count() or 1
    compute = float(df.trial_s.sum())
    first, last = float(df.started_at.min()), float(df.finished_at.max())
    return {"trials": len(df), "wall_s": wall, "compute_s": compute, "slots": cores,
            "first_started_s": first - t_wall0, "first_stored_s": min(stored) - t_wall0,
            "overhead_ms": 1000 * (wall - compute / cores) / len(df),
            "steady_overhead_ms": 1000 * ((last - first) - compute / cores) / len(df),
            "peak_rss_mb": child["peak_rss_mb"],
            "store_mb": sum(f.stat().st_size for f in files if f.is_file()) / 2**20,
            "store_files": sum(1 for f in files if f.is_file()),
            "summary": proc.stdout.strip().splitlines()[-1]}


def table(rows: list[dict]) -> str:
    out = ["| trials | first trial started (s) | first trial stored (s) | wall (s) | "
           "trial compute (s) | overhead per trial (ms) | steady-state overhead per trial (ms) "
           "| driver peak RSS (MB) | store (MB) | store files |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['trials']:,} | {r['first_started_s']:.1f} | {r['first_stored_s']:.1f} | "
                   f"{r['wall_s']:.1f} | {r['compute_s']:.1f} | {r['overhead_ms']:.1f} | "
                   f"{r['steady_overhead_ms']:.1f} | {r['peak_rss_mb']:.0f} | "
                   f"{r['store_mb']:.1f} | {r['store_files']:,} |")
    return "\n".join(out)


def verdict(rows: list[dict]) -> str:
    big = max(rows, key=lambda r: r["trials"])
    parts = [f"first trial stored {big['first_stored_s']:.1f} s after the start at "
             f"{big['trials']:,} trials (target <= 10 s)",
             f"driver peak RSS {max(r['peak_rss_mb'] for r in rows):.0f} MB (target <= 1024 MB)"]
    if len(rows) > 1:
        small = min(rows, key=lambda r: r["trials"])
        for key, what in (("overhead_ms", "overhead per trial"),
                          ("steady_overhead_ms", "steady-state overhead per trial")):
            ratio = big[key] / small[key]
            parts.append(f"{what} {ratio:.2f}x from {small['trials']:,} to {big['trials']:,} "
                         "(target within 1.2x)")
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:
        return _child(argv[2:], Path(argv[1]))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, nargs="+", default=[1000, 10000])
    p.add_argument("--instant", action="store_true", help="trials that train nothing")
    p.add_argument("--json", type=Path, help="also write the numbers here")
    args = p.parse_args(argv)
    load0 = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        for n in args.trials:
            rows.append(run_size(n, Path(tmp), args.instant))
            print(f"# {n:,} trials done: {rows[-1]['summary']}", flush=True)
    load1 = os.getloadavg()
    import ray
    import torch

    what = ("trials that train nothing (--instant)" if args.instant else
            "tiny COLORS trials (2 variants, 1 epoch, 16 graphs per split, 1 seed per trial)")
    print(f"# scale benchmark: {what} through python -m ablate.run, embedded Ray")
    print(f"# {platform.node()}: {os.cpu_count()} cores, python {sys.version.split()[0]}, "
          f"torch {torch.__version__}, ray {ray.__version__}; load average "
          f"{load0[0]:.1f} before, {load1[0]:.1f} after")
    print(table(rows))
    print("# " + verdict(rows))
    if args.json:
        args.json.write_text(json.dumps({"args": {"trials": args.trials, "instant": args.instant},
                                         "load": [load0, load1],
                                         "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
