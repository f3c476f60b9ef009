"""Wall time of whole studies through the runner, as a user runs them: one JSON line per study.

    python benchmarks/study_wall.py smoke [supervision ...] [--out FILE.jsonl] [--report DIR]

Each study runs as `python -m ablate.run study=NAME results_dir=FRESH` in a fresh results
folder (nothing skipped, nothing resumed), the dataset cache as it is (say in the record
whether it was warm: the first run of a real data set also prepares it). The line records the
wall, the exit code, the runner's summary line, the load average before and after (other work
on the machine slows a study), the machine, the commit and whether the tree was modified.
`--report DIR` then runs `python -m analysis.report` on the folder and keeps the report in
DIR (the README's figure comes from such a report). `benchmarks/tables.py` reads the lines
for the README's studies table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _git(*cmd: str) -> str:
    return subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True).stdout.strip()


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_study(name: str, work: Path) -> dict:
    results = work / name  # the study's folder under results_dir=work
    cmd = [sys.executable, "-m", "ablate.run", f"study={name}", f"results_dir={work}"]
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    lines = (proc.stdout + proc.stderr).splitlines()
    summary = next((s for s in reversed(lines) if s.startswith(f"study {name}:")), "")
    return {"study": name, "wall_s": round(wall, 1), "exit": proc.returncode, "summary": summary,
            "load_before": [round(x, 2) for x in load0],
            "load_after": [round(x, 2) for x in os.getloadavg()], "results": str(results),
            "command": " ".join(cmd[1:])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("studies", nargs="+")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "study_walls.jsonl")
    ap.add_argument("--report", type=Path, default=None, help="keep the report of the runs here")
    args = ap.parse_args()
    machine = {"cpu": _cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
               "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        import torch
        machine["torch"] = torch.__version__
    except ImportError:
        pass
    from ablate.trial.provenance import tree_state

    # ablate's one rule: tracked files only ('' clean, else 'dirty:' + the diff's hash), so the
    # benchmark's own untracked output never marks a run modified
    prov = {"git_sha": _git("rev-parse", "HEAD"), "git_dirty": tree_state(str(ROOT)),
            "machine": machine}
    work = Path(tempfile.mkdtemp(prefix="study-wall-"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for name in args.studies:
        rec = {**run_study(name, work), **prov}
        with open(args.out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(json.dumps(rec), flush=True)
    if args.report:
        subprocess.run([sys.executable, "-m", "analysis.report", str(work), "--out", str(args.report)],
                       cwd=ROOT, check=True)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
