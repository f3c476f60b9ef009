"""Where the authors' code (bknyaz/graph_attention_pool) decides a number, we follow it.

Each test pins one detail that changed results before: cos(p_init, p_opt) over the
colour channels, backbone names that mean what they say (and distinct rows in every
study), dropout before the final layer only, weak-supervision labels from the raw output,
pooled attention AUC, the fc_hidden scorer's init (N(0, 1) * scale, as the reference). The LR
decay epoch is pinned by tests/test_lr_timing.py, top-k counting by tests/test_models.py.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from ablate.config import EXECUTION_FIELDS, TrialConfig, axes, resolve, trial_id
from ablate.models.network import GraphNet
from ablate.runner.study.compose import list_studies
from ablate.runner.study.expand import build_study
from ablate.trial.evaluate import pool_test_auc
from ablate.trial.setup import init_cosine, optimal_projection
from ablate.trial.weak import weak_floor

TINY = {"n_train": 48, "n_val": 24, "n_test": 24, "n_max_large": 40}


def _colors_net(**kw) -> GraphNet:
    cfg = resolve(TrialConfig(dataset="colors", backbone="gin", **kw))
    return GraphNet(cfg, 4, 1)


def test_cos_p_init_ignores_the_unseen_colour_channel():
    net = _colors_net()
    with torch.no_grad():
        net.pools["1"].p.copy_(torch.tensor([[0.0, 2.0, 0.0, 50.0]]))
    assert init_cosine(net, "colors", 4) == pytest.approx(1.0)  # 4 channels gave ~0.04
    assert optimal_projection("colors", 4).tolist() == [0.0, 1.0, 0.0]
    with torch.no_grad():
        net.pools["1"].p.copy_(torch.tensor([[1.0, 1.0, 0.0, -3.0]]))
    assert init_cosine(net, "colors", 4) == pytest.approx(1 / math.sqrt(2))
    assert math.isnan(init_cosine(net, "triangles", 4))


def test_backbone_names_mean_what_they_say():
    def agg_hidden(backbone, dataset="colors", **kw):
        c = resolve(TrialConfig(dataset=dataset, backbone=backbone, **kw))
        return c.K, c.aggregation, c.hidden

    assert agg_hidden("chebygin") == (2, "sum", 256)  # SPEC §2: ChebyGIN = sum + MLP
    assert agg_hidden("chebynet") == (2, "mean", 0)
    assert agg_hidden("chebygin", K=3) != agg_hidden("chebynet", K=3)
    assert agg_hidden("chebygin_ref") == (2, "mean", 0)  # scripts/colors.sh
    assert agg_hidden("chebygin_ref", "triangles") == (7, "sum", 64)  # scripts/triangles.sh
    assert agg_hidden("gin") == (1, "sum", 256) and agg_hidden("gcn") == (1, "mean", 0)


def _model_identity(cfg) -> str:
    """Everything that defines the trained model of a trial (not its name, seeds or device)."""
    a = axes(cfg)
    for k in (*EXECUTION_FIELDS, "seeds", "backbone"):
        a.pop(k, None)
    return repr(sorted(a.items()))


def _grid_studies() -> list[str]:
    from ablate.runner.study.search_spec import is_search_study

    return sorted(s for s in list_studies() if not is_search_study(s))


@pytest.mark.parametrize("study", _grid_studies())
def test_every_row_of_every_study_is_a_distinct_model(study):
    overrides = {"mnist": ["data.path=/nonexistent"], "tu": ["data.path=/nonexistent"]}
    s, _ = build_study(study, overrides.get(study, []))
    groups: dict[str, set] = {}
    for t in s.trials:
        groups.setdefault(_model_identity(t.config), set()).add(t.trial_id)
    # trials sharing a model identity differ only in their seed chunk: distinct seeds
    for ids in groups.values():
        seeds = [set(t.config.seeds) for t in s.trials if t.trial_id in ids]
        for a, b in itertools.combinations(seeds, 2):
            assert not a & b, (study, "two rows train the same model on the same seeds")


def test_dropout_only_before_the_final_linear_layer():
    cfg = resolve(TrialConfig(dataset="digits_sp", backbone="gin"))
    assert cfg.dropout == 0.5
    net = GraphNet(cfg, 5, 10)
    drops = [name for name, m in net.named_modules() if isinstance(m, nn.Dropout)]
    assert drops == ["head_dropout"]


def test_weak_labels_use_the_raw_output_and_the_floor_only_on_tu():
    from ablate.data import load_graphsets
    from ablate.trial.batches import collate
    from ablate.trial.weak import leave_one_out_batch

    splits = load_graphsets("digits_sp", n_train=30, n_val=10, n_test=10)
    cfg = resolve(TrialConfig(dataset="digits_sp", backbone="gin", pool_layers=()))
    torch.manual_seed(0)
    net = GraphNet(cfg, splits["train"].num_features, 10).eval()
    b = collate(splits["val"])
    with torch.no_grad():
        logit = leave_one_out_batch(net, b)  # default: raw output at the predicted class
        prob = leave_one_out_batch(net, b, target="prob")
        from ablate.models.layers import Graph

        out = net(b.x, Graph(b.A, b.mask)).out
        cls = out.argmax(-1)
        g, i = 0, 0  # by hand: graph 0 without node 0
        mask = b.mask[g:g + 1].clone()
        mask[0, i] = False
        x = b.x[g:g + 1] * mask.unsqueeze(-1)
        o = net(x, Graph(b.A[g:g + 1], mask)).out
    assert logit[g, i].item() == pytest.approx(abs(o[0, cls[g]] - out[g, cls[g]]).item(), rel=1e-3, abs=1e-6)
    assert not torch.allclose(logit, prob)
    assert weak_floor(resolve(TrialConfig(dataset="proteins", backbone="gcn"))) == 1e-3
    assert weak_floor(resolve(TrialConfig(dataset="colors"))) == 0.0


def test_pooled_auc_pools_every_test_graph_of_a_seed():
    t = torch.tensor
    # per split every graph ranks perfectly, but pooled the scores interleave
    recs = [{"split": "val", "_attention": [(t([0.9, 0.1]), t([1.0, 0.0]))]},
            {"split": "test_orig", "_attention": [(t([0.9, 0.8]), t([1.0, 0.0]))]},
            {"split": "test_large", "_attention": [(t([0.7, 0.1]), t([1.0, 0.0]))]},
            {"split": "test_largec", "_attention": [(t([0.3, 0.2]), t([1.0, 0.0]))]}]
    pool_test_auc(recs, "colors")
    # positives 0.9, 0.7, 0.3 vs negatives 0.8, 0.1, 0.2: 7 of 9 pairs ordered
    assert all(r["attn_auc_pooled_l0"] == pytest.approx(7 / 9) for r in recs)
    assert all("_attention" not in r for r in recs)


def test_fc_hidden_scorer_draws_its_first_layer_as_the_reference():
    """The reference (attention_pooling.py; main.py's default scale 1) draws the first weight
    matrix of the attention scorer from N(0, 1) * scale for a plain projection and for one with
    a hidden layer (32 units) alike; only the GNN scorer keeps the framework init."""
    cfg = resolve(TrialConfig(dataset="colors", backbone="gin", scorer="fc_hidden"))
    assert cfg.init_dist == "normal" and cfg.init_scale == 1.0
    w = []
    for scale in (1.0, 3.0):
        torch.manual_seed(0)
        net = GraphNet(cfg.replace(init_scale=scale), 4, 1)
        w.append(net.pools["1"].p.detach())
    assert w[0].shape == (32, 4)
    assert w[0].abs().max() > 1 / math.sqrt(4)  # outside nn.Linear's default bound
    torch.testing.assert_close(w[1], 3.0 * w[0])  # the scale multiplies the N(0, 1) draw
    assert abs(float(w[0].std()) - 1.0) < 0.3 and float(w[0].mean()) == pytest.approx(0, abs=0.4)
    plain = resolve(TrialConfig(dataset="colors", backbone="gin"))
    assert plain.scorer == "fc" and plain.init_dist == "normal"
    gnn = resolve(TrialConfig(dataset="colors", backbone="gin", scorer="gnn"))
    assert gnn.init_dist == "default"
    # the framework init stays one setting away
    kept = resolve(TrialConfig(dataset="colors", backbone="gin", scorer="fc_hidden",
                               init_dist="default"))
    torch.manual_seed(0)
    w = GraphNet(kept, 4, 1).pools["1"].p
    assert w.abs().max() <= 1 / math.sqrt(4) + 1e-6


def test_fc_hidden_init_change_renames_only_the_trials_it_changes():
    """Ids computed before fc_hidden followed the reference's init (commit 8a8a43b)."""
    from ablate.data import dataset_recipe_hash

    def _id(**kw):
        kw.setdefault("lr_timing", "early")  # the LR timing of then (issue 41)
        c = resolve(TrialConfig(**kw))
        return trial_id(c, dataset_recipe_hash(c.dataset, dict(c.data_params)))

    # fc_hidden with init_dist unset used the framework init: it trains again under a new id,
    # the same id as an explicit init_dist=normal trial (the same model)
    assert _id(scorer="fc_hidden") != "aa4480712de1"
    assert _id(scorer="fc_hidden") == _id(scorer="fc_hidden", init_dist="normal") == "0d1e4c0a3062"
    # every other trial keeps its id, and the old fc_hidden trial its meaning under init_dist=default
    assert _id(scorer="fc_hidden", init_dist="default") == "aa4480712de1"
    assert _id(scorer="fc_hidden", init_dist="uniform", init_scale=0.5) == "d542a3bff8a6"
    assert _id() == "702c6fc188b1"
    assert _id(supervision="sup", scorer="gnn") == "a20cbef5f41d"


def test_trials_end_to_end_record_pooled_auc():
    from ablate.trial.graph import run_trial

    recs = run_trial(TrialConfig(dataset="colors", backbone="chebygin_ref", supervision="sup",
                                 epochs=1, data_params=TINY, device="cpu"))
    vals = {r["attn_auc_pooled_l0"] for r in recs}
    assert len(vals) == 1 and 0 <= vals.pop() <= 1
