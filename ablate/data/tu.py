"""Real graph datasets in TU format (PROTEINS, D&D, COLLAB), split inductively.

Follows SPEC section 1 "Real graph datasets": train/val on SMALL graphs
(N <= max_train_nodes), test on all the rest. Files are read from a LOCAL
directory (`read_tu`, PyG's `read_tu_data` semantics with a C parser), looked up in
`path`, `path/NAME` and `path/NAME/raw` (the files are fetched first when missing,
`ablate.data.download`).

Splits (`split_ids`):
- "train"/"val": graphs with N <= max_train_nodes, taken in a seeded shuffle. With
  `split="authors"` (the default) the shuffle and the count are the authors' rule
  (`graphdata.py`, `DataReader.split_ids_shape`): NumPy's `RandomState(split_seed)
  .permutation` over the small graphs, and 500 of them (1,000 where more than 1,000 are
  small, all of them where fewer than 500 are), so `split_seed=s` is their `--seed_data s`
  graph for graph. `split="earlier"` is this project's rule before (NumPy `default_rng`
  shuffle, `n_train_val` 500 / 462 / 500 for PROTEINS / D&D / COLLAB): its recipes keep their
  hashes and trial ids. An explicit `n_train_val` asks for that many graphs (an error where
  fewer are small). The first round(val_fraction * n) of them are "val".
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
(max degree over the whole dataset + 1) channels, both kept as the index of the hot
channel (`ablate.data.onehot.OneHot`). No ground-truth attention: gt is all zeros.
Edges are made symmetric, without self loops.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ablate.data.graphs import GraphSet
from ablate.data.onehot import OneHot
from ablate.errors import ConfigError


def proteins(
    path: str | None = None,
    max_train_nodes: int = 25,
    n_train_val: int | None = None,
    val_fraction: float = 0.1,
    split_seed: int = 111,
    final: bool = False,
    split: str = "authors",
    progress: bool = False,
) -> dict[str, GraphSet]:
    """PROTEINS: train/val on N <= 25 (500 graphs), test on the other 613 (SPEC 1)."""
    return _load_inductive("PROTEINS", path, max_train_nodes, n_train_val, val_fraction,
                           split_seed, final, split)


def dd(
    path: str | None = None,
    max_train_nodes: int = 200,
    n_train_val: int | None = None,
    val_fraction: float = 0.1,
    split_seed: int = 111,
    final: bool = False,
    split: str = "authors",
    progress: bool = False,
) -> dict[str, GraphSet]:
    """D&D: train/val on N <= 200 (all 462 such graphs), test on the other 716 (SPEC 1);
    max_train_nodes=300: 500 of the 740 graphs with N <= 300, test on the other 678."""
    return _load_inductive("DD", path, max_train_nodes, n_train_val, val_fraction, split_seed,
                           final, split)


def collab(
    path: str | None = None,
    max_train_nodes: int = 35,
    n_train_val: int | None = None,
    val_fraction: float = 0.1,
    split_seed: int = 111,
    final: bool = False,
    split: str = "authors",
    progress: bool = False,
) -> dict[str, GraphSet]:
    """COLLAB: train/val on N <= 35 (500 graphs), test on the other 4500 (SPEC 1)."""
    return _load_inductive("COLLAB", path, max_train_nodes, n_train_val, val_fraction,
                           split_seed, final, split)


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


def read_tu(name: str, path: str | None) -> GraphSet:
    """Every graph of a TU data set: one-hot node labels (or one-hot degree) as `OneHot`
    indices, symmetric local edges, labels 0..C-1; ground truth all zero.

    Reads the text files the way PyG's `read_tu_data` does (labels shifted to start at 0 and
    one-hot up to the largest, self loops dropped, duplicate edges merged, graph labels
    numbered in sorted order), with a C parser and NumPy arrays instead of Python lists:
    COLLAB's 25 million edge lines take seconds and about 1 GB, not a minute and 7 GB.
    """
    folder = find_tu_folder(name, path)
    try:
        ind = _read_ints(folder / f"{name}_graph_indicator.txt")[:, 0] - 1
        labels = _read_ints(folder / f"{name}_graph_labels.txt")[:, 0]
        lab_file = folder / f"{name}_node_labels.txt"
        node_labels = _read_ints(lab_file) if lab_file.is_file() else None
        n_graphs = int(ind.max()) + 1 if len(ind) else 0
        if len(ind) and (np.diff(ind) < 0).any():
            raise ValueError(f"{name}_graph_indicator.txt: nodes are not grouped by graph")
        node_ptr = np.concatenate([[0], np.cumsum(np.bincount(ind, minlength=n_graphs))])
        src, dst = _symmetric_edges(folder / f"{name}_A.txt", int(node_ptr[-1]))
    except (ValueError, IndexError) as err:  # malformed text files
        raise ConfigError(f"cannot read {name} from {str(folder)!r}: {err}") from err
    _, y = np.unique(labels, return_inverse=True)
    if len(y) != n_graphs:
        raise ConfigError(f"{name}_graph_labels.txt has {len(y)} labels for {n_graphs} graphs")
    if node_labels is not None:
        x = _label_features(node_labels)
    else:  # one-hot degree, (max degree over the whole dataset + 1) channels
        deg = np.bincount(src, minlength=node_ptr[-1])
        x = OneHot(deg.astype(np.int32), int(deg.max(initial=0)) + 1)
    owner = ind[src]
    edge_ptr = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=n_graphs))])
    first = node_ptr[owner]
    del owner
    local = np.empty((2, len(src)), np.int32)  # local ids: int32, as the cache stores them
    np.subtract(src, first, out=local[0], casting="unsafe")
    del src
    np.subtract(dst, first, out=local[1], casting="unsafe")
    del dst, first
    return GraphSet(x=x, gt=np.zeros(node_ptr[-1], np.float32), node_ptr=node_ptr.astype(np.int64),
                    edge_index=local, edge_ptr=edge_ptr.astype(np.int64), y=y.astype(np.int64))


def _read_ints(path: Path) -> np.ndarray:
    """A TU text file of comma-separated integers as an (rows, columns) int64 array."""
    import pandas as pd

    table = pd.read_csv(path, header=None, sep=",", skipinitialspace=True, dtype=np.int64,
                        engine="c")
    return table.to_numpy()


def _label_features(labels: np.ndarray) -> OneHot | np.ndarray:
    """One-hot node labels, each column shifted to start at 0 (`OneHot` for one column)."""
    labels = labels - labels.min(axis=0)
    if labels.shape[1] == 1:
        return OneHot(labels[:, 0].astype(np.int32), int(labels.max()) + 1)
    parts = [np.eye(int(c.max()) + 1, dtype=np.float32)[c] for c in labels.T]
    return np.concatenate(parts, axis=1)


def _symmetric_edges(a_file: Path, n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The edges of NAME_A.txt (1-based global ids) in both directions, without self loops or
    duplicates, sorted by (src, dst): global 0-based (src, dst) int64 arrays."""
    pairs = _read_ints(a_file) - 1  # (E, 2)
    if len(pairs) and (pairs.min() < 0 or pairs.max() >= n_nodes):
        raise ValueError(f"{a_file.name} names nodes outside 1..{n_nodes}")
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    key = np.concatenate([pairs[:, 0] * n_nodes + pairs[:, 1], pairs[:, 1] * n_nodes + pairs[:, 0]])
    del pairs
    key.sort()  # in place (np.unique is ~10x slower on COLLAB's 55 million keys)
    if len(key):
        key = key[np.concatenate([[True], key[1:] != key[:-1]])]
    src = key // n_nodes
    key -= src * n_nodes
    return src, key


SPLITS = ("authors", "earlier")
# n_train_val of the earlier rule, per data set (what `split="earlier"` resolves None to)
EARLIER_N_TRAIN_VAL = {"PROTEINS": 500, "DD": 462, "COLLAB": 500}


def check_split(split: str) -> None:
    """Refuse an unknown split rule with the valid ones."""
    if split not in SPLITS:
        from ablate.errors import choice_error

        raise choice_error("split", split, SPLITS)


def split_ids(sizes: np.ndarray, max_train_nodes: int, split_seed: int, n_train_val: int | None = None,
              split: str = "authors", name: str = "the data set") -> tuple[np.ndarray, np.ndarray]:
    """Inductive split by node count (SPEC 1): the chosen train/val graph ids (in their shuffled
    order) and every other graph's id (test). `split="authors"` is the authors' rule
    (`DataReader.split_ids_shape`: `RandomState(seed).permutation` of the small graphs, the
    first 500, or 1,000 where more than 1,000 are small); "earlier" is this project's rule
    before it (a `default_rng(seed)` shuffle, the first `n_train_val`)."""
    check_split(split)
    sizes = np.asarray(sizes)
    small = np.flatnonzero(sizes <= max_train_nodes)
    if len(small) == 0:
        raise ConfigError(f"{name} has no graph with at most max_train_nodes={max_train_nodes} "
                          f"nodes to train on (its smallest has {int(sizes.min())})")
    if n_train_val is not None and n_train_val < 1:
        raise ConfigError(f"n_train_val must be >= 1, got {n_train_val}")
    if n_train_val is not None and n_train_val > len(small):
        raise ConfigError(f"n_train_val={n_train_val} asks for more training graphs than {name} has "
                          f"with at most max_train_nodes={max_train_nodes} nodes ({len(small)})")
    if split == "authors":
        n = n_train_val if n_train_val is not None else (1000 if len(small) > 1000 else 500)
        chosen = small[np.random.RandomState(split_seed).permutation(len(small))[:n]]
    else:  # the earlier rule: its per-data-set count, all small graphs where fewer
        n = n_train_val if n_train_val is not None else EARLIER_N_TRAIN_VAL.get(name, 500)
        chosen = np.random.default_rng(split_seed).permutation(small)[:n]
    test = np.setdiff1d(np.arange(len(sizes)), chosen)
    if len(test) == 0:
        raise ConfigError(f"max_train_nodes={max_train_nodes} leaves no test graph in {name}: all "
                          f"{len(sizes)} graphs train; lower max_train_nodes or n_train_val")
    return chosen, test


def _load_inductive(name: str, path: str | None, max_train_nodes: int, n_train_val: int | None,
                    val_fraction: float, split_seed: int, final: bool = False,
                    split: str = "authors") -> dict[str, GraphSet]:
    """Inductive split of a TU dataset by node count (SPEC 1, real graph datasets);
    `final`: train on every train/val graph (the reference's final models)."""
    if not 0.0 <= val_fraction < 1.0:
        raise ConfigError(f"val_fraction must be in [0, 1), got {val_fraction}")
    check_split(split)
    from ablate.data.folds import inductive_splits

    full = read_tu(name, path)
    chosen, _ = split_ids(full.num_nodes, max_train_nodes, split_seed, n_train_val, split, name)
    return inductive_splits(full, chosen, max_train_nodes, val_fraction, final)
