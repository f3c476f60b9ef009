"""Tests of selective-dependence classification (SPEC §1, second paper): data, model, metrics, trial.

Normalisers and metrics are checked on hand-computed vectors; the generator is
checked against Algorithm 1 by matching segments back to their source images;
training is shown not to depend on the foreground index at all.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import os
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ablate.data import sdc as sdc_data
from ablate.errors import ConfigError
from ablate.models.focus import FocusClassify, attention_entropy
from ablate.models.normalizers import sparsemax, spherical_softmax
from ablate.trial.metrics import MASS_THRESHOLDS
from ablate.trial.sdc import (
    SDCConfig,
    attention_metrics,
    fit,
    focus_prediction_fractions,
    resolve,
    run_sdc_trial_full,
    run_seed,
)

SMALL_DIGITS = (("n_test", 60), ("n_train", 120), ("n_val", 40))


# --------------------------------------------------------------------------------------------
# Normalisers (shared with graph attention pooling)


def _ones(z: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(z, dtype=torch.bool)


@pytest.mark.parametrize("z, expected", [
    ([1.0, 0.5, -1.0], [0.75, 0.25, 0.0]),  # support 2, tau = 0.25
    ([3.0, 1.0, 0.0], [1.0, 0.0, 0.0]),  # support 1, tau = 2
    ([0.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3]),  # ties: uniform
    ([0.3, 0.1, 0.2, -5.0], [0.3 + 2 / 15, 0.1 + 2 / 15, 0.2 + 2 / 15, 0.0]),  # tau = -2/15
])
def test_sparsemax_hand_checked(z: list[float], expected: list[float]) -> None:
    zt = torch.tensor([z])
    alpha = sparsemax(zt, _ones(zt))[0]
    assert torch.allclose(alpha, torch.tensor(expected), atol=1e-6)
    assert math.isclose(float(alpha.sum()), 1.0, abs_tol=1e-6)
    for a, e in zip(alpha.tolist(), expected):
        if e == 0.0:
            assert a == 0.0  # exact zeros, not merely small


def test_sparsemax_respects_mask() -> None:
    z = torch.tensor([[0.2, 0.1, 9.0]])
    mask = torch.tensor([[True, True, False]])
    alpha = sparsemax(z, mask)[0]  # tau = (0.3 - 1) / 2 = -0.35
    assert torch.allclose(alpha, torch.tensor([0.55, 0.45, 0.0]), atol=1e-6)
    assert float(alpha[2]) == 0.0


def test_spherical_softmax_definition() -> None:
    z = torch.tensor([[1.0, 2.0, -2.0], [0.5, 0.0, 0.0]])
    alpha = spherical_softmax(z, _ones(z))
    assert torch.allclose(alpha[0], torch.tensor([1 / 9, 4 / 9, 4 / 9]), atol=1e-6)
    assert torch.allclose(alpha[1], torch.tensor([1.0, 0.0, 0.0]), atol=1e-6)
    assert torch.allclose(alpha.sum(-1), torch.ones(2))


# --------------------------------------------------------------------------------------------
# FT / NNZ / Dist / Ent and the four fractions


def test_attention_metrics_hand_made() -> None:
    alpha = np.array([[1.0, 0.0, 0.0],  # focus on 0 = fg: FT; NNZ 1/3; Dist 0; Ent 0
                      [0.5, 0.5 - 0.005, 0.005],  # fg 2: miss; NNZ 2/3 (0.005 <= 0.01)
                      [0.2, 0.7, 0.1]])  # fg 1: FT; NNZ 1
    fg = np.array([0, 2, 1])
    rec = attention_metrics(alpha, fg)
    assert rec["ft"] == pytest.approx(2 / 3)
    assert rec["nnz"] == pytest.approx((1 / 3 + 2 / 3 + 1) / 3)
    d2 = math.sqrt(0.5 ** 2 + 0.495 ** 2 + 0.005 ** 2)  # nearest one-hot e_0
    d3 = math.sqrt(0.2 ** 2 + 0.3 ** 2 + 0.1 ** 2)  # nearest one-hot e_1
    assert rec["dist"] == pytest.approx((0 + d2 + d3) / 3)

    def h(p: list[float]) -> float:
        return -sum(x * math.log(x) for x in p if x > 0)

    assert rec["ent"] == pytest.approx((0 + h([0.5, 0.495, 0.005]) + h([0.2, 0.7, 0.1])) / 3)
    curve = {p["t"]: p["fraction"] for p in rec["gt_mass_curve"]}  # fg alpha: 1.0, 0.005, 0.7
    assert list(curve) == list(MASS_THRESHOLDS)
    assert curve[0.05] == pytest.approx(2 / 3) and curve[0.75] == pytest.approx(1 / 3)
    fr = focus_prediction_fractions(alpha, fg, pred=np.array([1, 1, 1]), y=np.array([1, 0, 0]))
    assert fr == pytest.approx({"ftpt": 1 / 3, "ffpt": 0.0, "ftpf": 1 / 3, "ffpf": 1 / 3})


def test_entropy_regulariser_matches_metric() -> None:
    alpha = torch.tensor([[0.2, 0.7, 0.1], [1.0, 0.0, 0.0]])
    assert float(attention_entropy(alpha)) == pytest.approx(
        attention_metrics(alpha.numpy(), np.array([0, 0]))["ent"], abs=1e-6)


# --------------------------------------------------------------------------------------------
# Generator (Algorithm 1)


def test_mosaics_keep_fg_index_apart() -> None:
    data = sdc_data.load_sdc("synthetic_nonlinear", n_train=50, n_val=20, n_test=20)
    assert [f.name for f in dataclasses.fields(sdc_data.Mosaics)] == ["x", "y"]
    for split, mos in data.splits.items():
        assert mos.x.shape == (len(mos), 9, 2) and mos.y.dtype == np.int64
        assert data.fg_index[split].shape == (len(mos),)
    # the trainer's only entry to the training data takes inputs and labels, no index
    assert "fg_index" not in inspect.signature(fit).parameters
    assert data.m == 9 and data.d == 2 and data.n_classes == 3


def test_training_is_independent_of_fg_index() -> None:
    """Scrambling the foreground index changes FT but not one bit of training."""
    cfg = resolve(SDCConfig(task="synthetic_k6", epochs=3, eval_splits=("val",),
                            data_params=(("n_train", 64), ("n_val", 32), ("n_test", 8))))
    data = sdc_data.load_sdc("synthetic_k6", **cfg.data_kwargs)
    rng = np.random.default_rng(0)
    fake = dataclasses.replace(data, fg_index={s: rng.integers(0, data.m, len(v))
                                               for s, v in data.fg_index.items()})
    a = run_seed(cfg, data, 0, torch.device("cpu"))
    b = run_seed(cfg, fake, 0, torch.device("cpu"))
    assert [c["train_loss"] for c in a.curves] == [c["train_loss"] for c in b.curves]
    assert a.records[0]["accuracy"] == b.records[0]["accuracy"]
    assert a.records[0]["loss"] == b.records[0]["loss"]
    assert a.records[0]["ft"] != b.records[0]["ft"]


def test_digit_mosaics_follow_algorithm_1() -> None:
    from sklearn.datasets import load_digits

    d = load_digits()
    lookup = {row.tobytes(): int(t) for row, t in zip((d.data / 16.0).astype(np.float32),
                                                       d.target)}
    data = sdc_data.load_sdc("digits", **dict(SMALL_DIGITS))
    assert data.d == 64 and data.n_classes == 3
    for split, mos in data.splits.items():
        fg = data.fg_index[split]
        classes = np.array([[lookup[s.tobytes()] for s in mosaic] for mosaic in mos.x])
        assert (classes[np.arange(len(mos)), fg] == mos.y).all()  # foreground from D_y
        bg = np.ones_like(classes, bool)
        bg[np.arange(len(mos)), fg] = False
        assert (classes[bg] >= 3).all()  # background digits 3-9 only
    # disjoint image pools: no image in two splits
    pools = {s: {seg.tobytes() for mosaic in m.x for seg in mosaic}
             for s, m in data.splits.items()}
    assert not pools["train"] & pools["test_orig"] and not pools["train"] & pools["val"]


def test_synthetic_foreground_is_drawn_from_its_class() -> None:
    data = sdc_data.load_sdc("synthetic_k6", n_train=100)
    base = sdc_data.synthetic_base("synthetic_k6")
    mos, fg = data.train, data.fg_index["train"]
    seg = mos.x[np.arange(len(mos)), fg]  # (M, 2)
    nearest = np.linalg.norm(seg[:, None] - base.fg_means[None], axis=-1).argmin(-1)
    assert (nearest == mos.y).all()
    assert np.bincount(fg, minlength=9).min() > 0  # every position is used


def test_generator_is_deterministic() -> None:
    a = sdc_data.load_sdc("digits", **dict(SMALL_DIGITS))
    b = sdc_data.load_sdc("digits", **dict(SMALL_DIGITS))
    c = sdc_data.load_sdc("digits", **dict(SMALL_DIGITS), seed=1)
    for s in sdc_data.SPLITS:
        assert np.array_equal(a.splits[s].x, b.splits[s].x)
        assert np.array_equal(a.fg_index[s], b.fg_index[s])
    assert not np.array_equal(a.train.x, c.train.x)


def _fake_cifar(folder, names=None) -> None:
    """CIFAR-10's python batches, 40 random images each, in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for name in names or sdc_data.CIFAR_BATCHES:
        batch = {b"data": rng.integers(0, 256, (40, 3072), dtype=np.uint8),
                 b"labels": list(np.arange(40) % 10)}
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f)


def test_cifar_from_local_pickles(tmp_path) -> None:
    with pytest.raises(ConfigError, match="data.path="):
        sdc_data.load_sdc("cifar")
    with pytest.raises(ConfigError, match="cifar-10-batches-py|data_batch"):
        sdc_data.load_sdc("cifar", path=str(tmp_path))
    with pytest.raises(ConfigError, match="does not exist"):
        sdc_data.load_sdc("cifar", path=str(tmp_path / "nowhere"))
    _fake_cifar(tmp_path / "half" / "cifar-10-batches-py", ["data_batch_1", "test_batch"])
    with pytest.raises(ConfigError, match="data_batch_2, data_batch_3, data_batch_4, data_batch_5 "
                                          "missing"):
        sdc_data.load_sdc("cifar", path=str(tmp_path / "half"))
    _fake_cifar(tmp_path / "cifar-10-batches-py")
    data = sdc_data.load_sdc("cifar", path=str(tmp_path), n_train=30, n_val=10, n_test=10,
                             n_val_images=50)
    assert data.train.x.shape == (30, 9, 3072) and data.train.x.dtype == np.uint8
    assert data.n_classes == 3


# --------------------------------------------------------------------------------------------
# Model


def test_hard_attention_train_loss_and_test_argmax() -> None:
    torch.manual_seed(0)
    model = FocusClassify(4, 3, focus_hidden=(8,), classify_hidden=(), normalizer="hard")
    x, y = torch.randn(5, 6, 4), torch.tensor([0, 1, 2, 0, 1])
    model.train()
    out = model(x)
    ce = torch.stack([F.cross_entropy(model.classifier(x[:, j]), y, reduction="none")
                      for j in range(6)], 1)  # (B, m)
    assert torch.allclose(model.loss(out, y), (out.alpha * ce).sum(-1).mean(), atol=1e-6)
    model.eval()
    out = model(x)
    pick = out.alpha.argmax(-1)
    assert torch.allclose(out.logits, model.classifier(x[torch.arange(5), pick]), atol=1e-6)


def test_hidden_averaging_and_entropy_loss() -> None:
    torch.manual_seed(0)
    model = FocusClassify(4, 3, focus_hidden=(8, 5), classify_hidden=(7,),
                          normalizer="softmax_entropy", average_at="hidden")
    x, y = torch.randn(5, 6, 4), torch.tensor([0, 1, 2, 0, 1])
    out = model(x)
    h = model.focus_body(x)  # (B, m, 5)
    avg = (out.alpha.unsqueeze(-1) * h).sum(1)
    assert torch.allclose(out.logits, model.classifier(avg), atol=1e-6)
    expected = F.cross_entropy(out.logits, y) + 0.3 * attention_entropy(out.alpha)
    assert torch.allclose(model.loss(out, y, 0.3), expected)


# --------------------------------------------------------------------------------------------
# Config and trial


@pytest.mark.parametrize("changes, match", [
    (dict(normalizer="relu"), "softmax, softmax_entropy, sparsemax, spherical, hard"),
    (dict(task="mnist"), "synthetic_linear"),
    (dict(average_at="output"), "input, hidden"),
    (dict(task="synthetic_linear", average_at="hidden"), "hidden layer"),
    (dict(data_params=(("n_trian", 5),)), "n_train"),
    (dict(eval_splits=("test",)), "test_orig"),
    (dict(epochs=0), "epochs"),
])
def test_validate_names_valid_choices(changes: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        resolve(SDCConfig(**changes))


def test_trial_records_and_curves() -> None:
    cfg = SDCConfig(study="t", task="digits", data_params=SMALL_DIGITS, normalizer="sparsemax",
                    average_at="hidden", epochs=2, seeds=(0, 1), device="cpu")
    res = run_sdc_trial_full(cfg)
    assert [(r["seed"], r["split"]) for r in res.records] == [
        (0, "val"), (0, "test_orig"), (1, "val"), (1, "test_orig")]
    r = res.records[0]
    assert r["dataset"] == "sdc_digits" and r["status"] == "ok" and r["error"] == ""
    for f in dataclasses.fields(SDCConfig):
        assert f.name in r
    assert r["focus_hidden"] == "64,64" and r["seeds"] == "0,1"
    assert json.loads(r["data_params"]) == dict(SMALL_DIGITS)
    for key in ("accuracy", "ft", "nnz", "dist", "ent", "train_s", "eval_s"):
        assert isinstance(r[key], float) and math.isfinite(r[key])
    assert len(r["gt_mass_curve"]) == 19
    assert {c["epoch"] for c in res.curves if c["seed"] == 0} == {1, 2}
    c = res.curves[-1]
    assert c["ftpt"] + c["ffpt"] + c["ftpf"] + c["ffpf"] == pytest.approx(1.0)
    for key in ("train_loss", "val_accuracy"):
        assert key in c
    again = run_sdc_trial_full(cfg)  # deterministic given the seeds
    assert [x["accuracy"] for x in again.records] == [x["accuracy"] for x in res.records]
    assert [x["ft"] for x in again.records] == [x["ft"] for x in res.records]


def test_short_training_reaches_high_accuracy_with_low_focus() -> None:
    """k = 6 error mode: ~100% accuracy while the focus net finds the foreground ~half the time."""
    torch.set_num_threads(1)
    res = run_sdc_trial_full(SDCConfig(task="synthetic_k6", epochs=150, seeds=(0,),
                                       eval_splits=("test_orig",), device="cpu"))
    rec = res.records[0]
    assert rec["accuracy"] >= 0.95
    assert rec["ft"] < rec["accuracy"] - 0.2


def test_study_file_expands(monkeypatch) -> None:
    from ablate.runner.study import expand

    s, _ = expand.build_study("sdc")
    cfgs = [t.config for t in s.trials]
    assert len(cfgs) == 5 * 5 * 5 and len({t.trial_id for t in s.trials}) == len(cfgs)
    assert {c.normalizer for c in cfgs} == {"softmax", "softmax_entropy", "sparsemax",
                                            "spherical", "hard"}
    assert {(c.task, c.average_at) for c in cfgs} == {
        ("digits", "input"), ("digits", "hidden"), ("synthetic_linear", "input"),
        ("synthetic_nonlinear", "input"), ("synthetic_k6", "input")}
    assert len({c.seeds for c in cfgs}) >= 3


def test_a_failed_sdc_trials_rows_carry_every_column_the_analysis_needs(tmp_path) -> None:
    """The runner writes a failed trial's rows from its kind's columns ('dataset' included,
    which `analysis.load` requires of every trial file)."""
    from ablate.runner.execute.store import Store
    from ablate.runner.execute.tune_callback import StoreCallback
    from ablate.runner.study.expand import build_study
    from analysis.load import load_study

    s, _ = build_study("sdc", ["task=digits", "seed=0"])
    t = s.trials[0]
    store = Store(tmp_path, "sdc")
    cb = StoreCallback(store, {t.trial_id: t}, {}, None, {})
    rows = cb.error_rows(t.trial_id, "error", "RuntimeError: boom")
    store.write(t.trial_id, rows, kind="sdc")
    df = load_study("sdc", tmp_path / "sdc").trials  # refuses files without 'dataset'
    assert set(df["status"]) == {"error"} and set(df["dataset"]) == {t.config.dataset}
    # the driver's provenance, by the one rule every trial row follows (issue 42 item 8)
    from ablate.runner.study.kinds import trial_kind
    from ablate.trial.provenance import git_dirty, git_sha

    assert set(df["git_sha"]) == {git_sha()} and set(df["git_dirty"]) == {git_dirty()}
    assert {r["host"] for r in rows} == {os.uname().nodename}  # stored, not read by the analysis
    assert {k for r in rows for k in r} == {*trial_kind("sdc").columns(t.config), "git_sha",
                                            "git_dirty", "host", "seed", "split", "status", "error"}


@pytest.mark.parametrize("path", [None, "nowhere", "empty"])
@pytest.mark.parametrize("dry_run", [True, False])
def test_a_cifar_study_without_its_files_is_refused_before_ray(path, dry_run, tmp_path, capsys):
    """study=sdc task=cifar reads a local folder in every trial: a missing or empty one is one
    line, exit 2, before Ray, in a run as in its dry run (a run went on to record every trial
    as failed on it, 50 failed trials), and nothing is written to the store. With the files
    there, the dry run passes."""
    import ray

    from ablate.run import main

    (tmp_path / "empty").mkdir()
    args = ["study=sdc", "task=cifar", "seed=0", f"results_dir={tmp_path / 'results'}"]
    args += [f"data.path={tmp_path / path}"] if path else []
    args += ["dry_run=true"] if dry_run else []
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and ("data.path" in err[-1] or "CIFAR-10" in err[-1])
    assert len([line for line in err if line.startswith("error")]) == 1
    assert not ray.is_initialized()
    assert not list((tmp_path / "results").rglob("*.parquet"))
    if path == "empty" and dry_run:
        _fake_cifar(tmp_path / "empty" / "cifar-10-batches-py")
        assert main(args) == 0, capsys.readouterr().err


def test_sdc_trial_ids_are_those_of_earlier_versions() -> None:
    """Stores written before the trial-kind interface keep their completed SDC trials."""
    from ablate.runner.study.expand import build_study

    s, _ = build_study("sdc", ["task=digits", "seed=0"])
    # computed by commit acfd8d0 (before ablate.trial.kind existed)
    assert sorted(t.trial_id for t in s.trials)[:3] == ["1a4672d9560f", "41a61337b811",
                                                       "489f20ed3910"]
