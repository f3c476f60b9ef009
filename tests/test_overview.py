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


def _study(tmp_path, trials: dict[str, dict]):
    """A study of one row per (trial, seed) with the given axes, read as the report reads it."""
    from analysis.load import load_store
    from analysis.synthetic import trial_record, write_trials

    write_trials(tmp_path / "res", "s", [
        trial_record(trial_id=tid, seed=s, seeds="0,1", epochs=3, **axes)
        for tid, axes in trials.items() for s in (0, 1)])
    (study,) = load_store(tmp_path / "res")
    return study


GLOBAL = dict(pool_layers="", supervision="unsup", kl_weight=100.0, lr_decay_epochs="",
              lr_timing="published")


def test_settings_global_pooling_does_not_use_are_not_listed_as_varied(tmp_path):
    """Global pool vs weak attention (a user's study: kl_weight set in the attention arm only,
    3 epochs so no LR drop): global pooling stores the default attention settings, which
    train nothing, and its lr_timing reads "(none)" (no drop); neither is the design."""
    from analysis.overview import overview

    study = _study(tmp_path, {
        "global": GLOBAL,
        "weak": dict(pool_layers="2", supervision="weak", kl_weight=1.0, lr_decay_epochs="",
                     lr_timing="published")})
    assert overview(study).varied == ["pool_layers: (none), 2", "seed: 2 seeds (0–1)"]


def test_a_setting_that_varies_among_the_rows_that_use_it_is_listed_with_those_values(tmp_path):
    from analysis.overview import overview

    weak = dict(pool_layers="2", supervision="weak", lr_decay_epochs="2")
    study = _study(tmp_path, {
        "global": GLOBAL,
        "weak_1": dict(weak, kl_weight=1.0, lr_timing="early"),
        "weak_10": dict(weak, kl_weight=10.0, lr_timing="published")})
    varied = overview(study).varied
    assert "kl_weight: 1.0, 10.0" in varied
    assert "lr_timing: early, published" in varied
    assert not any(v.startswith("supervision") for v in varied), varied


def test_the_attention_axes_are_the_settings_global_pooling_does_not_use():
    """`analysis.variants.ATTENTION_AXES` (the analysis imports nothing from ablate) mirrors
    `ablate.config.inapplicable` of a global-pool trial."""
    from ablate.config import TrialConfig, inapplicable, resolve
    from analysis.variants import ATTENTION_AXES

    assert inapplicable(resolve(TrialConfig(pool_layers=()))) == ATTENTION_AXES


def test_a_setting_another_setting_makes_inert_is_not_listed_as_varied(tmp_path):
    """Threshold rows and top-k rows keep their defaults of the other's knob, and rows
    without a KL term their kl_weight: a study of threshold 0.1 vs top-k 0.5 with
    unsupervised and supervised rows varies selection, threshold only among threshold rows,
    ratio only among top-k rows and kl_weight only among supervised ones."""
    from analysis.overview import overview

    att = dict(pool_layers="2", lr_decay_epochs="", lr_timing="published")
    study = _study(tmp_path, {
        "thr": dict(att, selection="threshold", threshold=0.1, ratio=0.8, supervision="unsup",
                    kl_weight=100.0),
        "topk": dict(att, selection="topk", threshold=0.0, ratio=0.5, supervision="unsup",
                     kl_weight=1.0),
        "sup": dict(att, selection="topk", threshold=0.3, ratio=0.5, supervision="sup",
                    kl_weight=100.0)})
    varied = overview(study).varied
    assert "selection: threshold, topk" in varied
    assert "supervision: sup, unsup" in varied
    assert not any(v.split(":")[0] in ("threshold", "ratio", "kl_weight") for v in varied), varied
    both = _study(tmp_path / "b", {
        "a": dict(att, selection="topk", ratio=0.5, supervision="sup", kl_weight=1.0),
        "b": dict(att, selection="topk", ratio=0.8, supervision="weak", kl_weight=10.0)})
    assert {"ratio: 0.5, 0.8", "kl_weight: 1.0, 10.0"} <= set(overview(both).varied)


def test_the_inert_rules_mirror_the_configs():
    """`analysis.overview.INERT_WHEN` says, for every attention axis it names, what
    `ablate.config.inapplicable` says of a trial with attention."""
    import itertools

    from ablate.config import TrialConfig, axes, inapplicable, resolve
    from analysis.overview import INERT_WHEN

    for sel, sup, scorer in itertools.product(("threshold", "topk", "gao"),
                                              ("unsup", "sup", "weak", "gt"), ("gnn", "fc")):
        try:
            cfg = resolve(TrialConfig(pool_layers=(2,), selection=sel, supervision=sup,
                                      scorer=scorer))
        except Exception:  # a combination the config refuses is no row of any store
            continue
        row = pd.DataFrame([{k: v for k, v in axes(cfg).items()}])
        ours = {a for a, rule in INERT_WHEN.items() if bool(rule(row).iloc[0])}
        assert ours == inapplicable(cfg) & set(INERT_WHEN), (sel, sup, scorer)
