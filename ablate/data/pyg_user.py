"""A user's own PyG dataset as a study's data set (`dataset=pyg`).

The class (or any callable returning a sequence of `torch_geometric.data.Data` graphs, e.g. a
PyG `InMemoryDataset` or OGB's `PygGraphPropPredDataset`) is named by `target`
('package.module:attr', imported by `ablate.user_code.load_object`) and built with `kwargs`.
The driver makes it once, into the dataset cache under the recipe's hash (target, kwargs and
the split parameters), so the Ray workers read the prepared graphs and never import the class.

What each graph becomes (a `GraphSet`, as every data set here): `x` as given (float; a graph
without `x` gets one-hot degree over the whole set, as the TU sets), edges symmetric without
self loops or duplicates, `y` one integer class per graph (0..C-1 after the set's sorted
labels, as the TU reader numbers them), `gt` the graph's node attribute `gt` where it has one
(ground-truth attention, normalised per graph; supervision=sup then applies), else zeros.

Splits: `protocol="auto"` takes the set's own split where it has one (`get_idx_split()`:
train / valid / test as "train" / "val" / "test_orig"), else the paper's inductive one;
"inductive" and "cv" are those of `ablate.data.folds` (as `tu:NAME`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from ablate.data.folds import PROTOCOLS, check_protocol
from ablate.data.graphs import GraphSet, normalize_gt
from ablate.data.onehot import OneHot
from ablate.data.tu_named import protocol_splits
from ablate.errors import ConfigError

OWN = "own"  # protocol: the set's own get_idx_split()
_PROTOCOLS = ("auto", OWN, *PROTOCOLS)


def pyg_dataset(
    target: str | None = None,
    kwargs: dict | None = None,
    protocol: str = "auto",
    max_train_nodes: int | None = None,
    n_train_val: int | None = None,
    val_fraction: float = 0.1,
    split_seed: int = 111,
    final: bool = False,
    folds: int = 10,
    fold: int = 0,
    progress: bool = False,
) -> dict[str, GraphSet]:
    """Every split of the user's dataset `target(**kwargs)` (see the module doc)."""
    check_params(dict(target=target, kwargs=kwargs, protocol=protocol, folds=folds, fold=fold))
    dataset = build(target, kwargs)
    full = to_graphset(dataset, target)
    own = _own_split(dataset) if protocol in ("auto", OWN) else None
    if protocol == OWN and own is None:
        raise ConfigError(f"data.protocol=own: {target} has no get_idx_split(); use "
                          "data.protocol=inductive or cv")
    if own is not None:
        train, val, test = own
        if final:
            train = np.concatenate([train, val])
        return {"train": full.subset(train), "val": full.subset(val),
                "test_orig": full.subset(test)}
    return protocol_splits(full, "cv" if protocol == "cv" else "inductive", str(target),
                           max_train_nodes, n_train_val, val_fraction, split_seed, final, folds,
                           fold)

def check_params(params: dict) -> None:
    """What can be checked without importing the user's code (one ConfigError line each)."""
    from ablate.user_code import FORM, is_object_path

    target = params.get("target")
    if target is None:
        raise ConfigError(f"dataset pyg needs data.target={FORM}: the PyG dataset class (or "
                          "a function returning graphs), e.g. "
                          "data.target=torch_geometric.datasets:TUDataset")
    if not is_object_path(target):
        raise ConfigError(f"data.target {target!r} is not of the form {FORM}")
    kwargs_of(params.get("kwargs"))
    if params.get("protocol") not in _PROTOCOLS:
        from ablate.errors import choice_error

        raise choice_error("data.protocol", params.get("protocol"), _PROTOCOLS)
    if params["protocol"] == "cv":
        check_protocol("cv", params["folds"], params["fold"])


def kwargs_of(value: Any) -> dict:
    """data.kwargs as a dict: a mapping, or the sorted (key, value) pairs a study file's
    mapping becomes when the runner makes its parameters hashable (nested mappings too)."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {k: _thaw(v) for k, v in value.items()}
    if _is_pairs(value):
        return {k: _thaw(v) for k, v in value}
    raise ConfigError(f"data.kwargs must be a mapping of keyword arguments, got {value!r}")


def _is_pairs(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(
        isinstance(p, list | tuple) and len(p) == 2 and isinstance(p[0], str) for p in value)


def _thaw(value: Any) -> Any:
    """A nested mapping back from the runner's frozen form (sorted, unique (key, value) pairs),
    e.g. OGB's `meta_dict`; any other value as it is."""
    if isinstance(value, dict):
        return {k: _thaw(v) for k, v in value.items()}
    keys = [p[0] for p in value] if value and _is_pairs(value) else None
    if keys is not None and keys == sorted(set(keys)):
        return {k: _thaw(v) for k, v in value}
    return value


def load_target(target: str) -> Any:
    """The user's class or function, imported as the driver sees it (one line on failure)."""
    from ablate.user_code import load_object

    obj = load_object(target, "data.target")
    if not callable(obj):
        raise ConfigError(f"data.target {target!r} is a {type(obj).__name__}, not a dataset "
                          "class or a function returning graphs")
    return obj


def build(target: str, kwargs: dict | None) -> Any:
    """`target(**kwargs)`: the user's dataset (its own errors become one line)."""
    cls = load_target(target)
    try:
        with pyg_safe_globals():
            dataset = cls(**kwargs_of(kwargs))
    except Exception as e:  # noqa: BLE001 - the user's constructor: one line, its own words
        text = str(e).strip().splitlines()
        raise ConfigError(f"data.target {target}(**{kwargs_of(kwargs)}) raised {type(e).__name__}: "
                          f"{text[0] if text else ''}") from None
    if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__") or len(dataset) == 0:
        raise ConfigError(f"data.target {target} gave {type(dataset).__name__}, not a non-empty "
                          "sequence of graphs (torch_geometric.data.Data)")
    return dataset


def pyg_safe_globals() -> AbstractContextManager:
    """PyG's own graph containers allowed to torch's weights-only loader while the user's class
    builds: torch >= 2.6 loads weights-only by default, and a class that saves
    `InMemoryDataset.collate`'s output and reads it back with a bare `torch.load` (OGB 1.3.6's
    `PygGraphPropPredDataset`, snap-stanford/ogb#497) fails on `DataEdgeAttr` otherwise. Still
    the weights-only unpickler: no code runs from the file."""
    import torch
    from torch_geometric.data.data import DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import EdgeStorage, GlobalStorage, NodeStorage

    safe = getattr(torch.serialization, "safe_globals", None)  # torch >= 2.5
    return safe([DataEdgeAttr, DataTensorAttr, GlobalStorage, NodeStorage, EdgeStorage]) \
        if safe is not None else nullcontext()


def to_graphset(dataset: Any, target: str) -> GraphSet:
    """Every graph of `dataset` as one `GraphSet` (features, symmetric edges, class labels)."""
    xs, edges, ys, gts = [], [], [], []
    no_x = 0
    for i in range(len(dataset)):
        g = dataset[i]
        n = int(g.num_nodes) if g.num_nodes is not None else 0
        ys.append(_label(g, i, target))
        x = getattr(g, "x", None)
        if x is None:
            no_x += 1
            xs.append(np.zeros((n, 0), np.float32))
        else:
            xs.append(np.asarray(x.detach().cpu(), dtype=np.float32).reshape(n, -1))
        edges.append(_clean_edges(g.edge_index, n))
        gt = getattr(g, "gt", None)
        gts.append(normalize_gt(np.asarray(gt.detach().cpu(), np.float32).reshape(n))
                   if gt is not None else np.zeros(n, np.float32))
    if 0 < no_x < len(dataset):
        raise ConfigError(f"data.target {target}: {no_x} of {len(dataset)} graphs have no node "
                          "features x (all or none must have them)")
    y = np.asarray(ys)
    _, y = np.unique(y, return_inverse=True)
    if len(np.unique(y)) < 2:
        raise ConfigError(f"data.target {target}: every graph has the same label; a classifier "
                          "needs at least two classes")
    gs = GraphSet.from_graphs(xs, edges, list(y), gts)
    if no_x:  # one-hot degree, (max degree over the whole set + 1) channels, as the TU sets
        deg = np.bincount(gs.edge_index[0] + np.repeat(gs.node_ptr[:-1], np.diff(gs.edge_ptr)),
                          minlength=gs.total_nodes)
        gs = gs.replace(x=OneHot(deg.astype(np.int32), int(deg.max(initial=0)) + 1))
    if not np.isfinite(np.asarray(gs.x)).all():
        raise ConfigError(f"data.target {target}: node features hold NaN or infinite values")
    return gs


def _label(g: Any, i: int, target: str) -> int:
    """Graph `i`'s class: one integer (OGB's (1, 1) label included); float targets refused."""
    y = getattr(g, "y", None)
    if y is None:
        raise ConfigError(f"data.target {target}: graph {i} has no label y; the study trains "
                          "graph classifiers")
    arr = np.asarray(y.detach().cpu() if hasattr(y, "detach") else y)
    if arr.size != 1:
        raise ConfigError(f"data.target {target}: graph {i}'s y has {arr.size} values (node "
                          "labels or several tasks); the recipe needs one class per graph")
    value = arr.reshape(())
    if not np.issubdtype(arr.dtype, np.integer) and not (np.isfinite(value)
                                                          and float(value).is_integer()):
        raise ConfigError(f"data.target {target}: graph {i}'s y is {float(value)!r}, a "
                          "regression target; the recipe trains classifiers on integer labels")
    return int(value)


def _clean_edges(edge_index: Any, n: int) -> np.ndarray:
    """(2, E) local edges in both directions, without self loops or duplicates, sorted."""
    e = np.asarray(edge_index.detach().cpu() if hasattr(edge_index, "detach") else edge_index,
                   dtype=np.int64).reshape(2, -1)
    e = e[:, e[0] != e[1]]
    key = np.unique(np.concatenate([e[0] * n + e[1], e[1] * n + e[0]]))
    return np.stack([key // n, key % n]) if n else np.zeros((2, 0), np.int64)


def _own_split(dataset: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The set's own (train, val, test) ids from `get_idx_split()`, or None."""
    get = getattr(dataset, "get_idx_split", None)
    if get is None:
        return None
    try:
        with pyg_safe_globals():
            split = get()
    except Exception as e:  # noqa: BLE001 - the user's method: one line, its own words
        raise ConfigError(f"get_idx_split() of {type(dataset).__name__} raised "
                          f"{type(e).__name__}: {e}") from None
    parts = []
    for key in ("train", "valid", "test"):
        if key not in split:
            raise ConfigError(f"get_idx_split() has no {key!r} part (it has {sorted(split)})")
        parts.append(np.asarray(split[key].cpu() if hasattr(split[key], "cpu") else split[key],
                                dtype=np.int64))
    return parts[0], parts[1], parts[2]

