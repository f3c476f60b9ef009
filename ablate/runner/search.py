"""Optuna hyper-parameter search through Ray Tune: one persistent TPE study per arm.

A search study (``studies/NAME.yaml`` with ``kind: search``) names ``arms``
(fixed axes such as dataset / backbone / supervision), a ``search:`` space
(threshold, kl_weight, init_scale, ratio as ranges; scorer, init_dist as
choices) and the search budget. ``python -m ablate.run study=threshold_search``
then, per arm:

1. runs Ray Tune with ``OptunaSearch`` (TPE, seeded) over the space; one Tune
   trial trains every member of one configuration jointly, epoch by epoch
   (``ablate.trial.graph.fit`` with its ``on_epoch`` callback), and reports the
   objective after each epoch. A member is one search seed on the val split, or,
   with ``cv_folds: k``, one (fold, seed) of k-fold cross-validation over the
   train + val graphs (`cv_splits`; the reference's TU protocol). The objective
   is the mean validation accuracy over the members, or (``objective:
   mean_minus_std``, the reference's TU criterion) the mean minus the standard
   deviation over folds. Only the train and val splits reach the trial
   (`_search_splits`): the objective never sees a test split.
2. prunes bad configurations with ASHA on that per-epoch metric (OptunaSearch
   hard-codes a no-op pruner and sends Optuna the last reported value, which is
   the objective, so the scheduler prunes and the final epoch is reported last).
3. keeps the Optuna study in ``RESULTS/STUDY/ARM/optuna.db`` (SQLite): rerunning
   the same command adds ``n_trials`` more (or up to ``max_trials`` in total);
   a killed driver loses at most the trials that were running.
4. writes every finished search trial (one row per member, split ``val``) to the
   study's Parquet store with the columns ``optuna_trial``, ``pruned`` and ``fold``, then
   evaluates the best unpruned configuration, the reference threshold of
   SPEC §3 and any ``baselines`` rows on fresh ``final_seeds`` over every split
   (role ``tuned`` / ``reference`` / the baseline's name), on the dataset recipe
   with the ``final_data`` overrides (e.g. ``final: true``: final models train on
   train + val), and prints the summary table (`summary`).
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

METRIC = "val_acc"  # the objective: mean validation accuracy over the members (see `objective`)
MODE = "max"
SEARCH_SPLITS = ("train", "val")  # the only splits a search trial may read
RANGES = ("threshold", "kl_weight", "init_scale", "ratio")  # searched as {low, high, log}
CHOICES = ("scorer", "init_dist")  # searched as {choices: [...]}
PARAMS = RANGES + CHOICES  # searchable axes
OBJECTIVES = ("mean", "mean_minus_std")  # mean val accuracy; or minus its std over folds
_RUN_KEYS = ("results_dir", "ray_address", "dry_run", "arms", "n_trials", "max_trials",
             "sampler_seed", "seeds", "final_seeds", "grace_period", "reduction_factor",
             "max_concurrent", "cpus_per_trial", "cv_folds", "objective")


@dataclass
class SearchSpec:
    """A search study after command-line overrides."""

    name: str
    description: str = ""
    fixed: dict = field(default_factory=dict)  # TrialConfig axes shared by every arm
    data: dict = field(default_factory=dict)  # dataset recipe overrides
    arms: dict = field(default_factory=dict)  # arm name -> its fixed axes
    search: dict = field(default_factory=dict)  # param -> {low, high, log, when} or {choices, when}
    seeds: list = field(default_factory=lambda: [0, 1, 2])  # trained inside every search trial
    cv_folds: int = 0  # k >= 2: k-fold CV over train + val graphs; 0: train on train, score val
    objective: str = "mean"  # mean val accuracy, or mean_minus_std (over folds; reference TU)
    final_data: dict = field(default_factory=dict)  # recipe overrides for the final evaluation only
    reference: dict | None = None  # axes of the final 'reference' row; None = SPEC §3 threshold
    baselines: dict = field(default_factory=dict)  # role -> axes: extra rows of the final evaluation
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
    from ablate.runner.study import STUDIES_DIR

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

    from ablate.runner.study import _config_fields, _seed_list

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
        elif key.startswith("final_data."):
            spec.final_data[key[11:]] = value
        elif key.startswith("search."):
            parts = key.split(".")
            if len(parts) != 3 or parts[1] not in PARAMS:
                raise ConfigError(f"{key}: write search.PARAM.KEY with PARAM one of {PARAMS}")
            spec.search.setdefault(parts[1], {})[parts[2]] = value
        elif key in fields:
            spec.fixed[key] = value
        else:
            raise ConfigError(f"unknown key {key!r}; valid: {', '.join(_RUN_KEYS)}, data.KEY, "
                              f"final_data.KEY, search.PARAM.KEY, or a trial axis "
                              f"({', '.join(sorted(fields))})")
    spec.seeds, spec.final_seeds = _seed_list(spec.seeds), _seed_list(spec.final_seeds)
    if arms_wanted is not None:
        missing = [a for a in arms_wanted if a not in spec.arms]
        if missing:
            raise ConfigError(f"arms: unknown arm {missing[0]!r}; valid choices: {', '.join(spec.arms)}")
        spec.arms = {a: spec.arms[a] for a in arms_wanted}
    if not spec.arms:
        raise ConfigError(f"study {name}: no arms to search (section 'arms')")
    _check_protocol(spec)
    return spec


def _check_protocol(spec: SearchSpec) -> None:
    """Folds, objective, members, search space and baselines of a spec, or a ConfigError."""
    missing = [f"data.{k}" for k, v in spec.data.items() if v == "???"]
    if missing:
        raise ConfigError(f"study {spec.name} needs {missing[0]}=VALUE on the command line")
    if spec.data.get("final"):
        raise ConfigError("data.final=true would let the search score graphs it trained on: "
                          "write it under final_data (the final evaluation only)")
    k = spec.cv_folds
    if isinstance(k, bool) or not isinstance(k, int) or k == 1 or k < 0:
        raise ConfigError(f"cv_folds must be 0 (score the val split) or an integer >= 2, got {k!r}")
    if spec.objective not in OBJECTIVES:
        raise ConfigError(f"objective must be one of {', '.join(OBJECTIVES)}, got {spec.objective!r}")
    if len(spec.seeds) * max(k, 1) < 3:
        raise ConfigError(f"seeds: the objective is a mean over >= 3 trained models (seeds x "
                          f"cv_folds), got seeds {spec.seeds} and cv_folds={k}")
    for p, d in spec.search.items():
        if p in RANGES and isinstance(d, dict) and {"low", "high"} <= set(d):
            continue
        if p in CHOICES and isinstance(d, dict) and isinstance(d.get("choices"), list) \
                and d["choices"]:
            continue
        raise ConfigError(f"search.{p}: need one of {RANGES} with low and high, or one of "
                          f"{CHOICES} with a non-empty list of choices")
    for role, axes_ in spec.baselines.items():
        if role in ("search", "tuned", "reference") or not isinstance(axes_, dict):
            raise ConfigError(f"baselines.{role}: a baseline is a new role name with a mapping "
                              "of axes, e.g. global_pool: {pool_layers: [], supervision: unsup}")


def arm_config(spec: SearchSpec, arm: str, **params: Any):
    """The resolved TrialConfig of `arm` with the given searched values and the search seeds."""
    from ablate.runner.study import make_config, resolve_config

    axes = {**{"data." + k: v for k, v in spec.data.items()}, **spec.fixed, **spec.arms[arm],
            **params, "study": spec.name, "seeds": params.pop("seeds", spec.seeds)}
    return resolve_config("graph", make_config("graph", axes))


def final_config(spec: SearchSpec, arm: str, **params: Any):
    """`arm_config` on the final-evaluation recipe (``final_data`` overrides) with the final seeds."""
    final = {"data." + k: v for k, v in spec.final_data.items()}
    return arm_config(spec, arm, **{"seeds": spec.final_seeds, **final, **params})


def build_space(search: dict, cfg) -> dict:
    """Optuna distributions for one arm: the parameters whose ``when`` matches its fixed axes."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    space = {}
    for name, d in search.items():
        when = d.get("when") or {}
        if not all(getattr(cfg, k) in (v if isinstance(v, list) else [v]) for k, v in when.items()):
            continue
        if name in CHOICES:
            space[name] = CategoricalDistribution(list(d["choices"]))
        else:
            space[name] = FloatDistribution(float(d["low"]), float(d["high"]), log=bool(d.get("log")))
    if not space:
        raise ConfigError("search: no parameter applies to this arm (check the 'when' conditions)")
    return space


# ----------------------------------------------------------------------------- worker side


def _search_splits(cfg) -> dict:
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
    import numpy as np

    from ablate.data import GraphSet

    if (a.edge_weight is None) != (b.edge_weight is None):
        raise ValueError("cannot join splits with and without edge weights")
    return GraphSet(
        x=np.concatenate([a.x, b.x]), gt=np.concatenate([a.gt, b.gt]),
        node_ptr=np.concatenate([a.node_ptr, b.node_ptr[1:] + a.node_ptr[-1]]),
        edge_index=np.concatenate([a.edge_index, b.edge_index], axis=1),
        edge_ptr=np.concatenate([a.edge_ptr, b.edge_ptr[1:] + a.edge_ptr[-1]]),
        y=np.concatenate([a.y, b.y]),
        edge_weight=None if a.edge_weight is None else np.concatenate([a.edge_weight,
                                                                       b.edge_weight]))


def objective(accs: list[float], groups: int, kind: str = "mean") -> float:
    """The search objective of one epoch: accs of the members, fold-major in `groups` groups.

    "mean": mean over all members. "mean_minus_std": mean minus the (population) standard
    deviation of the per-group means, the reference's TU cross-validation criterion.
    """
    import numpy as np

    per_group = np.asarray(accs, dtype=np.float64).reshape(groups, -1).mean(axis=1)
    value = float(per_group.mean())
    return value - float(per_group.std()) if kind == "mean_minus_std" else value


def members(spec: SearchSpec, cfg) -> list[tuple[int, int]]:
    """(fold, seed) of every model one search trial trains, fold-major; fold -1 without CV."""
    folds = range(spec.cv_folds) if spec.cv_folds else [-1]
    return [(f, s) for f in folds for s in cfg.seeds]


class _Stop(Exception):
    """Raised in a seed thread when the trial is stopped (ASHA) or fails."""


def train_jointly(cfg, splits: dict | list[dict],
                  report: Callable[[int, list[float]], None]) -> None:
    """Train every seed of `cfg` in lockstep, one epoch at a time; ``report(epoch, val_accs)``.

    `splits` is one {train, val} dict, or a list of them (cross-validation folds):
    then every (fold, seed) is a member, fold-major, and `val_accs` has one entry
    per member. Each member runs ``ablate.trial.graph.fit`` in its own thread; its
    ``on_epoch`` callback evaluates its val batches and hands control back, so
    exactly one member computes at a time (the trial's CPU budget) and all
    members finish epoch e before `report` sees it. If `report` raises (Tune
    stops the trial), the member threads are stopped before this returns.
    """
    import torch

    from ablate.models.network import GraphNet
    from ablate.trial.batches import TrainBatches, eval_batches
    from ablate.trial.graph import evaluate, fit, pick_device

    device = pick_device(cfg.device)
    folds = splits if isinstance(splits, list) else [splits]
    every = [g for f in folds for g in f.values()]
    in_ch = folds[0]["train"].num_features
    out_ch = 1 if cfg.task == "regression" else int(max(int(g.y.max()) for g in every) + 1)
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
            train = TrainBatches(split["train"], device)
            if cfg.supervision == "weak":
                from ablate.trial.graph import _weak_targets

                _weak_targets(cfg, {**split}, train, seed, device, in_ch, out_ch)
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

    threads = [threading.Thread(target=run, args=(i, f, s), daemon=True)
               for i, (f, s) in enumerate(jobs)]
    for t in threads:
        t.start()
    try:
        for epoch in range(1, cfg.epochs + 1):
            accs = []
            for i in range(len(threads)):
                turns[i].release()  # member i trains one epoch and evaluates
                j, e, acc = results.get()
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


def search_trainable(config: dict, base: dict) -> None:
    """Tune function trainable: one configuration, its members trained jointly, objective per epoch."""
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
    folds = cv_splits(splits, spec.cv_folds) if spec.cv_folds else splits
    groups = spec.cv_folds or len(cfg.seeds)

    def report(epoch: int, accs: list[float]) -> None:
        sd = statistics.stdev(accs) if len(accs) > 1 else 0.0
        tune.report({"epoch": epoch, "seed_accs": json.dumps(accs), "val_acc_std": sd,
                     "splits": ",".join(sorted(splits)),
                     METRIC: objective(accs, groups, spec.objective)})

    train_jointly(cfg, folds, report)


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
            who = members(spec, cfg)
            accs = json.loads(res.get("seed_accs", "[]")) or [math.nan] * len(who)
            epoch = int(res.get("epoch", 0))
            common = {**axes(cfg), "search_arm": arm, "role": "search", "optuna_trial": int(number),
                      "pruned": bool(status == "ok" and epoch < epochs), "epochs_run": epoch,
                      "objective": float(res.get(METRIC, math.nan))}
            rows = [{**common, "seed": s, "fold": f, "split": "val", "accuracy": float(a),
                     "status": status, "error": error} for (f, s), a in zip(who, accs)]
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
    """The best unpruned search trial of `arm` in the store (highest objective, the value Optuna
    was told): params, objective, val accuracy mean/std over its members, optuna number."""
    df = store.read()
    if df.empty or "role" not in df:
        return None
    df = df[(df.role == "search") & (df.search_arm == arm) & (df.status == "ok")]
    n_total, n_pruned = df.optuna_trial.nunique(), df[df.pruned.astype(bool)].optuna_trial.nunique()
    df = df[~df.pruned.astype(bool)]
    if df.empty:
        return None
    g = df.groupby("optuna_trial").agg(mean=("accuracy", "mean"), std=("accuracy", "std"),
                                       n=("accuracy", "size"), objective=("objective", "first"))
    g["objective"] = g["objective"].fillna(g["mean"])
    number = int(g["objective"].idxmax())
    row = df[df.optuna_trial == number].iloc[0]
    return {"optuna_trial": number, "val_mean": float(g.loc[number, "mean"]),
            "val_std": float(g.loc[number, "std"]), "objective": float(g.loc[number, "objective"]),
            "n_trials": int(n_total), "n_pruned": int(n_pruned),
            "params": {p: (str(row[p]) if p in CHOICES else float(row[p])) for p in PARAMS}}


def final_jobs(spec: SearchSpec, arm: str, best: dict) -> dict:
    """Role -> config of the final evaluation: tuned, reference (the spec's ``reference`` axes,
    else the SPEC §3 threshold) and every baseline, on the final seeds and recipe."""
    from ablate.config import recipe

    base = arm_config(spec, arm)
    ref = spec.reference if spec.reference is not None else {
        "threshold": recipe(base.dataset)["thresholds"][base.supervision]}
    jobs = {"tuned": final_config(spec, arm, **{k: v for k, v in best["params"].items()
                                                 if k in spec.search}),
            "reference": final_config(spec, arm, **ref)}
    for role, overrides in spec.baselines.items():
        jobs[role] = final_config(spec, arm, **overrides)
    return jobs


def final_evaluation(spec: SearchSpec, arm: str, best: dict, store) -> None:
    """Train and evaluate the `final_jobs` configs on fresh seeds, every split (Ray tasks)."""
    import ray

    from ablate.config import trial_id
    from ablate.data import dataset_recipe_hash
    from ablate.trial.graph import run_trial_full

    jobs = final_jobs(spec, arm, best)
    done = store.completed()
    ids = {role: f"{arm}-final-{trial_id(c, dataset_recipe_hash(c.dataset, c.data_kwargs))}"
           for role, c in jobs.items()}
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
    """Per arm: tuned vs reference (and baselines), search val mean +- std, final val/test."""
    import pandas as pd

    df = store.read()
    lines = []
    for arm in spec.arms:
        best = best_trial(store, arm)
        if best is None:
            lines.append(f"{arm}: no finished unpruned trial yet")
            continue
        roles = ["tuned", "reference", *spec.baselines]
        fin = df[(df.search_arm == arm) & df.role.isin(roles)]
        tuned_ids = fin[(fin.role == "tuned") & (fin.optuna_trial == best["optuna_trial"])].trial_id
        fin = fin[(fin.role != "tuned") | fin.trial_id.isin(set(tuned_ids))]
        over = (f"{spec.cv_folds}-fold CV x seeds {spec.seeds}" if spec.cv_folds
                else f"seeds {spec.seeds}")
        lines.append(f"== {arm}: {best['n_trials']} search trials ({best['n_pruned']} pruned by ASHA), "
                     f"best #{best['optuna_trial']} "
                     f"(objective {best['objective']:.3f}; val {best['val_mean']:.3f} +- "
                     f"{best['val_std']:.3f} over {over}); final seeds {spec.final_seeds}"
                     + (f", final recipe {spec.final_data}" if spec.final_data else ""))
        rows = []
        for role in roles:
            part = fin[fin.role == role]
            if part.empty:
                continue
            r = {"config": role, "threshold": f"{part.threshold.iloc[0]:.4g}"}
            for p in build_space(spec.search, arm_config(spec, arm)):
                if p != "threshold":
                    v = part[p].iloc[0]
                    r[p] = v if isinstance(v, str) else f"{v:.4g}"
            r["search val"] = (f"{best['val_mean']:.3f}+-{best['val_std']:.3f}" if role == "tuned"
                               else "-")
            order = sorted(part.split.unique(), key=lambda x: (x != "val", x))
            for split in order:
                g = part[part.split == split]
                name = "val (in train)" if split == "val" and spec.final_data.get("final") else split
                r[name] = f"{g.accuracy.mean():.3f}+-{g.accuracy.std():.3f}"
            rows.append(r)
        if rows:
            lines.append(pd.DataFrame(rows).to_string(index=False))
    return "\n".join(lines)


def main(name: str, argv: list[str]) -> int:
    """CLI entry for ``kind: search`` studies (called by ablate.run)."""
    from ablate.data import load_graphsets
    from ablate.runner.execution import start_ray
    from ablate.runner.store import Store

    spec = load_search_spec(name, [a for a in argv if "=" in a])
    for arm in spec.arms:  # validate every arm, space and final row before Ray starts
        build_space(spec.search, arm_config(spec, arm))
        final_jobs(spec, arm, {"params": {}})
    if spec.dry_run:
        for arm in spec.arms:
            cfg = arm_config(spec, arm)
            space = {k: (tuple(d.choices) if hasattr(d, "choices") else (d.low, d.high, d.log))
                     for k, d in build_space(spec.search, cfg).items()}
            print(f"{arm}: {spec.arms[arm]} epochs={cfg.epochs} cv_folds={spec.cv_folds} "
                  f"space={space} final={sorted(final_jobs(spec, arm, {'params': {}}))}")
        return 0
    store = Store(spec.results_dir, spec.name)
    store.lock()
    try:
        for arm in spec.arms:  # build the caches once, in the driver (search and final recipes)
            for cfg in (arm_config(spec, arm), final_config(spec, arm)):
                load_graphsets(cfg.dataset, **cfg.data_kwargs)
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
