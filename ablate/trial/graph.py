"""One trial: fit the reference recipe for every seed, evaluate every split, return records.

`run_trial(config)` is the interface the study runner (and any script) uses:
one record per (seed, split) with the columns of the result store.
`run_trial_full` also returns the per-epoch curves. Training follows SPEC §3:
Adam (lr 1e-3, betas (0.5, 0.999), weight decay 1e-4), LR x0.1 at the
recipe's epochs, batch 32; weak supervision first trains a global-pool
model B and uses its leave-one-node-out attention as targets.
"""

from __future__ import annotations

import json
import math
import os
import resource
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ablate.config import TU_DATASETS, TrialConfig, axes, recipe, resolve
from ablate.data import GraphSet, dataset_recipe_hash, load_graphsets
from ablate.models.layers import Graph
from ablate.models.network import GraphNet
from ablate.models.pooling import cosine
from ablate.trial import metrics
from ablate.trial.batches import DenseBatch, TrainBatches, eval_batches
from ablate.trial.weak import leave_one_out_attention, leave_one_out_batch, weak_attention

SIZE_BINS = (1, 26, 51, 101, 201, 501, 10**9)  # graph size bins [lo, hi) for accuracy by N
MASS_THRESHOLDS = tuple(round(t, 2) for t in np.linspace(0.05, 0.95, 19))


@dataclass
class TrialResult:
    records: list[dict] = field(default_factory=list)  # one per (seed, split)
    curves: list[dict] = field(default_factory=list)  # one per (seed, evaluated epoch)


class NaNLoss(RuntimeError):
    """Training produced a non-finite loss."""


class DeviceError(RuntimeError):
    """The config asks for a device this process cannot use."""


def pick_device(name: str = "auto") -> torch.device:
    """`cuda` (an error without CUDA), `cpu`, or `auto`: CUDA when available, else CPU."""
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError("device=cuda but this process sees no CUDA device (no GPU, a CPU "
                          "build of torch, or a Ray trial given no GPU: set gpus_per_trial)")
    if name in ("cuda", "auto") and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def optimal_projection(dataset: str, in_channels: int) -> torch.Tensor | None:
    """The attention projection that solves the task, where known: COLORS p_opt = e_green over
    the colour channels (the last input channel holds only LARGEC's unseen colours, is zero in
    training and never gets a task gradient, so the reference leaves it out)."""
    if dataset != "colors":
        return None
    p = torch.zeros(in_channels - 1)
    p[1] = 1.0
    return p


def init_cosine(model: GraphNet, dataset: str, in_channels: int) -> float:
    """cos(p_init, p_opt) over the colour channels (COLORS, plain projection p), else NaN."""
    p_init, p_opt = model.first_projection(), optimal_projection(dataset, in_channels)
    if p_init is None or p_opt is None or p_init.numel() != in_channels:
        return math.nan
    return cosine(p_init[: p_opt.numel()], p_opt)


def lr_at(cfg: TrialConfig, epoch: int) -> float:
    """Learning rate of 1-based `epoch`: x0.1 from each epoch of cfg.lr_decay_epochs on.

    The reference steps its MultiStepLR at the start of every epoch, so the decay listed
    at epoch m already applies to epoch m (one epoch earlier than stepping at the end).
    """
    return cfg.lr * 0.1 ** sum(1 for m in cfg.lr_decay_epochs if m <= epoch)


def weak_floor(cfg: TrialConfig) -> float:
    """alpha_WS values below this are zeroed (the reference floors at 1e-3 on TU only)."""
    return 1e-3 if cfg.dataset in TU_DATASETS else 0.0


def task_loss(out: torch.Tensor, y: torch.Tensor, regression: bool) -> torch.Tensor:
    """MSE on the count (COLORS, TRIANGLES) or cross-entropy over classes."""
    return F.mse_loss(out, y.to(out.dtype)) if regression else F.cross_entropy(out, y)


def make_optimizer(model: torch.nn.Module, cfg: TrialConfig) -> torch.optim.Adam:
    """Adam with the reference betas and weight decay (SPEC §3); the LR per epoch is `lr_at`."""
    # the fused kernel is 2x faster per step than the default loop on CPU for these tiny models
    return torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=(0.5, 0.999),
                            weight_decay=cfg.weight_decay, fused=True)


def _forward(model: GraphNet, b: DenseBatch, cfg: TrialConfig):
    gt = b.gt if cfg.supervision != "unsup" else None
    return model(b.x, Graph(b.A, b.mask), gt)


def fit(model: GraphNet, cfg: TrialConfig, train: TrainBatches, seed: int,
        on_epoch=None) -> float:
    """Train `model` for cfg.epochs; `on_epoch(epoch, mean_loss)` after each epoch; seconds."""
    t0 = time.perf_counter()
    opt = make_optimizer(model, cfg)
    gen = torch.Generator().manual_seed(seed)
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, epoch)
        total = torch.zeros((), device=next(model.parameters()).device)
        n = 0
        for b in train.epoch(cfg.batch_size, gen):
            o = _forward(model, b, cfg)
            loss = task_loss(o.out, b.y, model.regression) + o.reg
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.detach() * len(b)
            n += len(b)
        mean = float(total) / max(n, 1)
        if not math.isfinite(mean):
            raise NaNLoss(f"non-finite training loss at epoch {epoch}")
        if on_epoch is not None:
            on_epoch(epoch, mean)
    return time.perf_counter() - t0


@torch.no_grad()
def evaluate(model: GraphNet, batches, cfg: TrialConfig, loo: bool = False) -> dict:
    """Accuracy, loss, attention AUC / ratio kept per pooling layer, FT, by-size accuracy."""
    model.eval()
    outputs = ((b, model(b.x, Graph(b.A, b.mask), b.gt)) for _, b in batches)
    loo_alpha = (lambda b: weak_attention(leave_one_out_batch(model, b, target=cfg.weak_target),
                                          b.mask, weak_floor(cfg))) if loo else None
    return summarize(outputs, cfg, model.regression, loo_alpha)


def summarize(outputs, cfg: TrialConfig, regression: bool, loo_alpha=None) -> dict:
    """The record of `evaluate` from (DenseBatch, NetOutput) pairs of one model over a split.

    `loo_alpha(batch)` gives leave-one-out attention (models without pooling), or None.
    The record's private key ``_attention`` holds per pooling layer the (alpha, gt) of every
    node scored, for `pool_test_auc`; `finish_records` removes it.
    """
    n_pools = len(cfg.pool_layers)
    preds, ys, sizes, losses = [], [], [], []
    alphas = [[] for _ in range(max(n_pools, 1))]
    gts = [[] for _ in range(max(n_pools, 1))]
    kept = [[] for _ in range(n_pools)]
    ft_hit = ft_total = 0
    masses = []
    for b, o in outputs:
        losses.append(float(task_loss(o.out, b.y, regression)) * len(b))
        preds.append(metrics.predictions(o.out, regression).cpu())
        ys.append(b.y.cpu())
        sizes.append(b.n_nodes.cpu())
        if n_pools:
            firsts = [(p.alpha, p.gt, p.mask_before) for p in o.pools]
            for layer, p in enumerate(o.pools):
                m = p.mask_before
                alphas[layer].append(p.alpha[m].cpu())
                gts[layer].append(p.gt[m].cpu())
                kept[layer].append(torch.from_numpy(metrics.ratio_kept(m, p.graph.mask)))
        elif loo_alpha is not None:
            alpha = loo_alpha(b)
            firsts = [(alpha, b.gt, b.mask)]
            alphas[0].append(alpha[b.mask].cpu())
            gts[0].append(b.gt[b.mask].cpu())
        else:
            firsts = []
        if firsts:
            a, g, m = firsts[0]
            hit, tot = metrics.focus_true(a, g, m)
            ft_hit, ft_total = ft_hit + hit, ft_total + tot
            has = (g > 0).any(-1).cpu().numpy()
            masses.append(metrics.gt_mass(a, g, m)[has])
    pred, y, size = torch.cat(preds), torch.cat(ys), torch.cat(sizes).numpy()
    correct = (pred.double() == y.double()).numpy()
    rec = {
        "accuracy": float(correct.mean()),
        "loss": sum(losses) / len(y),
        "n_graphs": len(y),
        "ft": ft_hit / ft_total if ft_total else math.nan,
        "acc_by_size": json.dumps(_by_size(correct, size)),
        "gt_mass_curve": json.dumps(_mass_curve(np.concatenate(masses))
                                    if masses and sum(len(m) for m in masses) else {}),
    }
    for layer in range(max(n_pools, 1)):
        has_alpha = bool(alphas[layer])
        rec[f"attn_auc_l{layer}"] = (metrics.attention_auc(torch.cat(alphas[layer]),
                                                           torch.cat(gts[layer]))
                                     if has_alpha else math.nan)
    for layer in range(n_pools):
        rec[f"ratio_kept_l{layer}"] = float(torch.cat(kept[layer]).mean())
    rec["_attention"] = [(torch.cat(a), torch.cat(g)) if a else None for a, g in zip(alphas, gts)]
    return rec


# test splits whose nodes the papers pool into one attention AUC (Knyazev et al.'s logs)
POOLED_AUC_SPLITS = {"colors": ("test_orig", "test_large", "test_largec"),
                     "triangles": ("test_orig", "test_large")}


def pool_test_auc(records: list[dict], dataset: str) -> None:
    """Add ``attn_auc_pooled_l{k}`` to every record of one seed: the AUC over the nodes of all
    its test graphs together, as the papers report it (COLORS ORIG + LARGE + LARGEC, TRIANGLES
    ORIG + LARGE, else TEST-ORIG); drop the private ``_attention`` arrays."""
    splits = POOLED_AUC_SPLITS.get(dataset, ("test_orig",))
    parts = [r["_attention"] for r in records if r.get("split") in splits and "_attention" in r]
    n_layers = max((len(p) for p in parts), default=0)
    pooled = {}
    for layer in range(n_layers):
        got = [p[layer] for p in parts if p[layer] is not None]
        pooled[f"attn_auc_pooled_l{layer}"] = (
            metrics.attention_auc(torch.cat([a for a, _ in got]), torch.cat([g for _, g in got]))
            if got and len(got) == len(parts) else math.nan)
    for r in records:
        r.pop("_attention", None)
        r.update(pooled)


def _by_size(correct: np.ndarray, size: np.ndarray) -> list:
    """[lo, hi, accuracy, count] for every non-empty graph-size bin."""
    out = []
    for lo, hi in zip(SIZE_BINS[:-1], SIZE_BINS[1:]):
        sel = (size >= lo) & (size < hi)
        if sel.any():
            out.append([lo, hi - 1, float(correct[sel].mean()), int(sel.sum())])
    return out


def _mass_curve(mass: np.ndarray) -> dict:
    """Fraction of graphs whose GT nodes receive attention mass >= t, for t in MASS_THRESHOLDS."""
    return {str(t): float((mass >= t).mean()) for t in MASS_THRESHOLDS}


def _weak_targets(cfg: TrialConfig, splits: dict[str, GraphSet], train: TrainBatches,
                  seed: int, device: torch.device, in_ch: int, out_ch: int) -> None:
    """Train model B (global pooling) and set the train split's targets to its alpha_WS."""
    r = recipe(cfg.dataset)
    explicit = cfg.epochs != r.get("attn_epochs", r["epochs"])
    cfg_b = cfg.replace(pool_layers=(), supervision="unsup",
                        epochs=cfg.epochs if explicit else r["epochs"],
                        lr_decay_epochs=cfg.lr_decay_epochs if explicit else r["lr_decay_epochs"])
    torch.manual_seed(seed + 7919)
    model_b = GraphNet(cfg_b, in_ch, out_ch).to(device)
    fit(model_b, cfg_b, train, seed + 7919)
    alpha_ws, _ = leave_one_out_attention(model_b, splits["train"], device, cfg.test_batch_size,
                                          cfg.weak_target, weak_floor(cfg))
    train.set_gt(alpha_ws)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _provenance(cfg: TrialConfig, data_hash: str) -> dict:
    from importlib.metadata import version

    return {"dataset_hash": data_hash, "torch_version": torch.__version__,
            "pyg_version": version("torch_geometric"), "host": os.uname().nodename,
            "git_sha": _git_sha()}


def _git_sha() -> str:
    import subprocess

    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=5).stdout.strip()
    except Exception:
        return ""


def run_seed(cfg: TrialConfig, splits: dict[str, GraphSet], seed: int,
             device: torch.device) -> TrialResult:
    """Train and evaluate one seed of a resolved config."""
    torch.manual_seed(seed)
    in_ch = splits["train"].num_features
    regression = cfg.task == "regression"
    out_ch = 1 if regression else int(max(int(g.y.max()) for g in splits.values()) + 1)
    train = TrainBatches(splits["train"], device)
    if cfg.supervision == "weak":
        _weak_targets(cfg, splits, train, seed, device, in_ch, out_ch)
    torch.manual_seed(seed)
    model = GraphNet(cfg, in_ch, out_ch).to(device)
    cos_p = init_cosine(model, cfg.dataset, in_ch)
    val = eval_batches(splits["val"], cfg.test_batch_size, device)  # collated once, reused
    every = cfg.eval_every or max(1, cfg.epochs // 50)
    curves: list[dict] = []

    def on_epoch(epoch: int, loss: float) -> None:
        if epoch % every == 0 or epoch == cfg.epochs:
            v = evaluate(model, val, cfg)
            curves.append({"seed": seed, "epoch": epoch, "train_loss": loss,
                           "val_accuracy": v["accuracy"], "val_loss": v["loss"],
                           "val_auc": v["attn_auc_l0"]})

    train_s = fit(model, cfg, train, seed, on_epoch)
    records = []
    for split, gs in splits.items():
        if split == "train":
            continue
        t0 = time.perf_counter()
        rec = evaluate(model, val if split == "val" else
                       eval_batches(gs, cfg.test_batch_size, device), cfg,
                       loo=cfg.loo_auc and not cfg.pool_layers and split != "val")
        rec.update(seed=seed, split=split, status="ok", error="", cos_p_init=cos_p,
                   train_s=train_s, eval_s=time.perf_counter() - t0, device=str(device))
        records.append(rec)
    pool_test_auc(records, cfg.dataset)
    for r in records:
        r["peak_rss_mb"] = _peak_rss_mb()
    return TrialResult(records, curves)


def _tune_allocator() -> None:
    """Keep freed tensor memory in the heap instead of unmapping it (glibc mallopt).

    Tiny models allocate and free ~100 KB tensors every op; by default glibc
    maps each one fresh and the page faults cost more than the arithmetic.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def _nan_result(seed: int, splits, error: str) -> TrialResult:
    return TrialResult([{"seed": seed, "split": s, "status": "nan", "error": error}
                        for s in splits if s != "train"], [])


def run_pack_full(configs: list[TrialConfig]) -> list[TrialResult]:
    """Several trials (configs on one dataset recipe) trained together where they can be.

    Configs that are `batched.eligible` and share a `batched.pack_key` (they differ only in
    seeds, init of p, threshold, ratio, kl_weight) train all their seeds as one pack
    (`ablate.trial.packed`); on a CPU a pack of a single seed trains sequentially instead. Every
    other config runs seed by seed. Returns one `TrialResult` per config, in order; its
    records carry `batched_seeds`, the number of seeds trained together with each.
    """
    from ablate.trial import packed as batched  # imports this module

    cfgs = [resolve(c) for c in configs]
    torch.set_flush_denormal(True)  # denormals double CPU time per step (SPEC pitfalls)
    _tune_allocator()
    first = cfgs[0]
    data_hash = dataset_recipe_hash(first.dataset, first.data_kwargs)
    if any(dataset_recipe_hash(c.dataset, c.data_kwargs) != data_hash for c in cfgs):
        raise ValueError("a pack holds trials of one dataset recipe only")
    splits = load_graphsets(first.dataset, **first.data_kwargs)
    device = pick_device(first.device)
    groups: dict[str, list[int]] = {}  # pack key -> config indices trained as one pack
    for i, c in enumerate(cfgs):
        if batched.eligible(c) and c.device == first.device:
            groups.setdefault(batched.pack_key(c), []).append(i)
    outcomes: dict[tuple[int, int], object] = {}  # (config index, seed) -> batched outcome
    size: dict[int, int] = {}
    for idx in groups.values():
        owners = [(i, s) for i in idx for s in cfgs[i].seeds]
        if len(owners) < 2 and device.type != "cuda":
            continue  # one seed on a CPU: the sequential path is as fast
        members = [batched.Member(cfgs[i], s) for i, s in owners]
        for (i, seed), got in zip(owners, batched.run_members(members, splits, device)):
            outcomes[(i, seed)] = got
            size[i] = len(members)
    results = []
    for i, cfg in enumerate(cfgs):
        common = {**axes(cfg), **_provenance(cfg, data_hash)}
        out = TrialResult()
        for seed in cfg.seeds:
            got = outcomes.get((i, seed))
            if isinstance(got, str):  # a packed seed whose training loss became non-finite
                res = _nan_result(seed, splits, got)
            elif got is not None:
                res = TrialResult(*got)
            else:
                try:
                    res = run_seed(cfg, splits, seed, device)
                except NaNLoss as e:
                    res = _nan_result(seed, splits, str(e))
            for r in res.records:
                out.records.append({**common, **r, "batched_seeds": size.get(i, 1)})
            out.curves.extend(res.curves)
        results.append(out)
    return results


def run_trial_full(config: TrialConfig) -> TrialResult:
    """Every seed of `config`: records per (seed, split) and per-epoch curves."""
    return run_pack_full([config])[0]


def run_trial(config: TrialConfig) -> list[dict]:
    """Train and evaluate `config` for each of its seeds; one record per (seed, split)."""
    return run_trial_full(config).records
