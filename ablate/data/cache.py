"""On-disk dataset cache keyed by the hash of a dataset recipe.

Each recipe (dataset name + every generation parameter + a format version)
maps to one `.npz` file. Writers go through a temp file and an atomic rename,
so concurrent workers building the same recipe never see a torn file; the
loser of the race simply overwrites it with identical bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from ablate.atomic import atomic_write
from ablate.data.graphs import GraphSet

CACHE_VERSION = 1  # bump when a generator's output changes for the same parameters


def cache_dir() -> Path:
    """Directory of the dataset cache: $ABLATE_CACHE, else ~/.cache/ablate/datasets."""
    root = os.environ.get("ABLATE_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "ablate" / "datasets"


def recipe_hash(name: str, params: dict) -> str:
    """Short stable hash of a dataset recipe (name, resolved parameters, cache version)."""
    blob = json.dumps({"name": name, "params": params, "v": CACHE_VERSION}, sort_keys=True,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_path(name: str, params: dict) -> Path:
    return cache_dir() / f"{name}-{recipe_hash(name, params)}.npz"


def save_splits(path: Path, splits: dict[str, GraphSet], meta: dict) -> None:
    """Write all splits to `path` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {**meta, "splits": list(splits)}  # the generator's order: train, val, test_orig, ...
    arrays: dict[str, np.ndarray] = {"__meta__": np.array(json.dumps(meta, default=str))}
    for split, gs in splits.items():
        arrays.update(gs.to_arrays(split))
    atomic_write(path, lambda f: np.savez(f, **arrays))


def load_splits(path: Path) -> dict[str, GraphSet]:
    """Read every split saved by `save_splits`."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    names = {k.split("/")[0] for k in arrays if "/" in k}
    order = json.loads(str(arrays["__meta__"])).get("splits", []) if "__meta__" in arrays else []
    splits = [s for s in order if s in names] + sorted(names - set(order))
    return {s: GraphSet.from_arrays(arrays, s) for s in splits}
