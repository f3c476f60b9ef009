"""Per-seed cost of the main COLORS rows, the basis of the README's study durations.

Each row runs `run_trial_full` with 5 seeds (batched where eligible) for --epochs
epochs, validation curves at the recipe's rate (every epochs_full // 50 epochs),
then scales training to the recipe's epochs and adds the measured evaluation:

    python benchmarks/study_costs.py            # ~10 min on 2 cores, one torch thread
"""

from __future__ import annotations

import argparse
import time

import torch

from ablate.config import TrialConfig, resolve
from ablate.trial.graph import run_trial_full

ROWS = {
    "COLORS GIN unsup (init)": dict(dataset="colors", backbone="gin", supervision="unsup",
                                    init_dist="normal"),
    "COLORS ChebyGIN sup": dict(dataset="colors", backbone="chebygin_ref", supervision="sup"),
    "COLORS ChebyGIN global pool": dict(dataset="colors", backbone="chebygin_ref", pool_layers=()),
    "COLORS GIN global pool": dict(dataset="colors", backbone="gin", pool_layers=()),
    "COLORS ChebyGIN weak": dict(dataset="colors", backbone="chebygin_ref", supervision="weak"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print("| row | recipe epochs | train s per seed-epoch | eval s per seed | s per seed (recipe) |")
    print("|---|---:|---:|---:|---:|")
    for name, kw in ROWS.items():
        cfg = resolve(TrialConfig(seeds=(0, 1, 2, 3, 4), **kw))
        full = cfg.epochs
        t0 = time.perf_counter()
        res = run_trial_full(cfg.replace(epochs=args.epochs, lr_decay_epochs=(),
                                         eval_every=max(1, full // 50)))
        wall = time.perf_counter() - t0
        per = [r for r in res.records if r["split"] == "test_orig"]
        train = sum(r["train_s"] for r in per) / len(per) / args.epochs
        ev = sum(r["eval_s"] for r in res.records) / len(per)
        print(f"| {name} | {full} | {train:.3f} | {ev:.1f} | {train * full + ev:.0f} |  "
              f"({wall:.0f} s for this row)", flush=True)


if __name__ == "__main__":
    main()
