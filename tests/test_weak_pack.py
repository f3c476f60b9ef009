"""Weak supervision in a pack (ablate/trial/packed.py): every member's model B trained as one
pack, its alpha_WS computed for all members, each member trained on its own targets, and
the same numbers as `run_seed` seed by seed."""

import math

import numpy as np
import pytest
import torch
from _packs import tmp_cache  # noqa: F401 (autouse fixture)
from test_batched import _assert_matches, _sequential, tiny

from ablate.config import resolve
from ablate.data import load_graphsets
from ablate.trial import batches, pack_step
from ablate.trial import packed as batched
from ablate.trial.batches import TrainBatches
from ablate.trial.graph import run_trial_full
from ablate.trial.setup import model_sizes
from ablate.trial.weak import MODEL_B_SEED, model_b_config, weak_targets

CPU = torch.device("cpu")


def weak(**kw):
    return tiny(**{"supervision": "weak", "epochs": 3, **kw})


@pytest.mark.parametrize("step", ["eager", "replay"])
def test_weak_pack_equals_seed_by_seed(step):
    cfg = weak(step=step)
    r = resolve(cfg)
    assert batched.eligible(r) and batched.pack_key(r) is not None
    res = run_trial_full(cfg)
    assert {rec["batched_seeds"] for rec in res.records} == {3}
    _assert_matches(res, _sequential(cfg), r.seeds)  # records and curves, per seed


def test_weak_configs_share_a_pack_by_key():
    a = resolve(weak())
    same = [a.replace(threshold=0.1), a.replace(kl_weight=3.0), a.replace(seeds=(7,)),
            a.replace(init_dist="uniform", init_scale=0.1)]
    assert {batched.pack_key(c) for c in same} == {batched.pack_key(a)}
    other = [a.replace(supervision="sup"), a.replace(weak_target="prob"), a.replace(epochs=4)]
    assert batched.pack_key(a) not in {batched.pack_key(c) for c in other}
    # model B: the same config whichever path builds it
    b = model_b_config(a)
    assert (b.pool_layers, b.supervision, b.epochs) == ((), "unsup", 3)


def _member_targets(cfg):
    splits = load_graphsets(cfg.dataset, **cfg.data_kwargs)
    in_ch, out_ch = model_sizes(cfg, splits)
    train = TrainBatches(splits["train"], CPU)
    members = [batched.Member(cfg, s) for s in cfg.seeds]
    failed = batched._weak_member_targets(members, splits, train, CPU, in_ch, out_ch)
    return splits, train, failed, in_ch, out_ch


def test_each_member_gets_its_own_sequential_alpha_ws():
    cfg = resolve(weak(step="replay", threshold=0.1))
    splits, train, failed, in_ch, out_ch = _member_targets(cfg)
    assert not failed
    S = len(cfg.seeds)
    assert train.member_gt.shape == (S, *train.dense.gt.shape)
    per_member = train.member_gt[:, train.dense.mask]  # (S, total nodes), GraphSet order
    for s, seed in enumerate(cfg.seeds):
        seq = TrainBatches(splits["train"], CPU)
        weak_targets(cfg, splits, seq, seed, CPU, in_ch, out_ch)  # model B of seed + 7919
        torch.testing.assert_close(per_member[s], torch.from_numpy(seq.gs.gt),
                                   rtol=1e-4, atol=1e-5)
    for s in range(1, S):  # members' model B differ, so do their targets
        assert (per_member[s] - per_member[0]).abs().max() > 1e-3
    assert torch.equal(train.dense.gt, TrainBatches(splits["train"], CPU).dense.gt)  # shared gt kept
    # the step gathers each member's own targets; x, A, mask, y stay shared
    idx = torch.arange(8).repeat(S, 1)
    for static in (False, True):
        b = pack_step._gather(train, idx, static)
        n = b.x.shape[2]
        for s in range(S):
            torch.testing.assert_close(b.gt[s], train.member_gt[s, :8, :n])
            assert torch.equal(b.x[s], b.x[0]) and torch.equal(b.mask[s], b.mask[0])


def test_member_targets_on_lazily_collated_splits(monkeypatch):
    """A split too large to pre-collate gathers the same per-member targets from the host."""
    cfg = resolve(weak())
    gs = load_graphsets(cfg.dataset, **cfg.data_kwargs)["train"]
    dense = TrainBatches(gs, CPU)
    monkeypatch.setattr(batches, "PRECOLLATE_LIMIT", 0)
    lazy = TrainBatches(gs, CPU)
    assert lazy.dense is None
    rng = np.random.default_rng(0)
    gt = rng.random((3, len(gs.x)), dtype=np.float32)
    dense.set_member_gt(gt)
    lazy.set_member_gt(gt)
    idx = torch.from_numpy(rng.integers(0, len(gs), (3, 10)))
    for static in (False, True):
        a, b = pack_step._gather(dense, idx, static), pack_step._gather(lazy, idx, static)
        assert a.gt.shape == b.gt.shape
        assert torch.equal(a.gt, b.gt) and torch.equal(a.x, b.x)
    with pytest.raises(ValueError, match="members"):
        dense.set_member_gt(gt[:, :5])


def test_set_gt_rewrites_the_collated_buffer_in_place():
    cfg = resolve(weak())
    gs = load_graphsets(cfg.dataset, **cfg.data_kwargs)["train"]
    train = TrainBatches(gs, CPU)
    buf = train.dense.gt
    new = np.arange(len(gs.x), dtype=np.float32)
    train.set_gt(new)
    assert train.dense.gt is buf  # a captured step reads the same storage
    torch.testing.assert_close(buf[train.dense.mask], torch.from_numpy(new))
    assert float(buf[~train.dense.mask].abs().sum()) == 0


def test_a_member_whose_model_b_diverges_is_the_only_nan(monkeypatch):
    init = batched.MemberStack.__init__

    def poisoned(self, members, *a, **kw):
        init(self, members, *a, **kw)
        if members[0].seed >= MODEL_B_SEED:  # the model-B pack: its member 1 starts from NaN
            for v in self.params.values():
                v[1].fill_(math.nan)

    monkeypatch.setattr(batched.MemberStack, "__init__", poisoned)
    res = run_trial_full(weak(epochs=2))
    bad = [r for r in res.records if r["seed"] == 1]
    assert bad and all(r["status"] == "nan" and "epoch 1" in r["error"] for r in bad)
    assert all(r["status"] == "ok" and math.isfinite(r["loss"])
               for r in res.records if r["seed"] != 1)
    assert {c["seed"] for c in res.curves} == {0, 2}
