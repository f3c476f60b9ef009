"""On-disk dataset cache keyed by the hash of a dataset recipe, memory-mapped when read.

Each recipe (dataset name + every generation parameter + the generator's code) maps
to one file, `NAME-HASH.npz`: an uncompressed NumPy zip whose members are the splits'
arrays (`GraphSet.arrays`) and a JSON ``__meta__`` (format version, split order, which
member holds each split's field, the splits' sizes). An array several splits share
(the noisy MNIST tests share everything but their features with ``test_orig``) is
stored once.

Reading maps every member into memory read-only (`np.memmap` at its offset in the
zip): the pages come from the operating system's file cache, so every process on a
node that reads one recipe shares one copy of it, and a process only touches the
pages of the graphs it uses.

Writers go through a temp file and an atomic rename, so concurrent workers building
the same recipe never see a torn file, and a full disk leaves nothing a later run
would read. A file in an older format (before `FORMAT`) raises `StaleCache`; the
loader rebuilds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zipfile
from pathlib import Path

import numpy as np

from ablate.atomic import atomic_write
from ablate.data.graphs import GraphSet

CACHE_VERSION = 1  # hashed into every recipe: bump when all generators' outputs change
FORMAT = 2  # the file's layout: 2 = shared members, point graphs, one-hot indices, memory-mapped
META = "__meta__"


class StaleCache(Exception):
    """A cache file written in an older format (or not one of ours): to be rebuilt."""


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
    """Write all splits to `path` atomically; arrays shared by splits are written once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    members: dict[str, np.ndarray] = {}
    by_id: dict[int, str] = {}  # id(array) -> member already holding it
    layout = {}
    for split, gs in splits.items():
        fields = {}
        for field, arr in gs.arrays().items():
            key = by_id.get(id(arr))
            if key is None:
                key = by_id[id(arr)] = f"{split}/{field}"
                members[key] = _compact(field, np.asarray(arr))
            fields[field] = key
        layout[split] = {"fields": fields, "x_width": gs.num_features,
                         "footprint": gs.footprint()}
    meta = {**meta, "format": FORMAT, "splits": list(splits), "layout": layout}
    members[META] = np.array(json.dumps(meta, default=str))
    atomic_write(path, lambda f: np.savez(f, **members))


def _compact(field: str, arr: np.ndarray) -> np.ndarray:
    """Local edge ids and one-hot indices fit in int32 (half the bytes of int64)."""
    if field in ("edge_index", "x_hot") and arr.dtype == np.int64:
        top = int(np.abs(arr).max()) if arr.size else 0
        if top < 2**31 - 1:
            return arr.astype(np.int32)
    return arr


def read_meta(path: Path) -> dict:
    """The ``__meta__`` of a cache file (format, splits, sizes); `StaleCache` if too old."""
    try:
        with zipfile.ZipFile(path) as z:
            with z.open(META + ".npy") as f:
                meta = json.loads(str(np.lib.format.read_array(f, allow_pickle=False)))
    except (KeyError, ValueError, zipfile.BadZipFile, OSError) as e:
        raise StaleCache(f"{path} is not a dataset cache file ({e})") from None
    if meta.get("format") != FORMAT:
        raise StaleCache(f"{path} is in format {meta.get('format', 1)}, not {FORMAT}")
    return meta


def load_splits(path: Path) -> dict[str, GraphSet]:
    """Every split saved by `save_splits`, its arrays memory-mapped read-only."""
    meta = read_meta(path)
    arrays = {name: _map(path, *where) for name, where in _members(path).items() if name != META}
    out = {}
    for split in meta["splits"]:
        lay = meta["layout"][split]
        out[split] = GraphSet.from_fields({f: arrays[k] for f, k in lay["fields"].items()},
                                          lay["x_width"])
    return out


def _members(path: Path) -> dict[str, tuple[int, np.dtype, tuple, bool]]:
    """name -> (data offset, dtype, shape, fortran order) of every .npy member of the zip."""
    out = {}
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        for info in z.infolist():
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                raise StaleCache(f"{path}: member {info.filename} is compressed")
            f.seek(info.header_offset)
            head = f.read(30)  # the local file header; its name and extra field follow
            name_len, extra_len = struct.unpack("<HH", head[26:30])
            f.seek(info.header_offset + 30 + name_len + extra_len)
            version = np.lib.format.read_magic(f)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read(f)
            out[info.filename[:-4]] = (f.tell(), dtype, shape, fortran)
    return out


def _map(path: Path, offset: int, dtype: np.dtype, shape: tuple, fortran: bool) -> np.ndarray:
    """The member at `offset` as a read-only memory map (an empty array when it has no bytes)."""
    if int(np.prod(shape)) == 0 or dtype.hasobject:
        return np.zeros(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                     order="F" if fortran else "C")


def footprint(path: Path) -> dict:
    """What a prepared recipe weighs: the file's bytes and each split's sizes (`size_counts`
    too, read from the memory-mapped node pointers)."""
    meta = read_meta(path)
    sets = load_splits(path)  # memory-mapped: only the node pointers are read
    return {"bytes": path.stat().st_size,
            "splits": {s: {**meta["layout"][s]["footprint"], "sizes": size_counts(sets[s].num_nodes)}
                       for s in meta["splits"]}}


def size_counts(num_nodes: np.ndarray) -> list[list[int]]:
    """[[N, graphs of N nodes], ...] in increasing N: what makes a split's evaluation batches
    (`ablate.trial.footprint.eval_nodes`)."""
    sizes, counts = np.unique(np.asarray(num_nodes, np.int64), return_counts=True)
    return [[int(a), int(b)] for a, b in zip(sizes, counts)]
