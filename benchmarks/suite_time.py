"""Wall time of the test suites as a user runs them: one JSON line per suite, and its log.

    python benchmarks/suite_time.py [--slow] [--out DIR]

Runs the README's `python -m pytest` (the default suite) and, with `--slow`, also
`python -m pytest -m slow`, each as a child process in this checkout. Each line records the
command, its wall time and exit code, pytest's counts (passed, failed, skipped, ...), the
commit and tree state (`ablate.trial.provenance.tree_state`: '' clean, else 'dirty:' and the
diff's hash), the load average before and after (other work on the machine slows a suite:
measure on a quiet one) and the machine (CPU model and vector unit, cores, Python, torch).
Lines are appended to DIR/suite_time.jsonl, DIR being `benchmarks/results/<machine>-<date>-suite`
unless `--out` names it; each suite's whole output is kept beside it (`<suite>-<time>.log`).
The README's and `.ci/run`'s figure for the suite's time may quote only such a record.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITES = {"default": [], "slow": ["-m", "slow"]}  # pyproject.toml's addopts deselect `slow`
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|deselected|xfailed|xpassed|errors?|warnings?)")


def counts(output: str) -> dict[str, int]:
    """pytest's closing counts ('962 passed, 63 skipped, 1 failed in 281.2s') as a dict
    ('error' and 'warning' singular); {} when the output has no such line."""
    for line in reversed(output.strip().splitlines()):
        found = _COUNT.findall(line)
        if found and " in " in line:
            return {kind.rstrip("s") if kind.startswith(("error", "warning")) else kind: int(n)
                    for n, kind in found}
    return {}


def machine() -> dict:
    """The CPU model and its vector unit (float rounding differs between them), cores, Python,
    torch and the date."""
    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                cpu = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    info = {"cpu": cpu, "vector": "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags
            else "other", "cores": os.cpu_count(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return info


def label(info: dict) -> str:
    """The results folder's machine word, as the others are named: the GPU's model ('h100')
    where a GPU is visible, else 'cpu'."""
    model = re.search(r"\b([A-Z]\d{2,4})\b", info.get("gpu", ""))
    return model.group(1).lower() if model else "cpu"


def run_suite(name: str, out: Path) -> dict:
    """One suite, timed; its whole output kept in `out`."""
    cmd = [sys.executable, "-m", "pytest", *SUITES[name]]
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    log = out / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.log"
    log.write_text(proc.stdout + proc.stderr)
    return {"suite": name, "command": " ".join(["python", *cmd[1:]]), "wall_s": round(wall, 1),
            "exit": proc.returncode, "counts": counts(proc.stdout),
            "load_before": [round(x, 2) for x in load0],
            "load_after": [round(x, 2) for x in os.getloadavg()], "log": log.name}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slow", action="store_true", help="also time python -m pytest -m slow")
    ap.add_argument("--out", type=Path, default=None, help="folder of the record and logs")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from ablate.trial.provenance import tree_state

    info = machine()
    out = args.out or ROOT / "benchmarks" / "results" / f"{label(info)}-{time.strftime('%Y-%m-%d')}-suite"
    out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    prov = {"git_sha": commit, "git_dirty": tree_state(str(ROOT)), "machine": info}
    for name in ["default", "slow"] if args.slow else ["default"]:
        rec = {**run_suite(name, out), **prov}
        with open(out / "suite_time.jsonl", "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
