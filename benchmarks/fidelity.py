"""Fidelity check: the reference recipes of SPEC §3 against the numbers of SPEC §5.

    python benchmarks/fidelity.py colors            # COLORS ChebyGIN sup / global, GIN + GT, seeds 0..4
    python benchmarks/fidelity.py triangles         # one TRIANGLES ChebyGIN supervised run
    python benchmarks/fidelity.py triangles --epochs 20 --n-train 10000   # reduced run
    python benchmarks/fidelity.py colors --batched  # all seeds of a model as one batched trial

Prints one row per (model, seed) with accuracy per test split and attention AUC,
then the median over seeds; every row is also appended as JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from ablate.config import TrialConfig
from ablate.trial.graph import run_trial

COLORS_MODELS = {
    "ChebyGIN sup": dict(backbone="chebygin_ref", supervision="sup"),
    "ChebyGIN global pool": dict(backbone="chebygin_ref", pool_layers=()),
    "ChebyGIN global pool (no LOO AUC)": dict(backbone="chebygin_ref", pool_layers=(), loo_auc=False),
    "GIN + GT attention": dict(backbone="gin", supervision="gt"),
}


def _row(name: str, seed: int, recs: list[dict], secs: float) -> dict:
    by = {r["split"]: r for r in recs}
    row = {"model": name, "seed": seed, "seconds": round(secs, 1)}
    for split, r in by.items():
        row[f"{split}_acc"] = round(100 * r["accuracy"], 1)
        row[f"{split}_auc"] = round(100 * r["attn_auc_l0"], 1)
        if "attn_auc_l1" in r:
            row[f"{split}_auc_l1"] = round(100 * r["attn_auc_l1"], 1)
    return row


def _print(rows: list[dict]) -> None:
    cols = [c for c in rows[0] if c not in ("model",)]
    print(f"{'model':24s} " + " ".join(f"{c:>16s}" for c in cols))
    for r in rows:
        print(f"{r['model']:24s} " + " ".join(f"{r.get(c, ''):>16}" for c in cols))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", choices=["colors", "triangles"])
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--models", default="", help="comma list of model names (default: all)")
    ap.add_argument("--epochs", type=int, default=None, help="override the recipe's epochs")
    ap.add_argument("--n-train", type=int, default=None, help="TRIANGLES training graphs")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="fidelity.jsonl")
    ap.add_argument("--batched", action="store_true",
                    help="train all seeds of a model as one trial (ablate/trial/packed.py)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.dataset == "colors":
        models = COLORS_MODELS
    else:
        models = {"ChebyGIN sup": dict(backbone="chebygin_ref", supervision="sup")}
        seeds = seeds[:1] if args.seeds == "0,1,2,3,4" else seeds
    if args.models:
        models = {k: v for k, v in models.items() if k in args.models.split(",")}
    data = (("n_train", args.n_train),) if args.n_train else ()
    rows = []
    for name, kw in models.items():
        for group in ([tuple(seeds)] if args.batched else [(s,) for s in seeds]):
            cfg = TrialConfig(study="fidelity", dataset=args.dataset, seeds=group,
                              epochs=args.epochs, data_params=data, **kw)
            t0 = time.perf_counter()
            recs = run_trial(cfg)
            secs = (time.perf_counter() - t0) / len(group)
            for seed in group:
                rows.append(_row(name, seed, [r for r in recs if r["seed"] == seed], secs))
                with open(args.out, "a") as f:
                    f.write(json.dumps(rows[-1]) + "\n")
                _print(rows[-1:])
    print("\nmedian over seeds")
    med = []
    for name in models:
        sel = [r for r in rows if r["model"] == name]
        m = {"model": name, "seed": "median"}
        for c in sel[0]:
            if c not in ("model", "seed"):
                m[c] = statistics.median(r[c] for r in sel)
        med.append(m)
    _print(med)


if __name__ == "__main__":
    main()
