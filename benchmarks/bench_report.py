"""Benchmark: time `python -m analysis.report` on a synthetic 100,000-row result store.

Writes a store of 2,500 trial files x 40 rows (10 seeds x 4 splits; plus 625,000
per-epoch curve rows) with `analysis.synthetic.write_benchmark_store`, then runs the
report CLI end to end (a fresh interpreter each time, imports included):

- cold: no cache, every Parquet footer and column read (median of --repeat runs);
- warm: the same output folder again, unchanged files come from OUT/.cache;
- tables only (--no-figures), cold.

and prints the median wall time of each and the cold run's phases.

    python benchmarks/bench_report.py [--rows 100000] [--repeat 3] [--store DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROWS_PER_TRIAL = 40  # 10 seeds x 4 splits


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _run(store: Path, out: Path, *extra: str) -> tuple[float, float, dict]:
    """(wall s, CPU s of the child, its phase timings) of one CLI run."""
    t0, c0 = time.perf_counter(), _cpu()
    r = subprocess.run([sys.executable, "-m", "analysis.report", str(store), "--out", str(out),
                        *extra], cwd=ROOT, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    if r.returncode != 0:
        raise SystemExit(f"report failed ({r.returncode}): {r.stderr.strip()}")
    return wall, cpu, json.loads((out / "timings.json").read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000, help="trial rows in the store")
    p.add_argument("--repeat", type=int, default=3, help="runs per mode (median reported)")
    p.add_argument("--store", type=Path, help="reuse (or create) the store here")
    a = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from analysis.synthetic import write_benchmark_store

    work = Path(tempfile.mkdtemp(prefix="bench_report_"))
    store = a.store or work / "results"
    n_trials = max(1, a.rows // ROWS_PER_TRIAL)
    if not (store / "bench" / "trials").is_dir():
        t0 = time.perf_counter()
        n = write_benchmark_store(store, n_trials=n_trials)
        print(f"wrote {n:,} trial rows in {n_trials:,} files (+ curves) to {store} "
              f"in {time.perf_counter() - t0:.0f} s")
    n_files = len(list((store / "bench" / "trials").glob("*.parquet")))
    print(f"store: {n_files:,} trial files, {n_files * ROWS_PER_TRIAL:,} rows; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    modes = {"cold": ("--no-cache",), "warm": (), "cold, --no-figures": ("--no-cache",
                                                                         "--no-figures")}
    results: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    phases: list[dict] = []
    try:
        for i in range(a.repeat):
            out = work / f"out{i}"
            wall, cpu, t = _run(store, out, *modes["cold"])
            results["cold"].append((wall, cpu))
            phases.append(t)
            _run(store, out)  # fills OUT/.cache
            results["warm"].append(_run(store, out, *modes["warm"])[:2])
            results["cold, --no-figures"].append(
                _run(store, work / f"nf{i}", *modes["cold, --no-figures"])[:2])
    finally:
        shutil.rmtree(work, ignore_errors=True)  # outputs (and the store unless --store)
    print(f"\nreport time, {n_files * ROWS_PER_TRIAL:,}-row store, median of {a.repeat} runs "
          "(fresh interpreter each, imports included); CPU = user + sys of the report process")
    print(f"{'mode':<22}{'wall s':>8}{'(min':>7}{'max)':>7}{'CPU s':>8}")
    for mode, v in results.items():
        w = [x[0] for x in v]
        c = [x[1] for x in v]
        print(f"{mode:<22}{statistics.median(w):8.1f}{min(w):7.1f}{max(w):7.1f}"
              f"{statistics.median(c):8.1f}")
    print(f"load average after: {os.getloadavg()[0]:.1f} (wall > CPU: the machine was shared)")
    keys = [k for k in phases[0] if k != "total"]
    print("\ncold run phases (median s, in-process; the rest is interpreter start and imports)")
    for k in [*keys, "total"]:
        print(f"  {k:<16}{statistics.median(ph.get(k, 0.0) for ph in phases):8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
