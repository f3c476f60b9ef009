"""Any TU data set by name (`dataset=tu:NAME`), with the paper's features and two split protocols.

The files are read as `ablate.data.tu.read_tu` reads PROTEINS, D&D and COLLAB (PyG's
`read_tu_data` semantics: labels shifted to 0..C-1, self loops dropped, edges symmetric) and
fetched on first use from the TU site like them (`ablate.data.download`; a set with no known
checksum is trusted on first use and its SHA-256 recorded, `download.source_record`).

Node features, by the paper's rule: the one-hot node labels; with `node_attr=True` the set's
node attributes (`NAME_node_attributes.txt`) as well, first, as PyG's
`TUDataset(use_node_attr=True)` orders them; a set with neither gets one-hot degree (max
degree over the whole set + 1 channels). Edge labels and attributes are not used.

Splits (`ablate.data.folds`): `protocol="inductive"` (the paper's: train on N <=
max_train_nodes, default the set's median node count; "test_large" every other graph,
"test_orig" the small graphs left over) or `protocol="cv"` (stratified `folds`-fold
cross-validation, Errica et al. 2020: "test_orig" is fold `fold`, same distribution as
training; "val" a stratified `val_fraction` of the rest). `final=True` trains on train + val.
No ground-truth attention (gt all zero): supervision=sup and gt need a set that has one.
"""

from __future__ import annotations

import numpy as np

from ablate.data.folds import check_protocol, cv_split, default_max_train_nodes, inductive_splits
from ablate.data.graphs import GraphSet
from ablate.data.tu import find_tu_folder, read_tu, split_ids
from ablate.errors import ConfigError


def tu_named(
    name: str,
    path: str | None = None,
    protocol: str = "inductive",
    max_train_nodes: int | None = None,
    n_train_val: int | None = None,
    val_fraction: float = 0.1,
    split_seed: int = 111,
    final: bool = False,
    folds: int = 10,
    fold: int = 0,
    node_attr: bool = False,
    progress: bool = False,
) -> dict[str, GraphSet]:
    """Every split of TU data set `name` (files in `path`, fetched first where missing)."""
    check_protocol(protocol, folds, fold)
    full = read_named(name, path, node_attr)
    return protocol_splits(full, protocol, name, max_train_nodes, n_train_val, val_fraction,
                           split_seed, final, folds, fold)

def read_named(name: str, path: str | None, node_attr: bool = False) -> GraphSet:
    """The whole set: `read_tu`'s graphs with the node attributes put first when asked."""
    full = read_tu(name, path)
    if not node_attr:
        return full
    folder = find_tu_folder(name, path)
    file = folder / f"{name}_node_attributes.txt"
    if not file.is_file():
        raise ConfigError(f"data.node_attr=true but {name} has no node attributes "
                          f"({file.name} is not in {str(folder)!r}); leave node_attr unset")
    import pandas as pd

    try:
        attrs = pd.read_csv(file, header=None, sep=",", skipinitialspace=True, dtype=np.float32,
                            engine="c").to_numpy()
    except ValueError as err:
        raise ConfigError(f"cannot read {file.name}: {err}") from err
    if len(attrs) != len(full.x):
        raise ConfigError(f"{file.name} has {len(attrs)} rows for {len(full.x)} nodes")
    labels = _has_node_labels(name, path)
    x = np.concatenate([attrs, np.asarray(full.x)], axis=1) if labels else attrs
    return full.replace(x=np.ascontiguousarray(x, dtype=np.float32))


def _has_node_labels(name: str, path: str | None) -> bool:
    return (find_tu_folder(name, path) / f"{name}_node_labels.txt").is_file()


def protocol_splits(full: GraphSet, protocol: str, name: str, max_train_nodes: int | None,
                    n_train_val: int | None, val_fraction: float, split_seed: int, final: bool,
                    folds: int, fold: int) -> dict[str, GraphSet]:
    """Every split of a graph set without a fixed split, by `protocol` ("inductive": the
    authors' draw of small graphs, `max_train_nodes` default the median node count; "cv":
    fold `fold` of `folds` is "test_orig", a stratified `val_fraction` of the rest "val")."""
    if protocol == "cv":
        train, val, test = cv_split(full.y, folds, fold, split_seed, val_fraction)
        if final:
            train = np.sort(np.concatenate([train, val]))
        return {"train": full.subset(train), "val": full.subset(val),
                "test_orig": full.subset(test)}
    limit = max_train_nodes if max_train_nodes is not None else default_max_train_nodes(full.num_nodes)
    chosen, _ = split_ids(full.num_nodes, limit, split_seed, n_train_val, "authors", name)
    return inductive_splits(full, chosen, limit, val_fraction, final)
