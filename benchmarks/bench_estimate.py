"""The dry run's cost estimate against the measured wall time of the same study, here.

    python benchmarks/bench_estimate.py                              # supervision, placement
    python benchmarks/bench_estimate.py --studies smoke --args "epochs=2"
    python benchmarks/bench_estimate.py --readme RESULTS_DIR          # the README's table rows

For each study, in a fresh results folder: the estimate a dry run prints before anything
ran (`estimate=calibrate`: no records exist yet, so every trial is calibrated here), then
the study run through the runner (`python -m ablate.run`), then the estimate from the run's
own records. Prints estimated vs measured wall time and their ratio (target: within 25%).
`--readme DIR` prints the "Studies and how long they take" rows from the records under DIR
(`estimate=records`; a study without records there says so).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _estimate(study: str, args: list[str], results: Path, mode: str):
    from ablate.runner.plan.estimate import estimate
    from ablate.runner.study.expand import build_study

    built, _ = build_study(study, args)
    return estimate(built, results, mode)


def compare(study: str, args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp)
        t0 = time.perf_counter()
        before = _estimate(study, args, results, "calibrate")
        calib_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "ablate.run", f"study={study}", *args,
                               f"results_dir={results}", "progress=none"], cwd=ROOT,
                              capture_output=True, text=True)
        measured = time.perf_counter() - t0
        after = _estimate(study, args, results, "records")
    row = {"study": study, "args": " ".join(args), "calibrated_s": before.wall_s,
           "calibration_s": calib_s, "contention": before.contention,
           "measured_s": measured, "records_s": after.wall_s, "exit": proc.returncode,
           "slots": before.slots}
    if proc.returncode:
        print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
    return row


def readme_rows(results: Path, studies: list[str]) -> None:
    from ablate.runner.plan.estimate import duration

    print("| study | trials / seeds | estimate here (records) | from records |")
    print("|---|---:|---:|---:|")
    for study in studies:
        try:
            cost = _estimate(study, [], results, "records")
        except Exception as e:  # noqa: BLE001 - a study this machine cannot plan
            print(f"| `{study}` | | not planned here ({type(e).__name__}) | |")
            continue
        from ablate.runner.study.expand import build_study

        built, _ = build_study(study)
        seeds = sum(len(t.config.seeds) for t in built.trials)
        wall = "no records" if cost.wall_s is None else duration(cost.wall_s)
        print(f"| `{study}` | {len(built.trials)} / {seeds} | {wall} | "
              f"{cost.share('records'):.0%} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", default="supervision,placement")
    ap.add_argument("--args", default="", help="overrides for every study (quoted)")
    ap.add_argument("--readme", default=None, help="print README rows from records under DIR")
    a = ap.parse_args()
    studies = [s for s in a.studies.split(",") if s]
    if a.readme:
        readme_rows(Path(a.readme), studies)
        return
    print(f"{'study':<12} {'calibrated estimate':>20} {'measured':>10} {'ratio':>7} "
          f"{'records estimate':>17} {'calibration':>12} {'contention':>11} {'slots':>6}")
    for study in studies:
        r = compare(study, shlex.split(a.args))
        ratio = (r["calibrated_s"] / r["measured_s"]) if r["calibrated_s"] else float("nan")
        rec = "-" if r["records_s"] is None else f"{r['records_s']:.1f} s"
        cal = "-" if r["calibrated_s"] is None else f"{r['calibrated_s']:.1f} s"
        failed = f"  (exit {r['exit']})" if r["exit"] else ""
        print(f"{study:<12} {cal:>20} {r['measured_s']:>8.1f} s {ratio:>7.2f} {rec:>17} "
              f"{r['calibration_s']:>10.1f} s {r['contention']:>10.2f}x {r['slots']:>6}{failed}",
              flush=True)


if __name__ == "__main__":
    main()
