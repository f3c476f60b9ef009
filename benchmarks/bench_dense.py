"""Packed dense-layer members against one-seed trials of them: training seconds per seed-epoch.

    python benchmarks/bench_dense.py                       # every PyG dense backbone, CPU
    python benchmarks/bench_dense.py --backbones dense_gin --seeds 8 --repeats 5

For each backbone (PyG's dense layers by name, `ablate.models.backbones`) on COLORS with
supervised attention (the recipe's layers, pooling before layer 1), one process, one torch
thread (what a worker with `cpus_per_trial=1` runs with), repeated --repeats times in turn:

- one: a one-seed trial (seed r of repeat r), as the runner trains it on a CPU
  (`ablate.trial.graph.run_seed`, the sequential path);
- pack: a trial of --seeds seeds trained as one vmapped pack (`ablate.trial.packed`).

Both through `ablate.trial.graph.run_trial_full`, leave-one-out AUC off; the time is each
record's `train_s` (a pack's training wall time / its seeds, validation curves included)
divided by the epochs. Medians over the repeats; `ratio` = pack / one, measured in this one
run (below 1: the pack is faster per seed-epoch). Writes `dense.json` (with the commit, the
tree state and the machine) to --out (default benchmarks/results/cpu-<date>-dense/).
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA = (("n_max_large", 40), ("n_test", 40), ("n_train", 256), ("n_val", 40))


def _per_seed_epoch(cfg) -> float:
    """Median training seconds per seed-epoch over the trial's seeds."""
    from ablate.trial.graph import run_trial_full

    res = run_trial_full(cfg)
    per_seed = {r["seed"]: r["train_s"] for r in res.records if r["status"] == "ok"}
    if len(per_seed) != len(cfg.seeds):
        raise RuntimeError(f"{cfg.backbone}: a seed did not train ({res.records[0].get('error')})")
    return statistics.median(per_seed.values()) / cfg.epochs


def bench(backbone: str, seeds: int, epochs: int, repeats: int) -> dict:
    """One backbone: per-seed-epoch seconds of one-seed trials and of a pack, and their ratio."""
    from ablate.config import TrialConfig

    base = TrialConfig(dataset="colors", backbone=backbone, supervision="sup", data_params=DATA,
                       epochs=epochs, loo_auc=False, eval_every=epochs, device="cpu")
    _per_seed_epoch(base.replace(epochs=1, seeds=(0, 1)))  # warm: data cache, imports, kernels
    one, pack = [], []
    for r in range(repeats):
        one.append(_per_seed_epoch(base.replace(seeds=(r,))))
        pack.append(_per_seed_epoch(base.replace(seeds=tuple(range(100 * r, 100 * r + seeds)))))
    m_one, m_pack = statistics.median(one), statistics.median(pack)
    return {"backbone": backbone, "one_s_per_seed_epoch": [round(v, 4) for v in one],
            "pack_s_per_seed_epoch": [round(v, 4) for v in pack],
            "median_one": round(m_one, 4), "median_pack": round(m_pack, 4),
            "ratio": round(m_pack / m_one, 3)}


def main() -> None:
    from ablate.models.backbones import DENSE_LAYERS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backbones", default=",".join(DENSE_LAYERS))
    ap.add_argument("--seeds", type=int, default=4, help="seeds in the pack")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import torch

    from ablate.trial.provenance import git_sha, tree_state

    torch.set_num_threads(1)
    os.environ.setdefault("ABLATE_CACHE", str(ROOT / ".ablate_cache"))
    t0 = time.time()
    rows = []
    for b in args.backbones.split(","):
        rows.append(bench(b, args.seeds, args.epochs, args.repeats))
        print(json.dumps(rows[-1]), flush=True)
    out = args.out or ROOT / "benchmarks" / "results" / f"cpu-{time.strftime('%Y-%m-%d')}-dense"
    doc = {"what": "training seconds per seed-epoch: a pack of dense-layer members (vmapped) "
                   "vs one-seed trials of it (sequential path), COLORS, supervised attention",
           "settings": {"dataset": "colors", "data": dict(DATA), "supervision": "sup",
                        "pack_seeds": args.seeds, "epochs": args.epochs, "repeats": args.repeats,
                        "torch_threads": 1},
           "rows": rows, "wall_s": round(time.time() - t0, 1),
           "git_sha": git_sha(), "git_dirty": tree_state(str(ROOT)),
           "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                       "torch": torch.__version__, "platform": platform.platform(),
                       "load_before": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
                       "date": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
           "command": " ".join(["python", *sys.argv])}
    out.mkdir(parents=True, exist_ok=True)
    (out / "dense.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out / 'dense.json'}")


if __name__ == "__main__":
    main()
