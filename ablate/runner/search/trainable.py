"""One search trial (the worker side): its data, its members trained jointly, its objective.

A Tune trial trains every member of one configuration in lockstep, epoch by
epoch, and reports the objective after each epoch (ASHA prunes on it). A member
is one search seed on the val split, or with ``cv_folds: k`` one (fold, seed) of
k-fold cross-validation over the train + val graphs (`cv_splits`). Only the
train and val splits reach a trial (`search_splits`): the objective never sees
a test split.
"""

from __future__ import annotations

import json
import queue
import statistics
import threading
from collections.abc import Callable

from ablate.errors import ConfigError
from ablate.runner.execute.ray_env import worker_env
from ablate.runner.study.search_spec import METRIC, PARAMS, SearchSpec, arm_config

SEARCH_SPLITS = ("train", "val")  # the only splits a search trial may read


def search_splits(cfg) -> dict:
    """The train and val splits of the config's dataset; the search never loads a test split."""
    from ablate.data import load_graphsets

    if cfg.data_kwargs.get("final"):
        raise ConfigError("data.final=true puts the val graphs into train, so the search would "
                          "score graphs it trained on: set it in final_data (the final "
                          "evaluation), not in data")
    splits = load_graphsets(cfg.dataset, **cfg.data_kwargs)
    return {s: splits[s] for s in SEARCH_SPLITS}


def cv_splits(splits: dict, k: int) -> list[dict]:
    """k cross-validation folds over the train + val graphs: fold f scores the f-th of k
    contiguous chunks of a fixed (seed 0) shuffle and trains on the other k - 1.

    Follows the reference's TU protocol (`DataReader.split_ids`: contiguous chunks of the
    shuffled train/val graphs); the folds are the same for every trial of a study.
    """
    import numpy as np

    pool = _concat(splits["train"], splits["val"])
    if not 2 <= k <= len(pool):
        raise ConfigError(f"cv_folds={k} needs 2 <= k <= {len(pool)} (the train + val graphs)")
    order = np.random.default_rng(0).permutation(len(pool))
    folds = np.array_split(order, k)
    return [{"train": pool.subset(np.sort(np.concatenate(folds[:f] + folds[f + 1:]))),
             "val": pool.subset(np.sort(folds[f]))} for f in range(k)]


def _concat(a, b):
    """The graphs of GraphSet `a` followed by those of `b`, as one GraphSet."""
    return a.concat(b)


def objective(accs: list[float], groups: int, kind: str = "mean") -> float:
    """The search objective of one epoch: accs of the members, fold-major in `groups` groups.

    "mean": mean over all members. "mean_minus_std": mean minus the (population) standard
    deviation of the per-group means, the reference's TU cross-validation criterion.
    """
    import numpy as np

    per_group = np.asarray(accs, dtype=np.float64).reshape(groups, -1).mean(axis=1)
    value = float(per_group.mean())
    return value - float(per_group.std()) if kind == "mean_minus_std" else value


class _Stop(Exception):
    """Raised in a member thread when the trial is stopped (ASHA) or fails."""


def _member(cfg, split: dict, seed: int, device, in_ch: int, out_ch: int):
    """The model and train batches of one member, set up by the trial engine's functions
    (weak supervision's model B first, then the seeded model), as `run_seed` sets up a seed."""
    from ablate.trial.batches import TrainBatches
    from ablate.trial.setup import seeded_model
    from ablate.trial.weak import weak_targets

    train = TrainBatches(split["train"], device)
    if cfg.supervision == "weak":
        weak_targets(cfg, split, train, seed, device, in_ch, out_ch)
    return seeded_model(cfg, seed, in_ch, out_ch, device), train


def train_jointly(cfg, splits: dict | list[dict],
                  report: Callable[[int, list[float]], None]) -> None:
    """Train every seed of `cfg` in lockstep, one epoch at a time; ``report(epoch, val_accs)``.

    `splits` is one {train, val} dict, or a list of them (cross-validation folds):
    then every (fold, seed) is a member, fold-major, and `val_accs` has one entry
    per member. Each member runs ``ablate.trial.fit.fit`` in its own thread; its
    ``on_epoch`` callback evaluates its val batches and hands control back, so
    exactly one member computes at a time (the trial's CPU budget) and all
    members finish epoch e before `report` sees it. If `report` raises (Tune
    stops the trial), the member threads are stopped before this returns.
    """
    from ablate.trial.batches import eval_batches
    from ablate.trial.evaluate import evaluate
    from ablate.trial.fit import fit
    from ablate.trial.setup import model_sizes, pick_device

    device = pick_device(cfg.device)
    folds = splits if isinstance(splits, list) else [splits]
    in_ch, out_ch = model_sizes(cfg, folds[0])  # every fold holds all train + val graphs
    jobs = [(f, seed) for f in folds for seed in cfg.seeds]
    results: queue.Queue = queue.Queue()
    turns = [threading.Semaphore(0) for _ in jobs]
    stop = threading.Event()

    def run(i: int, split: dict, seed: int) -> None:
        try:
            turns[i].acquire()
            if stop.is_set():
                return
            val = eval_batches(split["val"], cfg.test_batch_size, device)
            model, train = _member(cfg, split, seed, device, in_ch, out_ch)

            def on_epoch(epoch: int, loss: float) -> None:
                results.put((i, epoch, evaluate(model, val, cfg)["accuracy"]))
                turns[i].acquire()
                if stop.is_set():
                    raise _Stop

            fit(model, cfg, train, seed, on_epoch)
        except _Stop:
            pass
        except BaseException as e:  # NaN loss and the like: the trial fails
            results.put((i, -1, e))

    threads = [threading.Thread(target=run, args=(i, f, s), daemon=True)
               for i, (f, s) in enumerate(jobs)]
    for t in threads:
        t.start()
    try:
        for epoch in range(1, cfg.epochs + 1):
            accs = []
            for i in range(len(threads)):
                turns[i].release()  # member i trains one epoch and evaluates
                _, _, acc = results.get()
                if isinstance(acc, BaseException):
                    raise acc
                accs.append(acc)
            report(epoch, accs)
        for i in range(len(threads)):  # let fit() return
            turns[i].release()
    finally:
        stop.set()
        for sem in turns:
            sem.release()
        for t in threads:
            t.join(timeout=30)


def search_trainable(config: dict, base: dict, pieces: dict | None = None) -> None:
    """Tune function trainable: one configuration, its members trained jointly, objective per
    epoch. `config` holds the searched values (and ``optuna_trial``); `base` the spec, arm and
    the recipe's identity; `pieces` the prepared file for a node that lacks it
    (`ablate.runner.execute.ship.ensure_dataset`, as grid trials get theirs)."""
    import torch
    from ray import tune

    from ablate.runner.execute.ship import ensure_dataset
    from ablate.trial.setup import prepare_process

    worker_env(base.get("cache_dir"), base.get("import_paths", ()))  # before the config is read
    ensure_dataset(base.get("dataset"), base.get("data_params", ()), base.get("data_hash"),
                   pieces or {})
    torch.set_num_threads(max(1, int(base["cpus"])))
    prepare_process()
    params = {k: config[k] for k in PARAMS if k in config}
    spec: SearchSpec = base["spec"]
    cfg = arm_config(spec, base["arm"], **params)
    splits = search_splits(cfg)
    folds = cv_splits(splits, spec.cv_folds) if spec.cv_folds else splits
    groups = spec.cv_folds or len(cfg.seeds)

    def report(epoch: int, accs: list[float]) -> None:
        sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
        tune.report({"epoch": epoch, "seed_accs": json.dumps(accs), "val_acc_std": sd,
                     "splits": ",".join(sorted(splits)),
                     METRIC: objective(accs, groups, spec.objective)})

    train_jointly(cfg, folds, report)
