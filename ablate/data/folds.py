"""Split protocols of a graph classification set with no fixed split.

- `inductive_split`: the paper's (SPEC §1): train on graphs with N <= max_train_nodes (the
  authors' draw of 500 / 1,000 of them, `ablate.data.tu.split_ids`), test on all the others.
- `cv_split`: the protocol TU benchmarks are compared by today (Errica et al., ICLR 2020, "A
  fair comparison of graph neural networks for graph classification"): stratified k-fold
  cross-validation over all graphs (scikit-learn's `StratifiedKFold`, shuffled with the
  split seed); fold f is the test set and the rest train, with a stratified inner
  validation split (`val_fraction` of it, `train_test_split`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ablate.errors import ConfigError

if TYPE_CHECKING:
    from ablate.data.graphs import GraphSet

PROTOCOLS = ("inductive", "cv")


def check_protocol(protocol: str, folds: int, fold: int) -> None:
    """The protocol's name and a fold inside 0..folds-1 (one ConfigError line each)."""
    if protocol not in PROTOCOLS:
        from ablate.errors import choice_error

        raise choice_error("data.protocol", protocol, PROTOCOLS)
    if protocol == "cv":
        if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
            raise ConfigError(f"data.folds must be an integer >= 2 for protocol=cv, got {folds!r}")
        if isinstance(fold, bool) or not isinstance(fold, int) or not 0 <= fold < folds:
            raise ConfigError(f"data.fold must be in 0..{folds - 1} (data.folds={folds}), got "
                              f"{fold!r}; sweep them with 'data.fold=range(0,{folds})'")


def stratified_folds(y: np.ndarray, folds: int, seed: int) -> list[np.ndarray]:
    """The test ids of each of `folds` stratified folds over graph labels `y` (each graph in
    exactly one fold, class proportions kept), shuffled with `seed`."""
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(y)
    smallest = int(np.bincount(y).min(initial=0)) if len(y) else 0
    if len(y) < folds:
        raise ConfigError(f"data.folds={folds} is more than the {len(y)} graphs")
    if 0 < smallest < folds:  # scikit-learn warns and makes uneven folds: say it plainly
        raise ConfigError(f"data.folds={folds}: a class has only {smallest} graph(s), fewer "
                          "than the folds; lower data.folds")
    kf = StratifiedKFold(n_splits=folds, shuffle=True, random_state=seed)
    return [test for _, test in kf.split(np.zeros(len(y)), y)]


def cv_split(y: np.ndarray, folds: int, fold: int, seed: int,
             val_fraction: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(train, val, test) graph ids of fold `fold`: the fold is the test set; of the rest a
    stratified `val_fraction` is the validation set (none when 0)."""
    from sklearn.model_selection import train_test_split

    test = np.sort(stratified_folds(y, folds, seed)[fold])
    rest = np.setdiff1d(np.arange(len(y)), test)
    if val_fraction <= 0:
        return rest, rest[:0], test
    counts = np.bincount(np.asarray(y)[rest])
    stratify = y[rest] if counts[counts > 0].min() >= 2 else None
    train, val = train_test_split(rest, test_size=val_fraction, random_state=seed,
                                  stratify=stratify)
    return np.sort(train), np.sort(val), test


def default_max_train_nodes(sizes: np.ndarray) -> int:
    """The inductive protocol's size limit where the paper gives none: the median node count,
    so that the smaller half of the graphs are training candidates and the larger half test
    how attention generalises to larger graphs."""
    return int(np.median(np.asarray(sizes)))


def inductive_splits(full: GraphSet, chosen: np.ndarray, limit: int, val_fraction: float,
                     final: bool) -> dict[str, GraphSet]:
    """The inductive protocol's splits from the chosen small graphs `chosen` (in their drawn
    order): the first round(val_fraction * n) are "val", the rest "train" (all of them with
    `final`), every other graph "test_large" and the small ones among them "test_orig"."""
    sizes = full.num_nodes
    n_val = int(round(val_fraction * len(chosen)))
    val, train = chosen[:n_val], (chosen if final else chosen[n_val:])
    used = np.zeros(len(full), dtype=bool)
    used[chosen] = True
    splits = {"train": full.subset(train), "val": full.subset(val),
              "test_large": full.subset(np.flatnonzero(~used))}
    rest_small = np.flatnonzero(~used & (sizes <= limit))
    if len(rest_small):
        splits["test_orig"] = full.subset(rest_small)
    return splits

