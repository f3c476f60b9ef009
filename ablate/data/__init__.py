"""Datasets of the study, each with per-node ground-truth attention.

`load_dataset(name, **params)` is the public interface: every split of a dataset
as lists of `torch_geometric.data.Data` (x, edge_index, y, gt, num_nodes).
`load_graphsets` returns the same splits in the compact `GraphSet` form that
training uses. Both generate a recipe once and then read it from the on-disk
cache (see `ablate.data.cache`). MNIST-75SP and the TU data sets are built from raw
files that are fetched and checked first when the data folder lacks them
(`ablate.data.download`; `path` and `url` say where the files are, not what the data
is, so neither is part of the cache key).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # PyG costs ~3 s to import: only where Data objects are made
    from torch_geometric.data import Data

from ablate.data import download
from ablate.data.cache import StaleCache, cache_path, load_splits, recipe_hash, save_splits
from ablate.data.graphs import GraphSet
from ablate.data.tu_names import is_tu, tu_name
from ablate.errors import ConfigError, choice_error, did_you_mean

__all__ = ["DATASETS", "OPEN_DATASETS", "GraphSet", "load_dataset", "load_graphsets",
           "resolve_params", "dataset_params", "dataset_recipe_hash", "is_dataset", "is_open",
           "check_dataset"]


def _registry() -> dict[str, Callable[..., dict[str, GraphSet]]]:
    from ablate.data import colors, mnist, triangles, tu

    return {
        "colors": colors.generate,
        "triangles": triangles.generate,
        "mnist_sp": mnist.generate_mnist,
        "digits_sp": mnist.generate_digits,
        "proteins": tu.proteins,
        "dd": tu.dd,
        "collab": tu.collab,
    }


DATASETS = ("colors", "triangles", "mnist_sp", "digits_sp", "proteins", "dd", "collab")
# open names beside the built-ins: any TU set (`tu:NAME`, ablate.data.tu_named) and a user's
# own PyG dataset class (`pyg`, named by data.target=module:attr, ablate.data.pyg_user)
PYG = "pyg"
OPEN_DATASETS = ("tu:NAME", PYG)


def is_dataset(name: object) -> bool:
    """Whether `name` is a dataset this package can make: a built-in, `tu:NAME` or `pyg`."""
    return isinstance(name, str) and (name in DATASETS or name == PYG or is_tu(name))


def is_open(name: object) -> bool:
    """`tu:NAME` or `pyg`: a data set beyond the built-ins (the TU recipe, no ground truth)."""
    return is_tu(name) or name == PYG


def check_dataset(name: object) -> None:
    """`name` is a dataset, or one ConfigError line naming the valid ones (and the TU set
    `NCI1` means when it is one: 'tu:NCI1')."""
    if is_tu(name):
        tu_name(name)
        return
    if is_dataset(name):
        return
    from ablate.data.tu_names import TU_NAMES

    hint = did_you_mean(name, TU_NAMES, "tu:") if isinstance(name, str) else ""
    if hint:
        raise ConfigError(f"unknown dataset {name!r}; valid choices: "
                          f"{', '.join(DATASETS + OPEN_DATASETS)}{hint}")
    raise choice_error("dataset", name, DATASETS + OPEN_DATASETS)


def _generator(name: str) -> Callable[..., dict[str, GraphSet]]:
    """The function that makes dataset `name` (its keywords are the recipe's parameters)."""
    check_dataset(name)
    if is_tu(name):
        from ablate.data import tu_named

        return functools.partial(tu_named.tu_named, tu_name(name))
    if name == PYG:
        from ablate.data import pyg_user

        return pyg_user.pyg_dataset
    return _registry()[name]


def dataset_params(name: str) -> set[str]:
    """Names of the recipe parameters dataset `name` takes (its generator's keywords)."""
    check_dataset(name)
    return set(_defaults(name))


def resolve_params(name: str, params: dict | None = None) -> dict:
    """The generator's defaults updated with `params`; unknown names raise `ConfigError`."""
    check_dataset(name)
    defaults = _defaults(name)
    params = dict(params or {})
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        from ablate.errors import did_you_mean

        hint = next((h for k in unknown if (h := did_you_mean(k, sorted(defaults), "data."))), "")
        raise ConfigError(f"unknown parameter(s) {unknown} for dataset {name!r}; "
                          f"valid: {', '.join(sorted(defaults))}{hint}")
    resolved = {**defaults, **params}
    check_sizes(name, resolved, defaults)
    if name in ("mnist_sp", "digits_sp"):  # choice-valued parameters, checked before anything runs
        from ablate.data import mnist

        mnist.check_choices(resolved["gt"], resolved["slic"], resolved["noise"])
    if name in TU_NAMES:
        from ablate.data import tu

        tu.check_split(resolved["split"])
    if is_tu(name):
        from ablate.data.folds import check_protocol
        from ablate.data.tu_names import check_tu_name

        check_tu_name(tu_name(name), resolved["path"])
        check_protocol(resolved["protocol"], resolved["folds"], resolved["fold"])
    if name == PYG:
        from ablate.data import pyg_user

        pyg_user.check_params(resolved)
        resolved["kwargs"] = dict(sorted(pyg_user.kwargs_of(resolved["kwargs"]).items()))
    if resolved.get("url") is not None:
        resolved["url"] = download.check_url(resolved["url"])
    return {k: list(v) if isinstance(v, tuple) else v for k, v in resolved.items()}


# integer parameters that must be at least 1: every split a trial trains on or evaluates has
# graphs, and a graph has nodes (0 is allowed for the others: seeds, counts that may be none)
_AT_LEAST_ONE = {"n_train", "n_val", "n_test", "n_min", "n_min_large", "max_train_nodes"}
_ORDERED = (("n_min", "n_max"), ("n_min_large", "n_max_large"))  # (lowest, highest) node counts


def check_sizes(name: str, resolved: dict, defaults: dict) -> None:
    """The numeric data parameters as a recipe can use them (`ConfigError`, one line, before
    any data is made or Ray starts): integers where the default is one, split sizes and node
    counts >= 1 (an empty split cannot be evaluated), ranges in order,
    `val_fraction` in (0, 1). Values are checked, never changed (recipe hashes stay); what
    only a generator knows (COLORS' n_colors >= 2) it says when the data is prepared."""
    for k, v in resolved.items():
        d = defaults.get(k)
        if k == "n_train_val" and v is None:
            continue
        if (isinstance(d, int) and not isinstance(d, bool)) or k == "n_train_val":
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"data.{k} must be an integer for dataset {name!r}, got {v!r}")
            low = 1 if k in _AT_LEAST_ONE else 2 if k == "n_train_val" else 0
            if v < low:
                raise ConfigError(f"data.{k} must be >= {low} for dataset {name!r}, got {v}")
    for lo, hi in _ORDERED:
        if lo in resolved and hi in resolved and resolved[lo] > resolved[hi]:
            raise ConfigError(f"data.{lo}={resolved[lo]} is above data.{hi}={resolved[hi]} for "
                              f"dataset {name!r}")
    frac = resolved.get("val_fraction")
    if frac is not None and not (isinstance(frac, (int, float)) and not isinstance(frac, bool)
                                 and 0 < frac < 1):
        raise ConfigError(f"data.val_fraction must be in (0, 1) for dataset {name!r}, got {frac!r}")


def _defaults(name: str) -> dict:
    """The generator's keyword defaults, plus `url` (a mirror's base URL) for downloaded data."""
    sig = inspect.signature(_generator(name))
    out = {k: p.default for k, p in sig.parameters.items()
           if p.default is not inspect.Parameter.empty and k != "progress"}
    if download.downloadable(name):
        out["url"] = None
    return out


def dataset_recipe_hash(name: str, params: dict | None = None) -> str:
    """Hash of the fully resolved recipe (what the cache and the result store key on)."""
    return recipe_hash(name, _hashable(name, resolve_params(name, params)))


def _hashable(name: str, params: dict) -> dict:
    """The cache key: parameters without the path and url (where data lives is not what it is),
    plus a digest of the generator's source, so a changed generator never reads old data.
    A MNIST-75SP / digits recipe with every parameter of `EARLIER_MNIST` at its earlier value
    makes the data of before issue 26 and keeps its hash (`SAME_DATA_EARLIER`)."""
    key = {k: v for k, v in params.items() if k not in ("path", "url")}
    if name in TU_NAMES and key.get("split") == EARLIER_TU_SPLIT:  # the rule before issue 33
        del key["split"]
        if key.get("n_train_val") is None:
            from ablate.data.tu import EARLIER_N_TRAIN_VAL

            key["n_train_val"] = EARLIER_N_TRAIN_VAL[name.upper()]
        key["_code"] = _generator_digest(name, earlier=True)
        return key
    if name in ("mnist_sp", "digits_sp"):
        impl = slic_versions()  # the kernels that shape every superpixel
        if impl != SLIC_PINNED:
            key["_slic_impl"] = impl
    if name in ("mnist_sp", "digits_sp") and all(key.get(k) == v for k, v in EARLIER_MNIST.items()):
        for k in EARLIER_MNIST:
            del key[k]
        key["_code"] = _generator_digest(name, earlier=True)
        return key
    key["_code"] = _generator_digest(name)
    return key


# MNIST-75SP's superpixels come from scikit-image's compiled SLIC kernels (`ablate/data/slic.py`)
# on NumPy arrays: another release of either may place them otherwise. Recipes made with the
# versions the data were checked on (the authors' superpixels of 200 MNIST test images,
# tests/test_mnist_reference_data.py) hash as before; any other pair of versions is part of
# the recipe's identity, so the same trial id never means other superpixels.
SLIC_PINNED = {"scikit-image": "0.26", "numpy": "2.4"}


def slic_versions() -> dict[str, str]:
    """major.minor of the installed scikit-image and NumPy."""
    from ablate.compat import installed, release

    return {d: ".".join(map(str, release(installed(d))[:2])) for d in SLIC_PINNED}


# Generator sources whose edits changed how data are stored or prepared, not the values
# (issue 25: point graphs, one-hot indices, memory-mapped cache): digest of the new source ->
# the digest the recipe was hashed with before, so recipes and trial ids stay as they were.
# `tests/test_data_storage.py` pins the recipe hashes and checks the values are unchanged.
# (MNIST-75SP and digits changed their data in issue 26: their entry went, see below.)
SAME_DATA: dict[str, str] = {
    "7c426bbd7cbc": "76c53eee43db",  # colors
    "a1c72c4ff181": "c447f7061c65",  # triangles
    # issue 53: the generators' own parameter checks raise ConfigError (was ValueError)
    "41ca99e79666": "76c53eee43db",  # colors
    "e043201894e9": "c447f7061c65",  # triangles
    # issue 52: the inductive split's assembly moved to folds.py, shared with tu:NAME and pyg
    # (same splits), and folds.py joined the TU sets' digest
    "197a58c9f5ee": "8f1052e31de1",  # proteins, dd, collab
    "81d349664a72": "5d9c26d4d445",  # tu:NAME (studies/tu_beyond.yaml's first stored trials)
    # mnist_sp and digits_sp: SLIC's kernels through ablate.compat, the superpixel pool's
    # start method (issue 35), the pool moved out to ablate.data.pool (issue 42) and a progress
    # bar without tqdm's monitor thread changed the sources, not the data: issue 26's digest
    "a4b0af6b60b2": "8b68ba1e3dc4",
    # dataset=pyg: PyG's graph containers allowed to torch's weights-only loader while the
    # class builds (OGB 1.3.6 loads that way) and nested data.kwargs given back as mappings
    # (OGB's meta_dict): classes that built before get the same arguments and graphs
    "cbcec62ee439": "621138ebb33c",
}

# Issue 26 made MNIST-75SP and digits as the authors made them (SLIC as scikit-image 0.15,
# their noise scale): new data, new recipe hashes and trial ids. The recipe parameters it
# added, at these values, give the data of before bit for bit (`slic=v0.19`: today's
# scikit-image; `noise=nodes`: noise in units of our own std); such a recipe leaves them out
# of its key and maps the new source digest to the one before (docs/recipes.md). With
# `EARLIER_TU_SPLIT` below, the one source of the data values `ablate.config.CHANGED_DEFAULTS`
# leaves out of trial ids.
EARLIER_MNIST: dict[str, str] = {"slic": "v0.19", "noise": "nodes"}
SAME_DATA_EARLIER: dict[str, str] = {
    "a4b0af6b60b2": "bbe564b4693d",  # mnist_sp and digits_sp (one source; issues 35, 42)
    "8f1052e31de1": "a92a47d7eba2",  # proteins, dd, collab with split=earlier (one source)
    "197a58c9f5ee": "a92a47d7eba2",  # the same after issue 52 (folds.py)
}

# Issue 33 made the TU split the authors' rule (`split=authors`: their shuffle and 500 / 1,000
# training graphs). `split=earlier` is the rule before; its recipes hash as they did (the
# parameter left out, n_train_val at its earlier default), so their trial ids stay.
TU_NAMES = ("proteins", "dd", "collab")
EARLIER_TU_SPLIT = "earlier"


@functools.cache
def _generator_digest(name: str, earlier: bool = False) -> str:
    digest = source_digest(name)
    return (SAME_DATA_EARLIER if earlier else SAME_DATA).get(digest, digest)


def source_digest(name: str) -> str:
    """Digest of the sources that make dataset `name` (its generator module, `graphs.py`, the
    superpixel pipeline for MNIST): a changed source is a new recipe unless `SAME_DATA`
    maps it to the digest whose data it reproduces."""
    gen = _generator(name)
    module = sys.modules[getattr(gen, "func", gen).__module__]
    files = [Path(module.__file__), Path(__file__).with_name("graphs.py")]
    if name in ("mnist_sp", "digits_sp"):  # the superpixels, SLIC's rules and the edge kernel
        files += [Path(__file__).with_name(f) for f in ("superpixels.py", "kernel.py", "slic.py")]
    if is_open(name) or name in TU_NAMES:  # the TU reader, the split protocols
        files += [Path(__file__).with_name(f) for f in ("tu.py", "folds.py")
                  if Path(__file__).with_name(f) not in files]
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:12]


def dataset_cache_path(name: str, params: dict | None = None) -> Path:
    """The cache file of a dataset recipe in this process's cache folder."""
    return cache_path(name, _hashable(name, resolve_params(name, params)))


def load_graphsets(name: str, progress: bool = False, **params) -> dict[str, GraphSet]:
    """Every split of dataset `name` as `GraphSet`s, generated once and cached on disk."""
    resolved = resolve_params(name, params)
    path = cache_path(name, _hashable(name, resolved))
    if path.exists():
        try:
            return load_splits(path)
        except StaleCache as e:  # an older format: rebuilt (replaced atomically below)
            print(f"dataset cache: {e}; rebuilding it", file=sys.stderr)
        except Exception as e:  # a damaged file: rebuilt as well
            print(f"dataset cache: {path} cannot be read ({type(e).__name__}); rebuilding it",
                  file=sys.stderr)
    kwargs = {k: v for k, v in resolved.items() if k != "url"}
    if download.downloadable(name):  # raw files fetched and checked on first use
        kwargs["path"] = str(download.ensure_files(name, resolved.get("path"), resolved.get("url"),
                                                   progress))
    splits = _generator(name)(progress=progress, **kwargs)
    meta = {"name": name, "params": resolved}
    if is_tu(name) or name in TU_NAMES:  # the zip the files came from (None: put by hand)
        from ablate.data.tu import find_tu_folder

        label = tu_name(name) if is_tu(name) else download.source(name).label
        meta["source"] = download.source_record(find_tu_folder(label, kwargs["path"]))
    save_splits(path, splits, meta)
    del splits  # the file's memory-mapped arrays replace the generator's copies
    return load_splits(path)


def dataset_source(name: str, params: dict | None = None) -> str:
    """The prepared recipe's raw zip as trial provenance: 'sha256:HEX' (' (first use)' where
    no published sum checked it), '' for generated data or files put in place by hand."""
    from ablate.data.cache import read_meta

    if not (is_tu(name) or name in TU_NAMES):
        return ""
    try:
        record = read_meta(dataset_cache_path(name, params)).get("source") or {}
    except (OSError, ValueError, StaleCache):
        return ""
    algo = next((a for a in ("sha256", "md5") if a in record), None)
    if algo is None:
        return ""
    return f"{algo}:{record[algo]}" + ("" if record.get("checked") else " (first use)")


def load_dataset(name: str, **params) -> dict[str, list[Data]]:
    """Every split of dataset `name` by split name, each graph a PyG `Data` (x, edge_index, y, gt)."""
    return {split: gs.to_data_list() for split, gs in load_graphsets(name, **params).items()}
