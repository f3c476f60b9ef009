"""Synthetic result stores with known values, for tests, benchmarks and demos.

`trial_record(**overrides)` is one store row (every documented column, with
plausible defaults); `write_trials` / `write_curves` write trial files exactly as
the runner does (the declared schema of `result_store.schema`, a temp name, then a
rename). `write_benchmark_store` writes a large store (default 2,500 trial files x 40
rows = 100,000 rows, plus per-epoch curves) whose accuracies grow exponentially with
attention AUC and whose AUC grows with cos(p_init, p_opt), so every figure of the report
has something to show.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa

from analysis.load import replace_file
from result_store import schema, writer

SIZE_BINS = ((1, 25), (26, 50), (51, 100), (101, 200))
MASS_T = tuple(round(t, 2) for t in np.linspace(0.05, 0.95, 19))
SPLITS = {"colors": ("val", "test_orig", "test_large", "test_largec"),
          "triangles": ("val", "test_orig", "test_large"),
          "mnist_sp": ("val", "test_orig", "test_noisy", "test_noisyc")}


def trial_record(**overrides: object) -> dict:
    """One result-store row with every documented column; `overrides` replace defaults."""
    row: dict = {
        "study": "synthetic", "trial_id": "t0", "seed": 0, "split": "test_orig",
        "status": "ok", "error": "", "attempt": 1, "created_at": "2026-11-22T00:00:00+00:00",
        "dataset": "colors", "data_params": "{}", "backbone": "chebygin", "K": 2,
        "aggregation": "mean", "hidden": 0, "filters": "64,64", "readout": "sum",
        "dropout": 0.0, "pool_layers": "1", "scorer": "fc", "scorer_input": "prev",
        "selection": "threshold", "threshold": 0.03, "ratio": 0.5, "normalizer": "softmax",
        "supervision": "unsup", "kl_weight": 100.0, "init_dist": "default", "init_scale": 1.0,
        "epochs": 300, "lr_decay_epochs": "280", "lr": 1e-3, "weight_decay": 1e-4,
        "batch_size": 32, "test_batch_size": 2000, "seeds": "0", "eval_every": 0,
        "device": "cpu", "extra": "{}",
        "accuracy": 0.5, "loss": 1.0, "n_graphs": 100, "ft": 0.5,
        "acc_by_size": size_bins([(1, 25, 0.5, 100)]),
        "gt_mass_curve": mass_curve({t: max(0.0, 1.0 - t) for t in MASS_T}),
        "attn_auc_l0": 0.8, "ratio_kept_l0": 0.6, "cos_p_init": 0.1,
        "train_s": 1.0, "eval_s": 0.1, "peak_rss_mb": 500.0,
        "dataset_hash": "0" * 16, "torch_version": "2.13.0", "pyg_version": "2.8.1",
        "host": "synthetic", "git_sha": "0000000", "ray_version": "2.60.0",
        "gpu_name": "", "cuda_version": "", "gpu_driver": "", "peak_gpu_mb": None,
    }
    row.update(overrides)
    return row


def size_bins(bins: Iterable[tuple]) -> list[dict]:
    """`acc_by_size` from (lo, hi, accuracy, graphs) tuples."""
    return [{"lo": lo, "hi": hi, "accuracy": acc, "graphs": n} for lo, hi, acc, n in bins]


def mass_curve(fractions: dict[float, float]) -> list[dict]:
    """`gt_mass_curve` from {t: fraction}."""
    return [{"t": float(t), "fraction": f} for t, f in sorted(fractions.items())]


def _atomic_write(table: pa.Table, path: Path) -> Path:
    return replace_file(path, lambda tmp: writer.write(table, tmp))


def write_trials(root: str | Path, study: str, rows: Iterable[dict],
                 kind: str = "graph") -> list[Path]:
    """Write rows as one file per trial_id under root/study/trials/ (like the runner), with
    `kind`'s declared schema; attempt 1 and no error where a row does not say."""
    return _write(root, study, rows, kind, "trials")


def write_curves(root: str | Path, study: str, rows: Iterable[dict],
                 kind: str = "graph") -> list[Path]:
    """Write per-epoch rows as one file per trial_id under root/study/curves/."""
    return _write(root, study, rows, kind, "curves")


def _write(root: str | Path, study: str, rows: Iterable[dict], kind: str,
           part: str) -> list[Path]:
    by_trial: dict[str, list[dict]] = {}
    for r in rows:
        row = {"attempt": 1, **({"error": ""} if part == "trials" else {}), **r, "study": study}
        by_trial.setdefault(str(r["trial_id"]), []).append(row)
    return [_atomic_write(schema.table(rs, kind, part), Path(root, study, part, f"{t}.parquet"))
            for t, rs in by_trial.items()]


_VARIANTS = (  # backbone, pool_layers, supervision, selection, base accuracy on test_large
    ("gin", "", "unsup", "threshold", 0.10), ("gin", "1", "unsup", "topk", 0.08),
    ("chebygin", "", "unsup", "threshold", 0.40), ("chebygin", "1", "unsup", "threshold", 0.15),
    ("gin", "1", "sup", "threshold", 0.60), ("chebygin", "1", "sup", "threshold", 0.60),
    ("gin", "1", "gt", "threshold", 0.95), ("chebygin", "1", "weak", "threshold", 0.70),
)


def write_benchmark_store(root: str | Path, study: str = "bench", n_trials: int = 2500,
                          n_seeds: int = 10, epochs: int = 25, seed: int = 0) -> int:
    """A large synthetic study (colors and mnist_sp, 4 splits each); returns trial rows written.

    Each trial packs `n_seeds` seeds; variants, thresholds (log-uniform, continuous) and
    init scales vary across trials. Accuracy = f(AUC) with an exponential shape.
    """
    rng = np.random.default_rng(seed)
    rows_written = 0
    datasets = ("colors", "mnist_sp")
    for t in range(n_trials):
        ds = datasets[t % 2]
        bb, pool, sup, sel, base = _VARIANTS[(t // 2) % len(_VARIANTS)]
        thr = float(10 ** rng.uniform(-4, -1)) if pool else 0.0
        init_dist = ("default", "normal", "uniform")[(t // 16) % 3]
        tid = f"{study}{t:05d}"
        seeds = list(range(n_seeds))
        rows: list[dict] = []
        curves: list[dict] = []
        for s in seeds:
            cos = float(rng.uniform(-1, 1))
            auc = float(np.clip(0.55 + 0.2 * cos + 0.25 * (sup != "unsup") + rng.normal(0, .05),
                                0.3, 1.0))
            for split in SPLITS[ds]:
                shift = {"val": .5, "test_orig": .5, "test_large": 0, "test_largec": -.05,
                         "test_noisy": .3, "test_noisyc": .2}[split]
                acc = float(np.clip(base + shift + 0.3 * np.exp(6 * (auc - 1))
                                    + rng.normal(0, .03), 0, 1))
                kept = float(np.clip(1 - 3 * thr ** 0.5 + rng.normal(0, .02), 0.05, 1))
                rec = trial_record(
                    study=study, trial_id=tid, seed=s, split=split, dataset=ds, backbone=bb,
                    K=1 if bb == "gin" else 2, pool_layers=pool, supervision=sup,
                    selection=sel, threshold=thr, init_dist=init_dist,
                    seeds=",".join(map(str, seeds)), accuracy=acc, ft=auc * 0.8,
                    attn_auc_l0=auc, ratio_kept_l0=kept if pool else float("nan"),
                    cos_p_init=cos if pool else float("nan"),
                    acc_by_size=size_bins((lo, hi, float(np.clip(acc + 0.1 - 0.05 * i, 0, 1)),
                                           50) for i, (lo, hi) in enumerate(SIZE_BINS)
                                          if (split == "test_large") == (lo > 25)),
                    gt_mass_curve=mass_curve({m: float(np.clip(auc * (1 - m), 0, 1))
                                              for m in MASS_T}))
                rows.append(rec)
            ep = np.arange(1, epochs + 1)
            final = 0.5 + 0.45 * auc
            curves += [{"study": study, "trial_id": tid, "attempt": 1, "seed": s, "epoch": e,
                        "train_loss": 2.0 * np.exp(-e / 8), "val_accuracy":
                        final * (1 - np.exp(-e / 6)), "val_loss": 2.0 * np.exp(-e / 9),
                        "val_auc": 0.5 + (auc - 0.5) * (1 - np.exp(-e / 5))}
                       for e in ep.tolist()]
        rows_written += len(rows)
        _atomic_write(schema.table(rows, "graph"), Path(root, study, "trials", f"{tid}.parquet"))
        _atomic_write(schema.table(curves, "graph", "curves"),
                      Path(root, study, "curves", f"{tid}.parquet"))
    return rows_written
