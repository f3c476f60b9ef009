"""PyG's dense layers on COLLAB at full size: a trial worker's peak memory against the memory
the runner declares to Ray for it (`ablate.trial.footprint`).

The runner (`run_study`, an embedded Ray) trains COLLAB rows of `study=tu`'s global-pool form
with a dense backbone (`--backbones`, default dense_gat and dense_gin) for one epoch each and
evaluates them; each trial's own peak (its worker's VmHWM since the trial began, the store's
`peak_rss_mb`) is set beside `trials_memory` of it. Two trainings (`--train`):

- ``tu``: study=tu's split (the authors' rule: 500 of the graphs with N <= 35 train, the other
  4,500, up to 492 nodes, are evaluated): training batches are small, evaluation's are not;
- ``full``: every graph but one trains (`data.max_train_nodes=492`, `data.n_train_val=4999`):
  batches of 32 graphs padded to their largest, up to 492 nodes, whose (B, N, N) tensors a
  training step keeps for its backward pass.

The raw files: a folder holding COLLAB/COLLAB_A.txt etc. (unzip what
`shared/fixtures/tu/dgcnn_to_tu.py` writes), passed as `data.path`.

    python benchmarks/bench_memory_dense.py --tu-folder /tmp/collab_tu --train tu,full \
        --out benchmarks/results/cpu-2026-12-02-memory-dense/collab.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

TRAIN = {"tu": {}, "full": {"max_train_nodes": 492, "n_train_val": 4999}}


def measure(folder: str, backbones: list[str], train: str, work: Path) -> dict:
    from bench_memory import Sampler

    from ablate.runner.execute.driver import run_study
    from ablate.runner.execute.store import read_trials
    from ablate.runner.plan.resources import trials_memory
    from ablate.runner.study.compose import StudySpec
    from ablate.runner.study.expand import Study, expand

    data = {"path": folder, "final": True, "split_seed": 0, **TRAIN[train]}
    spec = StudySpec(name="dense", fixed={"dataset": "collab", "epochs": 1}, data=data,
                     variants=[{"backbone": b, "pool_layers": []} for b in backbones],
                     seeds=[0], cpus_per_trial=1, gpus_per_trial=0, max_failures=0)
    study = Study(spec, expand(spec))
    sampler = Sampler(os.getpid())
    t0 = time.time()
    summary = run_study(study, str(work / "results"), progress="none")
    sampler.stop()
    rows = read_trials(str(work / "results"), "dense")
    declared = {t.trial_id: trials_memory([t]) / 2**20 for t in study.trials}
    trials = []
    for t in study.trials:
        r = rows[rows["trial_id"] == t.trial_id]
        trials.append({"backbone": t.config.backbone, "trial_id": t.trial_id,
                       "peak_rss_mb": round(float(r["peak_rss_mb"].max()), 1) if len(r) else None,
                       "declared_mb": round(declared[t.trial_id], 1),
                       "train_s": round(float(r["train_s"].max()), 1) if len(r) else None,
                       "eval_s": round(float(r["eval_s"].sum()), 1) if len(r) else None})
    workers = sorted((round(rss) for rss, _, role in sampler.peaks.values()
                      if role == "trial worker"), reverse=True)
    return {"train": train, "data": data, "line": summary.line(), "exit": summary.exit_code,
            "wall_s": round(time.time() - t0, 1), "trials": trials,
            "trial_workers_peak_rss_mb": workers}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tu-folder", required=True, help="a folder holding COLLAB/COLLAB_A.txt etc.")
    ap.add_argument("--backbones", default="dense_gat,dense_gin")
    ap.add_argument("--train", default="tu,full", help="comma list of: " + ", ".join(TRAIN))
    ap.add_argument("--out", type=Path, help="write the record (JSON) here")
    args = ap.parse_args()
    from ablate.trial.provenance import git_sha, tree_state

    rec = {"command": " ".join(sys.argv), "git_sha": git_sha(), "git_dirty": tree_state(str(HERE)),
           "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "runs": []}
    for train in args.train.split(","):
        work = Path(tempfile.mkdtemp(prefix="bench_dense_"))
        try:
            run = measure(args.tu_folder, args.backbones.split(","), train, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(json.dumps(run), flush=True)
        rec["runs"].append(run)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rec, indent=1) + "\n")


if __name__ == "__main__":
    main()
