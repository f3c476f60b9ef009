"""Reading a TU set: ours (`ablate.data.tu_named.read_named`) against PyG's `TUDataset` on the
same files (issue 52: ours should cost no more than PyG's on an NCI1-sized set).

    python benchmarks/bench_tu_read.py --sets NCI1,ENZYMES,MUTAG,IMDB-BINARY --repeats 5

Each repeat reads the unzipped fixture files from scratch on both sides, alternating which
side goes first: ours into a `GraphSet`; PyG's `TUDataset` processing its raw files into a
fresh root (what a first use costs; later uses load PyG's processed file, as ours then load
our prepared cache). Wall seconds (median and all runs), the ratio theirs / ours per run,
and each side's peak RSS growth in a fresh process. JSON to
benchmarks/results/<machine-date>-tu-read/tu_read.json with commit, tree state and machine.
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
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
FIXTURES = ROOT.parent / "shared" / "fixtures" / "tu"


def _ours(folder: Path, name: str) -> float:
    from ablate.data.tu_named import read_named

    t0 = time.perf_counter()
    gs = read_named(name, str(folder))
    secs = time.perf_counter() - t0
    assert len(gs) > 0
    return secs


def _theirs(folder: Path, name: str, scratch: Path) -> float:
    from torch_geometric.datasets import TUDataset

    root = scratch / f"pyg_{time.perf_counter_ns()}"
    shutil.copytree(folder / name, root / name / "raw")
    import contextlib
    import io

    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        ds = TUDataset(str(root), name)  # prints 'Processing...' otherwise
    secs = time.perf_counter() - t0
    assert len(ds) > 0
    shutil.rmtree(root)
    return secs


PEAK = '''
import sys
sys.path.insert(0, {root!r})
from pathlib import Path
side, folder, name, scratch = sys.argv[1:5]
import numpy, torch, torch_geometric.datasets, pandas  # imports outside the measured peak
from ablate.data.tu_named import read_named
from ablate.trial.provenance import peak_rss_mb, reset_peak_rss
import shutil
root = Path(scratch) / "peak"
shutil.copytree(Path(folder) / name, root / name / "raw")
base = peak_rss_mb()
reset_peak_rss()  # VmHWM counted afresh from here (Linux)
if side == "ours":
    read_named(name, folder)
else:
    torch_geometric.datasets.TUDataset(str(root), name)
print("PEAK", peak_rss_mb() - base)
'''


def _peak_growth(side: str, folder: Path, name: str) -> float:
    """Peak RSS above the process's resident size before the read (MB; VmHWM reset there,
    Linux), one read in a fresh process with every import done before."""
    with tempfile.TemporaryDirectory() as scratch:
        out = subprocess.run([sys.executable, "-c", PEAK.format(root=str(ROOT)), side, str(folder),
                              name, scratch], capture_output=True, text=True, check=True)
    line = [x for x in out.stdout.splitlines() if x.startswith("PEAK ")][-1]
    return round(float(line.split()[1]), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="NCI1,ENZYMES,MUTAG,IMDB-BINARY")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--zips", type=Path, default=FIXTURES)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    from ablate.trial.provenance import tree_state

    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"
    out = args.out or ROOT / "benchmarks" / "results" / f"cpu-{time.strftime('%Y-%m-%d')}-tu-read"
    out.mkdir(parents=True, exist_ok=True)
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "files"
        for name in args.sets.split(","):
            with zipfile.ZipFile(args.zips / f"{name}.zip") as z:
                z.extractall(folder)
            _ours(folder, name)  # warm: imports, page cache
            _theirs(folder, name, Path(tmp))
            ours, theirs = [], []
            for r in range(args.repeats):
                order = (("ours", "theirs") if r % 2 == 0 else ("theirs", "ours"))
                for side in order:
                    if side == "ours":
                        ours.append(_ours(folder, name))
                    else:
                        theirs.append(_theirs(folder, name, Path(tmp)))
            rec = {"set": name, "repeats": args.repeats,
                   "ours_s": [round(s, 4) for s in ours], "theirs_s": [round(s, 4) for s in theirs],
                   "ours_median_s": round(float(np.median(ours)), 4),
                   "theirs_median_s": round(float(np.median(theirs)), 4),
                   "ratio_theirs_over_ours": [round(b / a, 2) for a, b in zip(ours, theirs)],
                   "ours_peak_growth_mb": _peak_growth("ours", folder, name),
                   "theirs_peak_growth_mb": _peak_growth("theirs", folder, name)}
            rec["ratio_median"] = float(np.median(rec["ratio_theirs_over_ours"]))
            records.append(rec)
            print(json.dumps(rec), flush=True)
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True).stdout.strip()
    doc = {"records": records, "git_sha": sha, "git_dirty": tree_state(str(ROOT)),
           "machine": machine, "load_1min_end": round(os.getloadavg()[0], 2),
           "torch_geometric": __import__("torch_geometric").__version__,
           "command": " ".join(sys.argv)}
    (out / "tu_read.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out / 'tu_read.json'}")


if __name__ == "__main__":
    main()
