"""Real graph datasets in TU format (PROTEINS, D&D, COLLAB), split inductively.

Follows SPEC section 1 "Real graph datasets": train/val on SMALL graphs
(N <= max_train_nodes), test on all the rest. Files are read from a LOCAL
directory with `torch_geometric.io.read_tu_data` (nothing is downloaded),
looked up in `path`, `path/NAME` and `path/NAME/raw`.

Splits:
- "train"/"val": up to `n_train_val` graphs with N <= max_train_nodes, taken in
  a seeded shuffle; the first round(val_fraction * n) of them are "val".
- "test_large": EVERY graph not in train/val, in file order (SPEC: PROTEINS
  1113 - 500 = 613 test graphs with N 4..620, so leftover small graphs are
  tested too).
- "test_orig": the leftover small graphs alone (a subset of "test_large"),
  present only when there are any.

`final=True` follows the reference's final TU models, trained on ALL the
train/val graphs (after cross-validating hyper-parameters on them): "train"
then holds every chosen small graph and "val" is still the same val subset,
now inside "train" (its curves track the fit, not generalisation). The test
splits do not change. See docs/recipes.md.

Node features: the one-hot node labels when the dataset has them (node
attributes, e.g. PROTEINS' float attribute, are dropped as in PyG's
`TUDataset(use_node_attr=False)`), else one-hot degree with
(max degree over the whole dataset + 1) channels. No ground-truth attention:
gt is all zeros. Edges are made symmetric, without self loops.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ablate.data.graphs import GraphSet
from ablate.errors import ConfigError


def proteins(
    path: str | None = None,
    max_train_nodes: int = 25,
    n_train_val: int = 500,
    val_fraction: float = 0.1,
    split_seed: int = 111,
    final: bool = False,
    progress: bool = False,
) -> dict[str, GraphSet]:
    """PROTEINS: train/val on N <= 25 (500 graphs), test on the other 613 (SPEC 1)."""
    return _load_inductive("PROTEINS", path, max_train_nodes, n_train_val, val_fraction,
                           split_seed, final)


def dd(
    path: str | None = None,
    max_train_nodes: int = 200,
    n_train_val: int = 462,
    val_fraction: float = 0.1,
    split_seed: int = 111,
    final: bool = False,
    progress: bool = False,
) -> dict[str, GraphSet]:
    """D&D: train/val on N <= 200 (462 graphs), test on the other 716 (SPEC 1)."""
    return _load_inductive("DD", path, max_train_nodes, n_train_val, val_fraction, split_seed,
                           final)


def collab(
    path: str | None = None,
    max_train_nodes: int = 35,
    n_train_val: int = 500,
    val_fraction: float = 0.1,
    split_seed: int = 111,
    final: bool = False,
    progress: bool = False,
) -> dict[str, GraphSet]:
    """COLLAB: train/val on N <= 35 (500 graphs), test on the other 4500 (SPEC 1)."""
    return _load_inductive("COLLAB", path, max_train_nodes, n_train_val, val_fraction,
                           split_seed, final)


def find_tu_folder(name: str, path: str | None) -> Path:
    """The folder holding NAME_A.txt etc.: `path`, `path/NAME` or `path/NAME/raw`."""
    expected = (f"{name}_A.txt, {name}_graph_indicator.txt, {name}_graph_labels.txt "
                f"(optionally {name}_node_labels.txt)")
    if path is None:
        raise ConfigError(f"dataset {name} is read from a local TU-format directory and never "
                          f"downloaded: set path= to a directory holding {expected}")
    root = Path(path).expanduser()
    if not root.is_dir():
        raise ConfigError(f"{name} directory {str(root)!r} does not exist; it should hold "
                          f"{expected}")
    required = ("A", "graph_indicator", "graph_labels")
    for folder in (root, root / name, root / name / "raw"):
        if all((folder / f"{name}_{r}.txt").is_file() for r in required):
            return folder
    raise ConfigError(f"{name} files not found in {str(root)!r} (nor in {name}/ or {name}/raw/); "
                      f"expected {expected}")


def read_tu(name: str, path: str | None) -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray]:
    """Per-graph node features (one-hot labels or degree), symmetric local edges, labels."""
    from torch_geometric.io import read_tu_data

    folder = find_tu_folder(name, path)
    try:
        data, slices, sizes = read_tu_data(str(folder), name)
    except Exception as err:  # malformed text files
        raise ConfigError(f"cannot read {name} from {str(folder)!r}: {err}") from err
    if "x" in slices:
        node_ptr = slices["x"].numpy().astype(np.int64)
    else:
        node_ptr = np.concatenate([[0], np.cumsum(data._num_nodes)]).astype(np.int64)
    n_graphs = len(node_ptr) - 1
    y = data.y.numpy().astype(np.int64).reshape(-1)
    if len(y) != n_graphs:
        raise ConfigError(f"{name}_graph_labels.txt has {len(y)} labels for {n_graphs} graphs")
    edge_ptr = slices["edge_index"].numpy().astype(np.int64)
    counts = np.diff(edge_ptr)
    counts = np.concatenate([counts, np.zeros(n_graphs - len(counts), np.int64)])
    edges = _symmetric_edges(data.edge_index.numpy().astype(np.int64), counts, node_ptr)
    n_labels = int(sizes["num_node_labels"])
    if n_labels > 0:
        x_all = data.x.numpy()[:, int(sizes["num_node_attributes"]):]
        xs = [x_all[node_ptr[g]:node_ptr[g + 1]].astype(np.float32) for g in range(n_graphs)]
    else:
        degrees = [np.bincount(e[0], minlength=node_ptr[g + 1] - node_ptr[g])
                   for g, e in enumerate(edges)]
        width = max((int(d.max()) for d in degrees if len(d)), default=0) + 1
        xs = [np.eye(width, dtype=np.float32)[d] for d in degrees]
    return xs, edges, y


def _symmetric_edges(local: np.ndarray, counts: np.ndarray,
                     node_ptr: np.ndarray) -> list[np.ndarray]:
    """Per-graph (2, E) local edge index with both directions, no self loops, no duplicates."""
    n_graphs = len(node_ptr) - 1
    gid = np.repeat(np.arange(n_graphs), counts)
    glob = local + node_ptr[gid]
    glob = glob[:, glob[0] != glob[1]]
    both = np.unique(np.concatenate([glob, glob[::-1]], axis=1), axis=1)  # sorted by row
    owner = np.searchsorted(node_ptr, both[0], side="right") - 1
    ptr = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=n_graphs))])
    return [both[:, ptr[g]:ptr[g + 1]] - node_ptr[g] for g in range(n_graphs)]


def _load_inductive(name: str, path: str | None, max_train_nodes: int, n_train_val: int,
                    val_fraction: float, split_seed: int,
                    final: bool = False) -> dict[str, GraphSet]:
    """Inductive split of a TU dataset by node count (SPEC 1, real graph datasets);
    `final`: train on every train/val graph (the reference's final models)."""
    if not 0.0 <= val_fraction < 1.0:
        raise ConfigError(f"val_fraction must be in [0, 1), got {val_fraction}")
    xs, edges, y = read_tu(name, path)
    sizes = np.array([len(x) for x in xs])
    small = np.flatnonzero(sizes <= max_train_nodes)
    if len(small) == 0:
        raise ConfigError(f"{name} has no graph with at most {max_train_nodes} nodes to train on")
    chosen = np.random.default_rng(split_seed).permutation(small)[:n_train_val]
    n_val = int(round(val_fraction * len(chosen)))
    val, train = chosen[:n_val], (chosen if final else chosen[n_val:])
    used = np.zeros(len(xs), dtype=bool)
    used[chosen] = True
    gts = [np.zeros(len(x), np.float32) for x in xs]
    full = GraphSet.from_graphs(xs, edges, y, gts)
    splits = {"train": full.subset(train), "val": full.subset(val),
              "test_large": full.subset(np.flatnonzero(~used))}
    rest_small = np.flatnonzero(~used & (sizes <= max_train_nodes))
    if len(rest_small):
        splits["test_orig"] = full.subset(rest_small)
    return splits
