"""The overview's line per dataset recipe parameter that varied (`data.KEY: values`)."""

from __future__ import annotations

import json

import pandas as pd

from analysis.overview import _data_params_varied as data_params_varied


def _texts(*params: dict) -> pd.Series:
    return pd.Series([json.dumps(p) for p in params])


def test_folds_that_are_not_a_range_are_listed():
    """A study stopped part-way has folds 0, 1 and 5: not '3 folds (0–5)', which reads as a
    range of six."""
    got = data_params_varied(_texts(*({"fold": f, "protocol": "cv"} for f in (0, 1, 5))))
    assert got == ["data.fold: 3 cross-validation folds (0, 1, 5), pooled like seeds"]
    whole = data_params_varied(_texts(*({"fold": f, "protocol": "cv"} for f in range(10))))
    assert whole == ["data.fold: 10 cross-validation folds (0–9), pooled like seeds"]


def test_numbers_are_listed_in_numeric_order():
    got = data_params_varied(_texts({"n_train": 500}, {"n_train": 1000}, {"n_train": 20}, {}))
    assert got == ["data.n_train: 20, 500, 1000, default"]
