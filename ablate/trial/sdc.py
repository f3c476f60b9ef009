"""Selective-dependence classification (SDC) trials: config, training, evaluation, records.

The second paper of the study (Pandey, Vashisht & Ramaswamy, "On the
Interpretability of Attention Networks"; SPEC §1): a focus-classify model
(`ablate.models.focus.FocusClassify`) learns to classify mosaics whose label
depends on one unknown foreground segment. `SDCConfig` holds one trial (one
field, one comment; `None` = the task's default recipe, `resolve`),
`validate` rejects bad values with a `ConfigError` naming the valid choices,
and `run_sdc_trial_full(cfg)` trains every seed and returns a
`TrialResult`: one record per (seed, evaluated split) with every config field
as a column, the metrics accuracy, FT, NNZ, Dist, Ent and the curve of
attention mass on the true foreground, and per-epoch curves of the four
fractions FTPT / FFPT / FTPF / FFPF (focus true/false x prediction
true/false, on the training mosaics) with the training loss and val accuracy.

The foreground index never reaches training: the trainer feeds the model from
`SDCData.splits` (inputs, labels) and reads `SDCData.fg_index` only to score.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import torch

from ablate.data.cache import recipe_hash
from ablate.data.sdc import SPLITS, TASKS, Mosaics, SDCData, load_sdc, resolve_params
from ablate.errors import ConfigError, choice_error
from ablate.models.focus import AVERAGE_AT, FOCUS_NORMALIZERS, FocusClassify
from ablate.trial import metrics
from ablate.trial.graph import MASS_THRESHOLDS, TrialResult, pick_device

DEVICES = ("auto", "cpu", "cuda")

# Default recipe per task (fields left as None in SDCConfig). The 2-D set-ups use a
# linear focus net (and a linear classifier, except k = 6: one hidden layer = 2-layer g).
_RECIPES: dict[str, dict] = {
    "synthetic_linear": dict(focus_hidden=(), classify_hidden=(), epochs=300, lr=0.01,
                             batch_size=20),
    "synthetic_nonlinear": dict(focus_hidden=(), classify_hidden=(), epochs=300, lr=0.01,
                                batch_size=20),
    "synthetic_k6": dict(focus_hidden=(), classify_hidden=(32,), epochs=300, lr=0.01,
                         batch_size=20),
    "digits": dict(focus_hidden=(64, 64), classify_hidden=(64,), epochs=30, lr=1e-3,
                   batch_size=64),
    "cifar": dict(focus_hidden=(512, 128), classify_hidden=(256,), epochs=30, lr=1e-3,
                  batch_size=128),
}


@dataclass(frozen=True)
class SDCConfig:
    """One SDC trial. `None` fields take the task's default recipe (`resolve`)."""

    study: str = "adhoc"  # study name (result store folder)
    task: str = "digits"  # synthetic_linear, synthetic_nonlinear, synthetic_k6, digits, cifar
    data_params: tuple = ()  # sorted (key, value) overrides of the task's generator (sizes, seed, path)
    normalizer: str = "softmax"  # softmax, softmax_entropy, sparsemax, spherical, hard
    entropy_lambda: float = 0.01  # weight of H(alpha) in the loss (softmax_entropy only)
    average_at: str = "input"  # g reads sum_j alpha_j x_j (input) or sum_j alpha_j h_j (hidden)
    focus_hidden: tuple[int, ...] | None = None  # hidden widths of the focus net f; () = linear
    classify_hidden: tuple[int, ...] | None = None  # hidden widths of the classifier g; () = linear
    epochs: int | None = None  # training epochs
    lr: float | None = None  # Adam learning rate
    weight_decay: float = 0.0  # Adam weight decay
    batch_size: int | None = None  # training mosaics per step
    test_batch_size: int = 2000  # mosaics per evaluation batch (speed only)
    seeds: tuple[int, ...] = (0,)  # model-initialisation seeds trained by this trial
    eval_splits: tuple[str, ...] = ("val", "test_orig")  # splits with a record each (+ "train")
    eval_every: int = 0  # curve point every this many epochs; 0 = about 100 points
    device: str = "auto"  # auto (CUDA if present), cpu or cuda

    def replace(self, **changes) -> SDCConfig:
        return dataclasses.replace(self, **changes)

    @property
    def data_kwargs(self) -> dict:
        return dict(self.data_params)

    @property
    def dataset(self) -> str:
        """The dataset column of the result store."""
        return "sdc_" + self.task


def validate_choices(cfg: SDCConfig) -> None:
    """Reject categorical values outside their valid sets (ConfigError names the choices)."""
    for name, choices in [("task", TASKS), ("normalizer", FOCUS_NORMALIZERS),
                          ("average_at", AVERAGE_AT), ("device", DEVICES)]:
        if getattr(cfg, name) not in choices:
            raise choice_error(name, getattr(cfg, name), choices)
    for split in cfg.eval_splits:
        if split not in SPLITS:
            raise choice_error("eval split", split, SPLITS)


def resolve(cfg: SDCConfig) -> SDCConfig:
    """Fill every `None` field from the task's recipe and validate the result."""
    validate_choices(cfg)
    r = _RECIPES[cfg.task]
    out = cfg.replace(
        focus_hidden=tuple(int(w) for w in (cfg.focus_hidden if cfg.focus_hidden is not None
                                             else r["focus_hidden"])),
        classify_hidden=tuple(int(w) for w in (cfg.classify_hidden
                                               if cfg.classify_hidden is not None
                                               else r["classify_hidden"])),
        epochs=int(cfg.epochs if cfg.epochs is not None else r["epochs"]),
        lr=float(cfg.lr if cfg.lr is not None else r["lr"]),
        batch_size=int(cfg.batch_size if cfg.batch_size is not None else r["batch_size"]),
        seeds=tuple(int(s) for s in cfg.seeds),
        eval_splits=tuple(cfg.eval_splits),
        data_params=tuple(sorted(dict(cfg.data_params).items())),
    )
    validate(out)
    return out


def validate(cfg: SDCConfig) -> None:
    """Check a resolved config; raise `ConfigError` with one line naming the bad value."""
    validate_choices(cfg)
    resolve_params(cfg.task, cfg.data_kwargs)  # unknown data parameters
    if cfg.average_at == "hidden" and not cfg.focus_hidden:
        raise ConfigError("average_at=hidden needs a focus net with a hidden layer: set "
                          "focus_hidden (the synthetic tasks default to a linear focus net)")
    if any(w < 1 for w in (*cfg.focus_hidden, *cfg.classify_hidden)):
        raise ConfigError("focus_hidden and classify_hidden must be positive widths, got "
                          f"{cfg.focus_hidden} / {cfg.classify_hidden}")
    if cfg.epochs < 1 or cfg.batch_size < 1 or cfg.test_batch_size < 1:
        raise ConfigError("epochs, batch_size and test_batch_size must be >= 1")
    if not cfg.lr > 0 or cfg.weight_decay < 0:
        raise ConfigError(f"lr must be > 0 and weight_decay >= 0, got {cfg.lr}, "
                          f"{cfg.weight_decay}")
    if not cfg.entropy_lambda >= 0:
        raise ConfigError(f"entropy_lambda must be >= 0, got {cfg.entropy_lambda}")
    if not cfg.seeds:
        raise ConfigError("seeds must name at least one seed")
    if not cfg.eval_splits:
        raise ConfigError(f"eval_splits must name at least one of {', '.join(SPLITS)}")


def axes(cfg: SDCConfig) -> dict:
    """The config as flat, Parquet-friendly columns (tuples become comma strings)."""
    out: dict = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if f.name == "data_params":
            v = json.dumps(dict(v), sort_keys=True, default=str)
        elif isinstance(v, tuple):
            v = ",".join(str(x) for x in v)
        out[f.name] = v
    out["dataset"] = cfg.dataset
    return out


def data_hash(cfg: SDCConfig) -> str:
    """Hash of the fully resolved data recipe (path left out: where data lives is not what it is)."""
    params = {k: v for k, v in resolve_params(cfg.task, cfg.data_kwargs).items() if k != "path"}
    return recipe_hash(cfg.dataset, {k: list(v) if isinstance(v, tuple) else v
                                     for k, v in params.items()})


@functools.lru_cache(maxsize=4)
def _load(task: str, params_json: str) -> SDCData:
    return load_sdc(task, **json.loads(params_json))


def load_data(cfg: SDCConfig) -> SDCData:
    """The trial's data, generated once per process and recipe."""
    return _load(cfg.task, json.dumps(cfg.data_kwargs, sort_keys=True))


# --------------------------------------------------------------------------------------------
# Training and evaluation


def _as_float(x: torch.Tensor) -> torch.Tensor:
    """Segments as float: uint8 pixels (CIFAR) are scaled to [0, 1]."""
    return x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()


def build_model(cfg: SDCConfig, data: SDCData) -> FocusClassify:
    """The focus-classify model of a resolved config for `data`'s segment size and classes."""
    return FocusClassify(data.d, data.n_classes, cfg.focus_hidden, cfg.classify_hidden,
                         cfg.normalizer, cfg.average_at)


@torch.no_grad()
def predict(model: FocusClassify, mos: Mosaics, batch_size: int,
            device: torch.device) -> tuple[np.ndarray, np.ndarray, float]:
    """(predicted labels (M,), alpha (M, m), mean CE loss) of `model` (eval mode) on `mos`."""
    model.eval()
    x, y = torch.from_numpy(mos.x), torch.from_numpy(mos.y)
    preds, alphas, loss = [], [], 0.0
    for i in range(0, len(y), batch_size):
        xb = _as_float(x[i:i + batch_size].to(device))
        yb = y[i:i + batch_size].to(device)
        out = model(xb)
        loss += float(torch.nn.functional.cross_entropy(out.logits, yb, reduction="sum"))
        preds.append(out.logits.argmax(-1).cpu().numpy())
        alphas.append(out.alpha.cpu().numpy())
    m = mos.x.shape[1]
    return (np.concatenate(preds) if preds else np.zeros(0, np.int64),
            np.concatenate(alphas) if alphas else np.zeros((0, m), np.float32),
            loss / max(len(y), 1))


def focus_prediction_fractions(alpha: np.ndarray, fg_index: np.ndarray, pred: np.ndarray,
                               y: np.ndarray) -> dict[str, float]:
    """FTPT, FFPT, FTPF, FFPF: fractions of mosaics by focus true/false x prediction true/false.

    Focus is true when the arg-max of alpha is the foreground segment (Pandey et al.).
    """
    ft = alpha.argmax(-1) == fg_index
    pt = pred == y
    n = max(len(y), 1)
    return {"ftpt": float((ft & pt).sum() / n), "ffpt": float((~ft & pt).sum() / n),
            "ftpf": float((ft & ~pt).sum() / n), "ffpf": float((~ft & ~pt).sum() / n)}


def attention_metrics(alpha: np.ndarray, fg_index: np.ndarray) -> dict:
    """FT, NNZ, Dist, Ent (SPEC §1) and the foreground-mass curve of alpha (M, m)."""
    n, m = alpha.shape
    gt = np.zeros((n, m), np.float32)
    gt[np.arange(n), fg_index] = 1.0
    mask = np.ones((n, m), bool)
    hit, total = metrics.focus_true(alpha, gt, mask)
    mass = metrics.gt_mass(alpha, gt, mask)  # (M,) alpha on the true foreground
    return {
        "ft": hit / total if total else math.nan,
        "nnz": metrics.nnz(alpha, mask),
        "dist": metrics.dist_to_onehot(alpha, mask),
        "ent": metrics.entropy(alpha, mask),
        "gt_mass_curve": json.dumps({str(t): float((mass >= t).mean()) if n else math.nan
                                     for t in MASS_THRESHOLDS}),
    }


def evaluate(model: FocusClassify, mos: Mosaics, fg_index: np.ndarray, cfg: SDCConfig,
             device: torch.device) -> dict:
    """Accuracy, loss, FT, NNZ, Dist, Ent, mass curve and the four fractions on one split."""
    pred, alpha, loss = predict(model, mos, cfg.test_batch_size, device)
    rec = {"accuracy": metrics.accuracy(pred, mos.y), "loss": loss, "n_mosaics": len(mos)}
    rec.update(attention_metrics(alpha, fg_index))
    rec.update(focus_prediction_fractions(alpha, fg_index, pred, mos.y))
    return rec


class NaNLoss(RuntimeError):
    """Training produced a non-finite loss."""


def fit(model: FocusClassify, cfg: SDCConfig, train: Mosaics, seed: int, device: torch.device,
        on_epoch=None) -> float:
    """Adam on the focus-classify loss for cfg.epochs; `on_epoch(epoch, mean_loss)`; seconds.

    Only `train.x` and `train.y` are used: the foreground index is not an argument.
    """
    t0 = time.perf_counter()
    # the fused kernel is faster per step on CPU for these tiny models (as in ablate.trial.graph)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                           fused=device.type in ("cpu", "cuda"))
    gen = torch.Generator().manual_seed(seed)
    x = torch.from_numpy(train.x)
    x = x.to(device) if x.dtype == torch.uint8 else _as_float(x).to(device)
    y = torch.from_numpy(train.y).to(device)
    lam = cfg.entropy_lambda
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        total = torch.zeros((), device=device)
        for idx in torch.randperm(len(y), generator=gen).split(cfg.batch_size):
            idx = idx.to(device)
            xb, yb = _as_float(x[idx]), y[idx]
            loss = model.loss(model(xb), yb, lam)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach() * len(idx)
        mean = float(total) / max(len(y), 1)
        if not math.isfinite(mean):
            raise NaNLoss(f"non-finite training loss at epoch {epoch}")
        if on_epoch is not None:
            on_epoch(epoch, mean)
    return time.perf_counter() - t0


def run_seed(cfg: SDCConfig, data: SDCData, seed: int, device: torch.device) -> TrialResult:
    """Train and evaluate one seed of a resolved config."""
    torch.manual_seed(seed)
    model = build_model(cfg, data).to(device)
    every = cfg.eval_every or max(1, cfg.epochs // 100)
    curves: list[dict] = []
    train, fg_train = data.splits["train"], data.fg_index["train"]

    def on_epoch(epoch: int, loss: float) -> None:
        if epoch % every and epoch != cfg.epochs and epoch != 1:
            return
        pred, alpha, _ = predict(model, train, cfg.test_batch_size, device)
        vpred, valpha, _ = predict(model, data.val, cfg.test_batch_size, device)
        curves.append({"seed": seed, "epoch": epoch, "train_loss": loss,
                       **focus_prediction_fractions(alpha, fg_train, pred, train.y),
                       "train_accuracy": metrics.accuracy(pred, train.y),
                       "val_accuracy": metrics.accuracy(vpred, data.val.y),
                       "val_ft": attention_metrics(valpha, data.fg_index["val"])["ft"]})

    train_s = fit(model, cfg, train, seed, device, on_epoch)
    records = []
    for split in cfg.eval_splits:
        t0 = time.perf_counter()
        rec = evaluate(model, data.splits[split], data.fg_index[split], cfg, device)
        rec.update(seed=seed, split=split, status="ok", error="", train_s=train_s,
                   eval_s=time.perf_counter() - t0, device=str(device))
        records.append(rec)
    return TrialResult(records, curves)


def _provenance(cfg: SDCConfig) -> dict:
    from ablate.trial.graph import _git_sha

    return {"dataset_hash": data_hash(cfg), "torch_version": torch.__version__,
            "host": os.uname().nodename, "git_sha": _git_sha()}


def run_sdc_trial_full(config: SDCConfig) -> TrialResult:
    """Every seed of `config`: records per (seed, split) and per-epoch curves."""
    cfg = resolve(config)
    torch.set_flush_denormal(True)  # denormals slow CPU training (SPEC pitfalls)
    data = load_data(cfg)
    device = pick_device(cfg.device)
    common = {**axes(cfg), **_provenance(cfg)}
    out = TrialResult()
    for seed in cfg.seeds:
        try:
            res = run_seed(cfg, data, seed, device)
        except NaNLoss as e:
            res = TrialResult([{"seed": seed, "split": s, "status": "nan", "error": str(e)}
                               for s in cfg.eval_splits], [])
        out.records.extend({**common, **r} for r in res.records)
        out.curves.extend(res.curves)
    return out


def run_sdc_trial(config: SDCConfig) -> list[dict]:
    """Train and evaluate `config` for each of its seeds; one record per (seed, split)."""
    return run_sdc_trial_full(config).records
