"""The authors' TU split rule on synthetic node counts (runs everywhere; tests/test_tu_real.py
pins it on the real files when the fixtures are present).

The rule, as their `DataReader.split_ids_shape` states it: the graphs with at most N nodes are
the small ones; `RandomState(seed).permutation` over their count orders them; the first 1,000
train (and validate) where more than 1,000 are small, else the first 500 (all of them when
fewer); every other graph, small or large, is a test graph.
"""

import numpy as np
import pytest

from ablate.data.tu import split_ids


def _rule(sizes: np.ndarray, max_nodes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    small = np.where(sizes <= max_nodes)[0]
    order = np.random.RandomState(seed).permutation(len(small))
    n = 1000 if len(order) > 1000 else 500
    train = small[order[:n]]
    test = np.concatenate([small[order[n:]], np.where(sizes > max_nodes)[0]])
    return train, test


@pytest.mark.parametrize("n_small, n_large, seed", [(1200, 300, 0), (1001, 10, 3), (1000, 50, 1),
                                                     (700, 100, 7), (300, 40, 2)])
def test_split_is_the_authors_rule(n_small, n_large, seed):
    rng = np.random.default_rng(seed)
    sizes = np.concatenate([rng.integers(5, 26, n_small), rng.integers(26, 400, n_large)])
    sizes = sizes[rng.permutation(len(sizes))]
    chosen, test = split_ids(sizes, 25, seed)
    want_train, want_test = _rule(sizes, 25, seed)
    np.testing.assert_array_equal(chosen, want_train)  # same graphs, same (shuffled) order
    np.testing.assert_array_equal(test, np.sort(want_test))
    assert len(chosen) == min(n_small, 1000 if n_small > 1000 else 500)
    assert set(chosen).isdisjoint(test) and len(chosen) + len(test) == len(sizes)
    assert (sizes[chosen] <= 25).all()


def test_the_earlier_rule_is_another_draw():
    sizes = np.random.default_rng(0).integers(5, 60, 900)
    authors, _ = split_ids(sizes, 25, 0)
    earlier, _ = split_ids(sizes, 25, 0, split="earlier", name="PROTEINS")
    assert not np.array_equal(authors, earlier)  # another shuffle (RandomState vs default_rng)
