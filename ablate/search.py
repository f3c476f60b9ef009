"""Optuna threshold search through Ray Tune: one persistent TPE study per arm.

A search study (``studies/NAME.yaml`` with ``kind: search``) names ``arms``
(fixed axes such as dataset / backbone / supervision), a ``search:`` space
(threshold on a log scale, optionally kl_weight, init_scale, ratio) and the
search budget. ``python -m ablate.run study=threshold_search`` then, per arm:

1. runs Ray Tune with ``OptunaSearch`` (TPE, seeded) over the space; one Tune
   trial trains every search seed of one configuration jointly, epoch by epoch
   (``ablate.train.fit`` with its ``on_epoch`` callback), and reports the mean
   validation accuracy over the seeds after each epoch. Only the train and val
   splits reach the trial (`_search_splits`): the objective never sees a test split.
2. prunes bad configurations with ASHA on that per-epoch metric (OptunaSearch
   hard-codes a no-op pruner and sends Optuna the last reported value, which is
   the objective, so the scheduler prunes and the final epoch is reported last).
3. keeps the Optuna study in ``RESULTS/STUDY/ARM/optuna.db`` (SQLite): rerunning
   the same command adds ``n_trials`` more (or up to ``max_trials`` in total);
   a killed driver loses at most the trials that were running.
4. writes every finished search trial (one row per seed, split ``val``) to the
   study's Parquet store with the columns ``optuna_trial`` and ``pruned``, then
   evaluates the best unpruned configuration and the reference threshold of
   SPEC §3 on fresh ``final_seeds`` over every split (role ``tuned`` /
   ``reference``), and prints the summary table (`summary`).
"""

from __future__ import annotations

import json
import math
import os
import queue
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.errors import ConfigError

METRIC = "val_acc"  # mean validation accuracy over the search seeds (the objective)
MODE = "max"
SEARCH_SPLITS = ("train", "val")  # the only splits a search trial may read
PARAMS = ("threshold", "kl_weight", "init_scale", "ratio")  # searchable axes
_RUN_KEYS = ("results_dir", "ray_address", "dry_run", "arms", "n_trials", "max_trials",
             "sampler_seed", "seeds", "final_seeds", "grace_period", "reduction_factor",
             "max_concurrent", "cpus_per_trial")


@dataclass
class SearchSpec:
    """A search study after command-line overrides."""

    name: str
    description: str = ""
    fixed: dict = field(default_factory=dict)  # TrialConfig axes shared by every arm
    data: dict = field(default_factory=dict)  # dataset recipe overrides
    arms: dict = field(default_factory=dict)  # arm name -> its fixed axes
    search: dict = field(default_factory=dict)  # param -> {low, high, log, when}
    seeds: list = field(default_factory=lambda: [0, 1, 2])  # trained inside every search trial
    final_seeds: list = field(default_factory=lambda: [100, 101, 102])  # fresh seeds, final eval
    n_trials: int = 20  # new Optuna trials per arm and run
    max_trials: int | None = None  # cap on finished trials per arm (resume up to a total)
    sampler_seed: int = 0  # TPE seed (offset by the trials already in the study)
    grace_period: int = 5  # ASHA: epochs before a trial may be stopped
    reduction_factor: int = 2  # ASHA: keep 1 / reduction_factor per rung
    max_concurrent: int = 2  # Tune trials at once
    cpus_per_trial: float = 1
    results_dir: str = "results"
    ray_address: str | None = None
    dry_run: bool = False


# ----------------------------------------------------------------------------- spec


def _study_path(name: str) -> Path:
    from ablate.study import STUDIES_DIR

    return Path(STUDIES_DIR) / f"{name}.yaml"


def _read(name: str) -> dict:
    from omegaconf import OmegaConf

    path = _study_path(name)
    if not path.is_file():
        return {}
    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception:
        return {}
    return data if isinstance(data, dict) else {}


def is_search_study(name: str) -> bool:
    """True when studies/NAME.yaml declares ``kind: search``."""
    return _read(name).get("kind") == "search"


def load_search_spec(name: str, overrides: list[str] = ()) -> SearchSpec:
    """Read studies/NAME.yaml and apply ``key=value`` overrides (runner keys, axes, data.K, search.P.K)."""
    import dataclasses

    import yaml

    from ablate.study import _config_fields, _seed_list

    raw = _read(name)
    raw.pop("kind", None)
    known = {f.name for f in dataclasses.fields(SearchSpec)} - {"name"}
    bad = sorted(set(raw) - known)
    if bad:
        raise ConfigError(f"{_study_path(name)}: unknown section(s) {bad}; valid: {sorted(known)}")
    spec = SearchSpec(name=name, **raw)
    fields = set(_config_fields("graph")) - {"study", "seeds", "data_params", "extra"}
    arms_wanted = None
    for o in overrides:
        key, sep, text = o.partition("=")
        key = key.lstrip("+")
        if not sep or key == "study":
            continue
        value = yaml.safe_load(text) if text else None
        if key == "arms":
            arms_wanted = [a for a in str(text).split(",") if a]
        elif key in ("seeds", "seed", "final_seeds"):
            setattr(spec, "seeds" if key == "seed" else key, _seed_list(value))
        elif key in _RUN_KEYS:
            setattr(spec, key, value)
        elif key.startswith("data."):
            spec.data[key[5:]] = value
        elif key.startswith("search."):
            parts = key.split(".")
            if len(parts) != 3 or parts[1] not in PARAMS:
                raise ConfigError(f"{key}: write search.PARAM.KEY with PARAM one of {PARAMS}")
            spec.search.setdefault(parts[1], {})[parts[2]] = value
        elif key in fields:
            spec.fixed[key] = value
        else:
            raise ConfigError(f"unknown key {key!r}; valid: {', '.join(_RUN_KEYS)}, data.KEY, "
                              f"search.PARAM.KEY, or a trial axis ({', '.join(sorted(fields))})")
    spec.seeds, spec.final_seeds = _seed_list(spec.seeds), _seed_list(spec.final_seeds)
    if arms_wanted is not None:
        missing = [a for a in arms_wanted if a not in spec.arms]
        if missing:
            raise ConfigError(f"arms: unknown arm {missing[0]!r}; valid choices: {', '.join(spec.arms)}")
        spec.arms = {a: spec.arms[a] for a in arms_wanted}
    if not spec.arms:
        raise ConfigError(f"study {name}: no arms to search (section 'arms')")
    if len(spec.seeds) < 3:
        raise ConfigError(f"seeds: the objective is a mean over >= 3 seeds, got {spec.seeds}")
    for p, d in spec.search.items():
        if p not in PARAMS or not {"low", "high"} <= set(d):
            raise ConfigError(f"search.{p}: need a parameter in {PARAMS} with low and high")
    return spec


def arm_config(spec: SearchSpec, arm: str, **params: Any):
    """The resolved TrialConfig of `arm` with the given searched values and the search seeds."""
    from ablate.study import make_config, resolve_config

    axes = {**{"data." + k: v for k, v in spec.data.items()}, **spec.fixed, **spec.arms[arm],
            **params, "study": spec.name, "seeds": params.pop("seeds", spec.seeds)}
    return resolve_config("graph", make_config("graph", axes))


def build_space(search: dict, cfg) -> dict:
    """Optuna distributions for one arm: the parameters whose ``when`` matches its fixed axes."""
    from optuna.distributions import FloatDistribution

    space = {}
    for name, d in search.items():
        when = d.get("when") or {}
        if all(getattr(cfg, k) in (v if isinstance(v, list) else [v]) for k, v in when.items()):
            space[name] = FloatDistribution(float(d["low"]), float(d["high"]), log=bool(d.get("log")))
    if not space:
        raise ConfigError("search: no parameter applies to this arm (check the 'when' conditions)")
    return space


# ----------------------------------------------------------------------------- worker side


def _search_splits(cfg) -> dict:
    """The train and val splits of the config's dataset; the search never loads a test split."""
    from ablate.data import load_graphsets

    splits = load_graphsets(cfg.dataset, **cfg.data_kwargs)
    return {s: splits[s] for s in SEARCH_SPLITS}


class _Stop(Exception):
    """Raised in a seed thread when the trial is stopped (ASHA) or fails."""


def train_jointly(cfg, splits: dict, report: Callable[[int, list[float]], None]) -> None:
    """Train every seed of `cfg` in lockstep, one epoch at a time; ``report(epoch, val_accs)``.

    Each seed runs ``ablate.train.fit`` in its own thread; its ``on_epoch``
    callback evaluates the val batches and hands control back, so exactly one
    seed computes at a time (the trial's CPU budget) and all seeds finish epoch
    e before `report` sees it. If `report` raises (Tune stops the trial), the
    seed threads are stopped before this returns.
    """
    import torch

    from ablate.batching import TrainBatches, eval_batches
    from ablate.models.network import GraphNet
    from ablate.train import evaluate, fit, pick_device

    device = pick_device(cfg.device)
    in_ch = splits["train"].num_features
    out_ch = 1 if cfg.task == "regression" else int(max(int(g.y.max()) for g in splits.values()) + 1)
    val = eval_batches(splits["val"], cfg.test_batch_size, device)
    results: queue.Queue = queue.Queue()
    turns = [threading.Semaphore(0) for _ in cfg.seeds]
    stop = threading.Event()

    def run(i: int, seed: int) -> None:
        try:
            turns[i].acquire()
            if stop.is_set():
                return
            train = TrainBatches(splits["train"], device)
            if cfg.supervision == "weak":
                from ablate.train import _weak_targets

                _weak_targets(cfg, {**splits}, train, seed, device, in_ch, out_ch)
            torch.manual_seed(seed)
            model = GraphNet(cfg, in_ch, out_ch).to(device)

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

    threads = [threading.Thread(target=run, args=(i, s), daemon=True) for i, s in enumerate(cfg.seeds)]
    for t in threads:
        t.start()
    try:
        for epoch in range(1, cfg.epochs + 1):
            accs = []
            for i in range(len(threads)):
                turns[i].release()  # seed i trains one epoch and evaluates
                j, e, acc = results.get()
                if isinstance(acc, BaseException):
                    raise acc
                accs.append(acc)
            report(epoch, accs)
        for i in range(len(threads)):  # let fit() return
            turns[i].release()
    finally:
        stop.set()
        for s in turns:
            s.release()
        for t in threads:
            t.join(timeout=30)


def search_trainable(config: dict, base: dict) -> None:
    """Tune function trainable: one configuration, its seeds trained jointly, mean val acc per epoch."""
    import statistics

    import torch
    from ray import tune

    if base.get("cache_dir"):
        os.environ["ABLATE_CACHE"] = base["cache_dir"]
    torch.set_num_threads(max(1, int(base["cpus"])))
    torch.set_flush_denormal(True)
    params = {k: config[k] for k in PARAMS if k in config}
    spec: SearchSpec = base["spec"]
    cfg = arm_config(spec, base["arm"], **params)
    splits = _search_splits(cfg)

    def report(epoch: int, accs: list[float]) -> None:
        sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
        tune.report({"epoch": epoch, "seed_accs": json.dumps(accs), "val_acc_std": sd,
                     "splits": ",".join(sorted(splits)), METRIC: sum(accs) / len(accs)})

    train_jointly(cfg, splits, report)


# ----------------------------------------------------------------------------- driver side


def _tune_callback(store, spec: SearchSpec, arm: str, searcher, epochs: int):
    """A Tune callback that writes each finished search trial to the Parquet store."""
    from ray import tune

    from ablate.config import axes

    class _Write(tune.Callback):
        def __init__(self):
            self.numbers: dict[str, int] = {}
            self.last: dict[str, dict] = {}
            self.written: list[int] = []

        def on_trial_start(self, iteration, trials, trial, **info):
            ot = searcher._ot_trials.get(trial.trial_id)  # the Optuna trial Tune asked for
            self.numbers[trial.trial_id] = ot.number if ot is not None else -1

        def on_trial_result(self, iteration, trials, trial, result, **info):
            self.last[trial.trial_id] = result

        def on_trial_complete(self, iteration, trials, trial, **info):
            self._write(trial, "ok", "")

        def on_trial_error(self, iteration, trials, trial, **info):
            self._write(trial, "error", "trial raised (see Ray logs)")

        def _write(self, trial, status: str, error: str) -> None:
            res = self.last.get(trial.trial_id, {})
            number = self.numbers.get(trial.trial_id, -1)
            params = {k: trial.config[k] for k in PARAMS if k in trial.config}
            cfg = arm_config(spec, arm, **params)
            accs = json.loads(res.get("seed_accs", "[]")) or [math.nan] * len(cfg.seeds)
            epoch = int(res.get("epoch", 0))
            common = {**axes(cfg), "search_arm": arm, "role": "search", "optuna_trial": int(number),
                      "pruned": bool(status == "ok" and epoch < epochs), "epochs_run": epoch,
                      "objective": float(res.get(METRIC, math.nan))}
            rows = [{**common, "seed": s, "split": "val", "accuracy": float(a), "status": status,
                     "error": error} for s, a in zip(cfg.seeds, accs)]
            store.write(f"{arm}-trial{number:05d}", rows)
            self.written.append(number)

    return _Write()


def _create_db(db: Path, arm: str) -> None:
    """Create the Optuna SQLite file beside its final name, then rename it into place.

    Optuna builds its schema in several statements; a driver killed in between would
    leave a half-made database that no rerun can open. A leftover temp file is removed.
    """
    import optuna

    for old in db.parent.glob(f".{db.name}.*.tmp"):
        old.unlink(missing_ok=True)
    tmp = db.parent / f".{db.name}.{os.getpid()}.tmp"
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp}")
    optuna.create_study(storage=storage, study_name=arm, direction="maximize")
    storage.engine.dispose()
    os.replace(tmp, db)


def _open_study(spec: SearchSpec, arm: str):
    """The arm's persistent Optuna study (SQLite); stale RUNNING trials of a killed run become FAIL."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    db = Path(spec.results_dir) / spec.name / arm / "optuna.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    if not db.exists():
        _create_db(db, arm)
    storage = optuna.storages.RDBStorage(f"sqlite:///{db}")
    study = optuna.create_study(storage=storage, study_name=arm, direction="maximize",
                                load_if_exists=True)
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
    return storage, study


def run_search(spec: SearchSpec, arm: str, store) -> int:
    """Run this arm's Optuna/Tune search (n_trials more, up to max_trials); new trials run."""
    import optuna
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    cfg = arm_config(spec, arm)
    space = build_space(spec.search, cfg)
    storage, study = _open_study(spec, arm)
    finished = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished()]
    done = sum(t.state == optuna.trial.TrialState.COMPLETE for t in finished)
    n_new = int(spec.n_trials)
    if spec.max_trials is not None:
        n_new = min(n_new, int(spec.max_trials) - done)
    if n_new <= 0:
        return 0
    sampler = optuna.samplers.TPESampler(seed=int(spec.sampler_seed) + len(finished))
    searcher = OptunaSearch(space=space, metric=METRIC, mode=MODE, sampler=sampler,
                            study_name=arm, storage=storage)
    scheduler = ASHAScheduler(time_attr="training_iteration", max_t=cfg.epochs,
                              grace_period=min(int(spec.grace_period), cfg.epochs),
                              reduction_factor=int(spec.reduction_factor))
    callback = _tune_callback(store, spec, arm, searcher, cfg.epochs)
    base = {"spec": spec, "arm": arm, "cpus": spec.cpus_per_trial,
            "cache_dir": os.environ.get("ABLATE_CACHE")}
    fn = tune.with_resources(tune.with_parameters(search_trainable, base=base),
                             {"cpu": spec.cpus_per_trial})
    with tempfile.TemporaryDirectory(prefix="ablate-search-") as tmp:
        tuner = tune.Tuner(
            fn,
            tune_config=tune.TuneConfig(metric=METRIC, mode=MODE, num_samples=n_new,
                                        search_alg=ConcurrencyLimiter(searcher, spec.max_concurrent),
                                        scheduler=scheduler, reuse_actors=True),
            run_config=tune.RunConfig(name=f"{spec.name}-{arm}", storage_path=tmp, verbose=0,
                                      callbacks=[callback],
                                      checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=False)),
        )
        tuner.fit()
    return len(callback.written)


def best_trial(store, arm: str) -> dict | None:
    """The best unpruned search trial of `arm` in the store: params, val mean/std, optuna number."""
    df = store.read()
    if df.empty or "role" not in df:
        return None
    df = df[(df.role == "search") & (df.search_arm == arm) & (df.status == "ok")]
    n_total, n_pruned = df.optuna_trial.nunique(), df[df.pruned.astype(bool)].optuna_trial.nunique()
    df = df[~df.pruned.astype(bool)]
    if df.empty:
        return None
    g = df.groupby("optuna_trial").agg(mean=("accuracy", "mean"), std=("accuracy", "std"),
                                       n=("accuracy", "size"))
    number = int(g["mean"].idxmax())
    row = df[df.optuna_trial == number].iloc[0]
    return {"optuna_trial": number, "val_mean": float(g.loc[number, "mean"]),
            "val_std": float(g.loc[number, "std"]), "n_trials": int(n_total), "n_pruned": int(n_pruned),
            "params": {p: float(row[p]) for p in PARAMS}}


def final_evaluation(spec: SearchSpec, arm: str, best: dict, store) -> None:
    """Evaluate the tuned and the reference (SPEC §3) config on fresh seeds, every split."""
    import ray

    from ablate.config import recipe, trial_id
    from ablate.data import dataset_recipe_hash
    from ablate.train import run_trial_full

    base = arm_config(spec, arm)
    ref_t = recipe(base.dataset)["thresholds"][base.supervision]
    jobs = {"tuned": arm_config(spec, arm, seeds=spec.final_seeds,
                                **{k: v for k, v in best["params"].items() if k in spec.search}),
            "reference": arm_config(spec, arm, seeds=spec.final_seeds, threshold=ref_t)}
    data_hash = dataset_recipe_hash(base.dataset, base.data_kwargs)
    done = store.completed()
    ids = {role: f"{arm}-final-{trial_id(c, data_hash)}" for role, c in jobs.items()}
    cache = os.environ.get("ABLATE_CACHE")

    @ray.remote(num_cpus=spec.cpus_per_trial)
    def _run(cfg):
        if cache:
            os.environ["ABLATE_CACHE"] = cache
        return run_trial_full(cfg)

    todo = {role: _run.remote(jobs[role]) for role in jobs if ids[role] not in done}
    for role, ref in todo.items():
        res = ray.get(ref)
        extra = {"search_arm": arm, "role": role, "pruned": False,
                 "optuna_trial": best["optuna_trial"] if role == "tuned" else -1}
        store.write(ids[role], res.records, res.curves, extra=extra)


def summary(spec: SearchSpec, store) -> str:
    """Per arm: tuned vs reference config, search val mean +- std, final val/test mean +- std."""
    import pandas as pd

    df = store.read()
    lines = []
    for arm in spec.arms:
        best = best_trial(store, arm)
        if best is None:
            lines.append(f"{arm}: no finished unpruned trial yet")
            continue
        fin = df[(df.search_arm == arm) & df.role.isin(["tuned", "reference"])]
        tuned_ids = fin[(fin.role == "tuned") & (fin.optuna_trial == best["optuna_trial"])].trial_id
        fin = fin[(fin.role == "reference") | fin.trial_id.isin(set(tuned_ids))]
        lines.append(f"== {arm}: {best['n_trials']} search trials ({best['n_pruned']} pruned by ASHA), "
                     f"best #{best['optuna_trial']} "
                     f"(val objective {best['val_mean']:.3f} +- {best['val_std']:.3f} over seeds "
                     f"{spec.seeds}); final seeds {spec.final_seeds}")
        rows = []
        for role in ("tuned", "reference"):
            part = fin[fin.role == role]
            if part.empty:
                continue
            r = {"config": role, "threshold": f"{part.threshold.iloc[0]:.4g}"}
            for p in build_space(spec.search, arm_config(spec, arm)):
                if p != "threshold":
                    r[p] = f"{part[p].iloc[0]:.4g}"
            r["search val"] = (f"{best['val_mean']:.3f}+-{best['val_std']:.3f}" if role == "tuned"
                               else "-")
            order = sorted(part.split.unique(), key=lambda x: (x != "val", x))
            for split in order:
                g = part[part.split == split]
                r[split] = f"{g.accuracy.mean():.3f}+-{g.accuracy.std():.3f}"
            rows.append(r)
        if rows:
            lines.append(pd.DataFrame(rows).to_string(index=False))
    return "\n".join(lines)


def main(name: str, argv: list[str]) -> int:
    """CLI entry for ``kind: search`` studies (called by ablate.run)."""
    from ablate.data import load_graphsets
    from ablate.execution import start_ray
    from ablate.store import Store

    spec = load_search_spec(name, [a for a in argv if "=" in a])
    for arm in spec.arms:  # validate every arm and space before Ray starts
        build_space(spec.search, arm_config(spec, arm))
    if spec.dry_run:
        for arm in spec.arms:
            cfg = arm_config(spec, arm)
            print(f"{arm}: {spec.arms[arm]} epochs={cfg.epochs} space="
                  f"{ {k: (d.low, d.high, d.log) for k, d in build_space(spec.search, cfg).items()} }")
        return 0
    store = Store(spec.results_dir, spec.name)
    store.lock()
    try:
        for arm in spec.arms:
            cfg = arm_config(spec, arm)
            load_graphsets(cfg.dataset, **cfg.data_kwargs)  # build the cache once, in the driver
        start_ray(spec.ray_address)
        for arm in spec.arms:
            n = run_search(spec, arm, store)
            best = best_trial(store, arm)
            print(f"{arm}: {n} new search trials", flush=True)
            if best is not None:
                final_evaluation(spec, arm, best, store)
        print(summary(spec, store))
    finally:
        store.unlock()
    return 0
