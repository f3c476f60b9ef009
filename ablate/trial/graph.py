"""The graph trial kind: every seed of a config trained by the reference recipe and evaluated.

`run_trial(config)` is the interface scripts use (one record per (seed, split) with
the columns of the result store); `run_trial_full` also returns the per-epoch
curves; `KIND` is what the runner uses (`ablate.trial.kind.TrialKind`). A seed
trains alone (`run_seed`: `fit`, then `evaluate` on every split) or, where
configs share shapes, in a pack with others (`ablate.trial.packed`). Weak
supervision first trains a global-pool model B and uses its leave-one-node-out
attention as targets (`ablate.trial.weak.weak_targets`).
"""

from __future__ import annotations

import time

import torch

from ablate.config import TrialConfig, axes, inapplicable, resolve, trial_id
from ablate.data import GraphSet, dataset_recipe_hash, dataset_source, load_graphsets
from ablate.errors import NaNLoss
from ablate.trial import packed
from ablate.trial.batches import TrainBatches, eval_batches
from ablate.trial.evaluate import evaluate, loo_plan, pool_test_auc
from ablate.trial.fit import fit
from ablate.trial.kind import TrialKind, TrialResult, stable_hash
from ablate.trial.provenance import peak_gpu_mb, peak_rss_mb, provenance, reset_peak_rss, start_gpu_peak
from ablate.trial.setup import init_cosine, model_sizes, pick_device, prepare_process, seeded_model
from ablate.trial.weak import weak_targets


def run_seed(cfg: TrialConfig, splits: dict[str, GraphSet], seed: int,
             device: torch.device) -> TrialResult:
    """Train and evaluate one seed of a resolved config."""
    in_ch, out_ch = model_sizes(cfg, splits)
    train = TrainBatches(splits["train"], device)
    if cfg.supervision == "weak":
        weak_targets(cfg, splits, train, seed, device, in_ch, out_ch)
    model = seeded_model(cfg, seed, in_ch, out_ch, device)
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
    del train  # the test splits' evaluation does not need the collated training split
    records = []
    for split, gs in splits.items():
        if split == "train":
            continue
        t0 = time.perf_counter()
        loo, note = loo_plan(cfg, split, gs)
        rec = evaluate(model, val if split == "val" else
                       eval_batches(gs, cfg.test_batch_size, device), cfg, loo=loo)
        rec.update(seed=seed, split=split, status="ok", error="", cos_p_init=cos_p,
                   train_s=train_s, eval_s=time.perf_counter() - t0, device=str(device),
                   note=note)
        records.append(rec)
    pool_test_auc(records, cfg.dataset)
    for r in records:
        r["peak_rss_mb"] = peak_rss_mb()
    return TrialResult(records, curves)


def _nan_result(seed: int, splits, error: str) -> TrialResult:
    return TrialResult([{"seed": seed, "split": s, "status": "nan", "error": error}
                        for s in splits if s != "train"], [])


def run_pack_full(configs: list[TrialConfig], twin_lone: bool = False) -> list[TrialResult]:
    """Several trials (configs on one dataset recipe) trained together where they can be.

    Configs that share a `packed.pack_key` (they are `packed.eligible` and differ only in
    seeds, init of p, threshold, ratio, kl_weight) train all their seeds as one pack
    (`ablate.trial.packed`); on a CPU a pack of a single seed trains sequentially instead. Every
    other config runs seed by seed. Returns one `TrialResult` per config, in order; its
    records carry `batched_seeds`, the number of seeds trained together with each.

    `twin_lone`: a pack of a single seed trains as two copies of it, the copy's results
    dropped, on any device. A vmapped model of one member takes the unbatched kernels, which
    round differently from the batched ones; any pack of two or more gives a member the same
    numbers bit for bit on a CPU, so a seed stored from a pack is reproduced alone this way
    (`reproduce=`).
    """
    cfgs = [resolve(c) for c in configs]
    prepare_process()
    reset_peak_rss()  # this trial's own peak, in a worker reused for many
    first = cfgs[0]
    data_hash = dataset_recipe_hash(first.dataset, first.data_kwargs)
    if any(dataset_recipe_hash(c.dataset, c.data_kwargs) != data_hash for c in cfgs):
        raise ValueError("a pack holds trials of one dataset recipe only")
    splits = load_graphsets(first.dataset, **first.data_kwargs)
    device = pick_device(first.device)
    start_gpu_peak(device)
    groups: dict[str, list[int]] = {}  # pack key -> config indices trained as one pack
    for i, c in enumerate(cfgs):
        key = packed.pack_key(c)
        if key is not None and c.device == first.device:
            groups.setdefault(key, []).append(i)
    outcomes: dict[tuple[int, int], object] = {}  # (config index, seed) -> batched outcome
    size: dict[int, int] = {}
    for idx in groups.values():
        owners = [(i, s) for i in idx for s in cfgs[i].seeds]
        twin = twin_lone and len(owners) == 1
        if len(owners) < 2 and device.type != "cuda" and not twin:
            continue  # one seed on a CPU: the sequential path is as fast
        members = [packed.Member(cfgs[i], s) for i, s in owners + owners[:1] * twin]
        for (i, seed), got in zip(owners, packed.run_members(members, splits, device)):
            outcomes[(i, seed)] = got
            size[i] = len(owners)
    prov = provenance(data_hash, device)  # one dataset recipe, process and device for the pack
    prov["dataset_source"] = dataset_source(first.dataset, first.data_kwargs)
    results = []
    for i, cfg in enumerate(cfgs):
        common = {**axes(cfg), **prov}
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
    peak = peak_gpu_mb(device)  # the whole pack's (one process, one device)
    for out in results:
        for r in out.records:
            r["peak_gpu_mb"] = peak
    return results


def run_trial_full(config: TrialConfig) -> TrialResult:
    """Every seed of `config`: records per (seed, split) and per-epoch curves."""
    return run_pack_full([config])[0]


def run_trial(config: TrialConfig) -> list[dict]:
    """Train and evaluate `config` for each of its seeds; one record per (seed, split)."""
    return run_trial_full(config).records


class GraphKind(TrialKind):
    """Graph classification trials (`TrialConfig`): COLORS, TRIANGLES, MNIST-75SP, TU."""

    name = "graph"
    store_kind = "graph"  # result_store.schema: the columns of its files
    store_columns = (("note", "string"),)  # what a record's metrics leave out (`loo_plan`)
    config = TrialConfig

    def resolve(self, cfg: TrialConfig) -> TrialConfig:
        return resolve(cfg)

    def columns(self, cfg: TrialConfig) -> dict:
        return axes(cfg)

    def inapplicable(self, cfg: TrialConfig) -> set[str]:
        return inapplicable(cfg)

    def data_hash(self, cfg: TrialConfig) -> str:
        return dataset_recipe_hash(cfg.dataset, cfg.data_kwargs)

    def trial_id(self, cfg: TrialConfig, data_hash: str | None) -> str:
        tid = trial_id(cfg, data_hash)  # the graph kind's ids, as every store holds them
        # a kind built on this one under another name (a user's `kind: mykinds:KIND`) runs other
        # trials: ids of its own, so the graph kind's stored trials never count as its own
        return tid if self.name == GraphKind.name else stable_hash({"kind": self.name, "graph": tid})

    def run(self, cfg: TrialConfig) -> TrialResult:
        return run_trial_full(cfg)

    def pack_key(self, cfg: TrialConfig) -> str | None:
        return packed.pack_key(cfg)

    def run_pack(self, cfgs: list[TrialConfig]) -> list[TrialResult]:
        return run_pack_full(cfgs)

    def host_memory(self, cfgs: list[TrialConfig], data: dict | None) -> int | None:
        if data is None:
            return None
        from ablate.trial import footprint
        from ablate.trial.batches import precollate_limit

        limit = precollate_limit(torch.device("cpu"))
        return footprint.pack_bytes([resolve(c) for c in cfgs], data, limit, limit // 4)


KIND = GraphKind()
