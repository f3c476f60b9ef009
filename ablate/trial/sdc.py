"""Selective-dependence classification (SDC) trials: config, training, evaluation, records.

The second paper of the study (Pandey, Vashisht & Ramaswamy, "On the
Interpretability of Attention Networks"; SPEC §1): a focus-classify model
(`ablate.models.focus.FocusClassify`) learns to classify mosaics whose label
depends on one unknown foreground segment. `SDCConfig` (`ablate.trial.sdc_config`)
holds one trial; `KIND` is the trial kind the runner uses; `run_sdc_trial_full(cfg)`
trains every seed and returns a `TrialResult`: one record per (seed, evaluated split) with every config field
as a column, the metrics accuracy, FT, NNZ, Dist, Ent and the curve of
attention mass on the true foreground, and per-epoch curves of the four
fractions FTPT / FFPT / FTPF / FFPF (focus true/false x prediction
true/false, on the training mosaics) with the training loss and val accuracy.

The foreground index never reaches training: the trainer feeds the model from
`SDCData.splits` (inputs, labels) and reads `SDCData.fg_index` only to score.
"""

from __future__ import annotations

import functools
import json
import math
import time

import numpy as np
import torch

from ablate.data.sdc import Mosaics, SDCData, load_sdc
from ablate.errors import NaNLoss
from ablate.models.focus import FocusClassify
from ablate.trial import metrics
from ablate.trial.epochs import report_epoch
from ablate.trial.kind import TrialKind, TrialResult, stable_hash
from ablate.trial.provenance import peak_gpu_mb, provenance, start_gpu_peak
from ablate.trial.sdc_config import SDCConfig, axes, data_hash, resolve
from ablate.trial.setup import pick_device, prepare_process, shuffler


@functools.lru_cache(maxsize=4)
def _load(task: str, params_json: str) -> SDCData:
    return load_sdc(task, **json.loads(params_json))


def load_data(cfg: SDCConfig) -> SDCData:
    """The trial's data, generated once per process and recipe."""
    return _load(cfg.task, json.dumps(cfg.data_kwargs, sort_keys=True))


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
        "gt_mass_curve": metrics.mass_curve(mass),
    }


def evaluate(model: FocusClassify, mos: Mosaics, fg_index: np.ndarray, cfg: SDCConfig,
             device: torch.device) -> dict:
    """Accuracy, loss, FT, NNZ, Dist, Ent, mass curve and the four fractions on one split."""
    pred, alpha, loss = predict(model, mos, cfg.test_batch_size, device)
    rec = {"accuracy": metrics.accuracy(pred, mos.y), "loss": loss, "n_mosaics": len(mos)}
    rec.update(attention_metrics(alpha, fg_index))
    rec.update(focus_prediction_fractions(alpha, fg_index, pred, mos.y))
    return rec


def fit(model: FocusClassify, cfg: SDCConfig, train: Mosaics, seed: int, device: torch.device,
        on_epoch=None) -> float:
    """Adam on the focus-classify loss for cfg.epochs; `on_epoch(epoch, mean_loss)`; seconds.

    Only `train.x` and `train.y` are used: the foreground index is not an argument.
    """
    t0 = time.perf_counter()
    # the fused kernel is faster per step on CPU for these tiny models (as in ablate.trial.graph)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                           fused=device.type in ("cpu", "cuda"))
    gen = shuffler(seed)
    x = torch.from_numpy(train.x)
    x = x.to(device) if x.dtype == torch.uint8 else _as_float(x).to(device)
    y = torch.from_numpy(train.y).to(device)
    lam = cfg.entropy_lambda
    report_epoch(0, cfg.epochs)
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
        report_epoch(epoch, cfg.epochs)
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


def run_sdc_trial_full(config: SDCConfig) -> TrialResult:
    """Every seed of `config`: records per (seed, split) and per-epoch curves."""
    cfg = resolve(config)
    prepare_process()  # flush denormals, keep freed tensors in the heap (as graph trials)
    data = load_data(cfg)
    device = pick_device(cfg.device)
    start_gpu_peak(device)
    common = {**axes(cfg), **provenance(data_hash(cfg), device)}
    out = TrialResult()
    for seed in cfg.seeds:
        try:
            res = run_seed(cfg, data, seed, device)
        except NaNLoss as e:
            res = TrialResult([{"seed": seed, "split": s, "status": "nan", "error": str(e)}
                               for s in cfg.eval_splits], [])
        out.records.extend({**common, **r} for r in res.records)
        out.curves.extend(res.curves)
    peak = peak_gpu_mb(device)
    for r in out.records:
        r["peak_gpu_mb"] = peak
    return out


def run_sdc_trial(config: SDCConfig) -> list[dict]:
    """Train and evaluate `config` for each of its seeds; one record per (seed, split)."""
    return run_sdc_trial_full(config).records


class SDCKind(TrialKind):
    """Selective-dependence classification trials (`SDCConfig`); data made per task, no cache."""

    name = "sdc"
    store_kind = "sdc"  # result_store.schema: the columns of its files
    config = SDCConfig
    datasets = False

    def resolve(self, cfg: SDCConfig) -> SDCConfig:
        return resolve(cfg)

    def columns(self, cfg: SDCConfig) -> dict:
        return axes(cfg)

    def trial_id(self, cfg: SDCConfig, data_hash: str | None) -> str:
        # the id of earlier versions (config fields without the derived 'dataset' column),
        # so stores written before keep their completed trials
        cols = {k: v for k, v in axes(cfg).items() if k not in (*self.execution_fields, "dataset")}
        return stable_hash({"kind": self.name, "cfg": cols})

    def check_files(self, cfg: SDCConfig) -> None:
        if cfg.task == "cifar":  # read from a local folder in every trial: nothing is downloaded
            from ablate.data.sdc import cifar_dir

            cifar_dir(cfg.data_kwargs.get("path"))

    def run(self, cfg: SDCConfig) -> TrialResult:
        return run_sdc_trial_full(cfg)


KIND = SDCKind()
