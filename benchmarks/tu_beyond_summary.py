"""The beyond-the-paper study's record (`studies/tu_beyond.yaml`, issue 52): per data set and
backbone, global pool / unsup / weak accuracy over folds x seeds and the paired differences.

    python benchmarks/tu_beyond_summary.py RESULTS_DIR [--study tu_beyond] [--out FILE]

Reads the study's result store (`ablate.read_trials`), keeps the finished runs of the held-out
fold (`test_orig`), and writes benchmarks/results/<machine-date>-tu-beyond/summary.json: for
every (data set, backbone), each row's mean, std (ddof 1) and n over folds x seeds, and the
difference of weak and of unsup attention to global pooling over the (fold, seed) pairs both
rows finished: per fold the mean over its seeds, and over the folds the corrected resampled t
interval of cross-validation (`fold_difference`). The commits the trials ran at (from the
store) and the machine are in the record; the report (`python -m analysis.report`) has the
rest.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def fold_difference(pairs: list[tuple], row: dict, base: dict, folds: int) -> dict | None:
    """The difference row - base over the (fold, seed) `pairs` both rows finished, with the
    corrected resampled t interval of k-fold cross-validation (Nadeau & Bengio 2003, Machine
    Learning 52: the folds' training sets overlap, so the variance of the mean of the k
    per-fold differences is (1/k + n_test/n_train) s^2, not s^2/k; n_test/n_train =
    1/(folds - 1)). The seeds of a fold share its test graphs, so they are averaged first:
    the fold is the unit. The interval is the report's (`analysis.stats.corrected_t`, the
    test of a cross-validated comparison there), here from 2 folds on. None with fewer than
    2 folds."""
    from analysis.stats import corrected_t

    by_fold: dict = {}
    for k in pairs:
        by_fold.setdefault(k[0], []).append(row[k] - base[k])
    if len(by_fold) < 2:
        return None
    d = np.array([np.mean(v) for _, v in sorted(by_fold.items())])
    _, lo, hi = corrected_t(d, folds)
    return {"mean": float(d.mean()), "lo": lo, "hi": hi, "pairs": len(pairs), "folds": len(d)}


def summarise(df: pd.DataFrame) -> dict:
    """The per-(data set, backbone) cells and paired differences of a `read_trials` frame of
    a cross-validated study. The k of the CV and each run's fold come from its `data_params`
    (`analysis.variants.cv_folds`); a fold is the pair (partition, fold number)
    (`cv_partitions`: a study drawing a split per seed, `data.split_seed: seed`, has one
    partition per seed, and fold 3 of two partitions are different test sets)."""
    from analysis.variants import cv_folds, cv_partitions

    ok = df[(df["status"] == "ok") & (df["split"] == "test_orig")].copy()
    ok["row"] = np.where(ok["pool_layers"].astype(str) == "", "global", ok["supervision"])
    fold, k = cv_folds(ok["data_params"])
    if len(ok) and np.isnan(k).any():
        raise SystemExit("tu_beyond_summary: the store holds runs that are not folds of a "
                         "k-fold cross-validation (data.protocol: cv)")
    ok["fold"] = list(zip(cv_partitions(ok["data_params"]), fold.astype(int).tolist()))
    ok["k"] = k
    rows = []
    for (dataset, backbone), g in sorted(ok.groupby(["dataset", "backbone"]), key=lambda kv: kv[0]):
        cells, runs = {}, {}
        if g["k"].nunique() != 1:
            raise SystemExit(f"tu_beyond_summary: {dataset} mixes k-fold CVs of k = "
                             f"{sorted(g['k'].unique().astype(int).tolist())}")
        folds = int(g["k"].iloc[0])
        for row, h in g.groupby("row"):
            v = 100 * h["accuracy"].to_numpy(float)
            cells[row] = {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0,
                          "n": int(len(v)), "folds": int(h["fold"].nunique())}
            runs[row] = dict(zip(zip(h["fold"], h["seed"]), v))
        diffs = {}
        for row in ("weak", "unsup"):
            pairs = sorted(set(runs.get(row, {})) & set(runs.get("global", {})))
            d = fold_difference(pairs, runs.get(row, {}), runs.get("global", {}), folds)
            if d is not None:
                diffs[row] = d
        rows.append({"dataset": dataset, "backbone": backbone, "k": folds, "cells": cells,
                     "diffs": diffs})
    return {"rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--study", default="tu_beyond")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--ran", default="study=tu_beyond",
                    help="how the store was made, in words (for the record)")
    args = ap.parse_args()
    from ablate import read_trials
    from ablate.runner.study.expand import build_study

    df = read_trials(str(args.results), args.study)
    doc = summarise(df)
    planned = len(build_study(args.study, ["data.path=/nonexistent-not-read"])[0].trials) \
        if args.study == "tu_beyond" else None
    shas = sorted({str(s)[:7] + ("*" if d else "") for s, d in zip(df["git_sha"], df["git_dirty"])})
    doc.update(done=int(df["trial_id"].nunique()), planned=planned,
               commits="commits " + ", ".join(shas) + (" (* = modified tree)" if any(
                   s.endswith("*") for s in shas) else ""),
               machine=f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
               command="python benchmarks/tu_beyond_summary.py STORE",
               ran=args.ran,
               written=time.strftime("%Y-%m-%d %H:%M"))
    out = args.out or ROOT / "benchmarks" / "results" / f"cpu-{time.strftime('%Y-%m-%d')}-tu-beyond" \
        / "summary.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}: {doc['done']} of {planned} trials")


if __name__ == "__main__":
    main()
