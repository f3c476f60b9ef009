"""Adding an ablation axis: the `scorer_relu` axis as the worked example (docs/design.md).

A new axis is one config field, one function and one YAML key; trials stored before it
existed keep their ids (`ablate.config.CHANGED_DEFAULTS`), and the analysis reads their rows as
the earlier behaviour.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from ablate.config import CHANGED_DEFAULTS, TrialConfig, axes, inapplicable, lr_drops, resolve, trial_id
from ablate.data import dataset_recipe_hash
from ablate.models.layers import Graph
from ablate.models.pooling import AttentionPool
from ablate.runner.study.expand import build_study
from analysis import load


def _id(**kw) -> str:
    kw.setdefault("lr_timing", "early")  # the LR timing of then (`CHANGED_DEFAULTS`, issue 41)
    c = resolve(TrialConfig(**kw))
    return trial_id(c, dataset_recipe_hash(c.dataset, dict(c.data_params)))


def test_adding_the_axis_kept_every_stored_trial_id():
    # ids computed by the commit before `scorer_relu` existed (df53927)
    assert _id() == "702c6fc188b1"
    assert _id(supervision="sup", scorer="gnn") == "a20cbef5f41d"
    assert _id(dataset="triangles", backbone="gin", pool_layers=()) == "02f592353432"
    assert _id(supervision="sup", scorer="gnn", scorer_relu=True) != "a20cbef5f41d"


def test_score_relu_makes_gnn_scores_non_negative_and_only_gnn_scores():
    torch.manual_seed(0)
    x = torch.randn(4, 7, 5)
    A = (torch.rand(4, 7, 7) > 0.5).float()
    A = ((A + A.transpose(1, 2)) > 0).float() * (1 - torch.eye(7))
    g = Graph(A, torch.ones(4, 7, dtype=torch.bool))
    plain = AttentionPool(5, scorer="gnn", K=2)
    relu = AttentionPool(5, scorer="gnn", K=2, score_relu=True)
    relu.load_state_dict(plain.state_dict())
    s_plain, s_relu = plain.score(x, g), relu.score(x, g)
    assert (s_plain < 0).any()  # the case the ReLU changes exists
    torch.testing.assert_close(s_relu, s_plain.clamp(min=0))
    fc = AttentionPool(5, scorer="fc", score_relu=True)
    assert not fc.score_relu  # a projection's scores are never clamped


def test_the_scorer_study_has_four_distinct_models_and_blanks_the_axis_where_it_does_nothing():
    study, _ = build_study("scorer")
    assert len({t.trial_id for t in study.trials}) == 4
    relu = {t.config.scorer: t.config.scorer_relu for t in study.trials if t.config.scorer_relu}
    assert relu == {"gnn": True}
    fc = next(t.config for t in study.trials if t.config.scorer == "fc")
    assert "scorer_relu" in inapplicable(fc)
    gnn = next(t.config for t in study.trials if t.config.scorer == "gnn")
    assert "scorer_relu" not in inapplicable(gnn)


def test_analysis_reads_rows_stored_before_the_axis_as_its_earlier_value(tmp_path):
    # the analysis imports nothing from ablate: a mirror
    assert load.ADDED_AXES == CHANGED_DEFAULTS["axes"]
    trials = tmp_path / "s" / "trials"
    trials.mkdir(parents=True)
    base = {"seed": 0, "split": "test_orig", "status": "ok", "dataset": "colors",
            "backbone": "chebygin", "pool_layers": "1", "scorer": "gnn", "accuracy": 0.5}
    pq.write_table(pa.Table.from_pylist([{**base, "trial_id": "old"}]), trials / "old.parquet")
    pq.write_table(pa.Table.from_pylist([{**base, "trial_id": "new", "scorer_relu": True}]),
                   trials / "new.parquet")
    df = load.load_study("s", tmp_path / "s").trials.set_index("trial_id")
    assert not pd.isna(df.loc["old", "scorer_relu"])
    assert bool(df.loc["old", "scorer_relu"]) is False
    assert bool(df.loc["new", "scorer_relu"]) is True


def test_the_analysis_reads_a_timing_as_neutral_only_where_no_model_drops_its_lr():
    """`analysis.load.timing_changed_nothing` (on a trial's stored columns) agrees with
    `ablate.config.lr_drops`, which it cannot import: never neutral where a model drops; always
    where a trial without weak supervision has no drop (weak trials: by their stored rows)."""
    cfgs = [t.config for name in ("paper", "supervision", "tu") for t in build_study(name)[0].trials]
    cfgs += [resolve(TrialConfig(dataset=d, supervision=s, epochs=e, lr_decay_epochs=decay))
             for d in ("colors", "mnist_sp", "proteins") for s in ("unsup", "weak")
             for e in (None, 7) for decay in ((), None)]
    df = pd.DataFrame([{**axes(c), "trial_id": str(i)} for i, c in enumerate(cfgs)])
    neutral = load.timing_changed_nothing(df).tolist()
    assert any(neutral) and not all(neutral)
    for c, n in zip(cfgs, neutral, strict=True):
        assert not (n and lr_drops(c)), c
        assert n or lr_drops(c) or c.supervision == "weak", c
