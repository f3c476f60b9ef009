"""One-hot node features kept as the index of each row's hot channel.

TU node labels and one-hot degrees are 0/1 rows with a single 1: COLLAB's degree
features are 492 channels wide, 0.7 GB as float32 for 372,000 nodes, but 1.5 MB as
the index of the channel that is on. `OneHot` holds that index and the width and
behaves like the (n, width) float32 array where code reads features: rows are
selected with `x[rows]` (another `OneHot`), `np.asarray(x)` gives the dense rows,
and the dense collator (`ablate.trial.batches.collate`) scatters the ones of a batch
directly.
"""

from __future__ import annotations

import numpy as np


class OneHot:
    """(n, width) one-hot rows as `index` (n,) int32: the channel set to 1, -1 for a zero row."""

    ndim = 2
    dtype = np.dtype(np.float32)

    def __init__(self, index: np.ndarray, width: int):
        self.index = np.asarray(index)
        self.width = int(width)

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self.index), self.width)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, key):
        if isinstance(key, tuple):  # x[:, c] and the like: the dense rows answer
            return self.dense()[key]
        return OneHot(self.index[key], self.width)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = self.dense()
        return out if dtype is None else out.astype(dtype, copy=False)

    def dense(self) -> np.ndarray:
        """The (n, width) float32 rows."""
        out = np.zeros(self.shape, np.float32)
        on = np.flatnonzero(self.index >= 0)
        out[on, self.index[on]] = 1.0
        return out

    def copy(self) -> OneHot:
        return OneHot(self.index.copy(), self.width)

    @staticmethod
    def from_dense(x: np.ndarray) -> OneHot | None:
        """`x` as a `OneHot` when every row holds a single 1.0 and zeros (or only zeros),
        else None."""
        x = np.asarray(x)
        if x.ndim != 2 or not np.isin(x, (0.0, 1.0)).all() or (x.sum(1) > 1).any():
            return None
        hot = x.argmax(1).astype(np.int32)
        hot[x.max(1, initial=0.0) == 0] = -1
        return OneHot(hot, x.shape[1])

    @staticmethod
    def concat(parts: list[OneHot]) -> OneHot:
        """The rows of several `OneHot`s of one width, in order."""
        widths = {p.width for p in parts}
        if len(widths) != 1:
            raise ValueError(f"cannot join one-hot features of widths {sorted(widths)}")
        return OneHot(np.concatenate([p.index for p in parts]), widths.pop())
