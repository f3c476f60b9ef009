"""The search of one arm (the driver side): a persistent Optuna study driven through Ray Tune.

`run_search` runs Ray Tune with ``OptunaSearch`` (TPE, seeded) and ASHA over the
arm's space; every Tune trial runs `trainable.search_trainable`. The Optuna
study lives in ``RESULTS/STUDY/ARM/optuna.db`` (SQLite, `open_study`): a rerun
adds ``n_trials`` more, or tops the study up to ``max_trials`` finished trials.
Each finished Tune trial is written to the study's Parquet store as it ends,
one row per member (`StoreWriter`).

The Optuna trial number reaches Tune through Optuna's public define-by-run API:
`DefineSpace` suggests the arm's parameters on the Optuna trial Tune asked for
and returns ``{"optuna_trial": trial.number}``, which OptunaSearch merges into
the Tune trial's config; the store's ``optuna_trial`` column is read from there.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.runner.execute.signals import handlers_kept_through_tune
from ablate.runner.study.search_spec import (
    METRIC,
    MODE,
    PARAMS,
    SearchSpec,
    arm_config,
    build_space,
    members,
)

if TYPE_CHECKING:
    import optuna
    import pandas as pd
    from ray import tune
    from ray.tune.experiment import Trial as TuneTrial

    from ablate.config import TrialConfig
    from ablate.runner.execute.store import Store


@dataclass
class DefineSpace:
    """Optuna define-by-run search space for ``OptunaSearch``: suggests every distribution of
    `space` on the trial and returns its number as the constant ``optuna_trial``."""

    space: dict  # name -> optuna distribution (`build_space`)

    def __call__(self, trial: optuna.Trial) -> dict:
        from optuna.distributions import CategoricalDistribution

        for name, d in self.space.items():
            if isinstance(d, CategoricalDistribution):
                trial.suggest_categorical(name, list(d.choices))
            else:
                trial.suggest_float(name, d.low, d.high, log=d.log)
        return {"optuna_trial": trial.number}


def db_path(spec: SearchSpec, arm: str) -> Path:
    """The SQLite file of the arm's Optuna study."""
    return Path(spec.results_dir) / spec.name / arm / "optuna.db"


# Study settings that make an arm's objective values comparable: an arm's Optuna study holds
# values of one of each (`settings_path`), `entry._one_config_per_arm` refuses another
OBJECTIVE_SETTINGS = ("cv_folds", "objective")
SETTINGS_FILE = "settings.json"


def settings_path(spec: SearchSpec, arm: str) -> Path:
    """The record of the settings the arm's Optuna study searches with (`OBJECTIVE_SETTINGS`),
    beside its SQLite file: written by the arm's first search (`write_settings`)."""
    return db_path(spec, arm).with_name(SETTINGS_FILE)


def write_settings(spec: SearchSpec, arm: str) -> None:
    """Record the arm's `OBJECTIVE_SETTINGS` (atomically) unless they are recorded: a store
    written before the record gets it from its first run since (which the rerun check let
    through: the same settings as its rows show)."""
    from ablate.atomic import atomic_write

    path = settings_path(spec, arm)
    if not path.exists():
        data = json.dumps({k: getattr(spec, k) for k in OBJECTIVE_SETTINGS}, sort_keys=True)
        atomic_write(path, lambda f: f.write(data.encode() + b"\n"))


def stored_settings(spec: SearchSpec, arm: str, rows: pd.DataFrame | None) -> dict:
    """The `OBJECTIVE_SETTINGS` the arm's stored search ran with: its record
    (`settings_path`); for a store written before the record, what its search rows (`rows`,
    the arm's, from `Store.read`) show: ``cv_folds`` from the members' ``fold`` (-1: none),
    ``objective`` from an ok trial whose stored objective is the mean of its members'
    accuracies or that less their spread (`trainable.objective`; trials whose folds or seeds
    all scored alike cannot tell, and a store with none that can leaves it out). A record that
    is no JSON object (truncated, edited by hand) is one `ConfigError` line, a damaged store."""
    path = settings_path(spec, arm)
    if path.exists():
        try:
            held = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            held = e
        if not isinstance(held, dict):
            from ablate.errors import ConfigError

            why = f"{type(held).__name__}: {held}" if isinstance(held, Exception) else "not a JSON object"
            raise ConfigError(f"arm {arm}: {path} is not the record of its search settings a search "
                              f"writes ({why}); restore it or give another results_dir=")
        return {k: held[k] for k in OBJECTIVE_SETTINGS if k in held}
    if rows is None or rows.empty:
        return {}
    held = {}
    if "fold" in rows:
        folds = {int(f) for f in rows["fold"].dropna()}
        held["cv_folds"] = 0 if folds <= {-1} else max(folds) + 1
    kind = _objective_kind(rows, held.get("cv_folds", 0))
    if kind:
        held["objective"] = kind
    return held


def _objective_kind(rows, cv_folds: int) -> str | None:
    """Which objective the stored search `rows` were scored by ('mean' or 'mean_minus_std'),
    or None when no ok trial tells."""
    if not {"objective", "accuracy", "status", "optuna_trial"} <= set(rows.columns):
        return None
    for _, trial in rows[rows.status == "ok"].groupby("optuna_trial", sort=True):
        value = float(trial["objective"].iloc[0])
        groups = (trial.groupby("fold")["accuracy"].mean() if cv_folds else trial["accuracy"])
        mean, spread = float(groups.mean()), float(groups.std(ddof=0))
        if math.isnan(value) or math.isnan(mean) or spread < 1e-9:
            continue
        for kind, score in (("mean", mean), ("mean_minus_std", mean - spread)):
            if abs(value - score) < 1e-9:
                return kind
    return None


def create_db(db: Path, arm: str) -> None:
    """Create the Optuna SQLite file with `ablate.atomic.atomic_file` (built under a temp name,
    then renamed into place).

    Optuna builds its schema in several statements; a driver killed in between would
    leave a half-made database that no rerun can open. Temp files a killed run left are removed.
    """
    import optuna

    from ablate.atomic import atomic_file, stale_temps

    for old in stale_temps(db):
        old.unlink(missing_ok=True)

    def make(tmp: Path) -> None:
        storage = optuna.storages.RDBStorage(f"sqlite:///{tmp}")
        optuna.create_study(storage=storage, study_name=arm, direction="maximize")
        storage.engine.dispose()

    atomic_file(db, make)


def open_study(spec: SearchSpec, arm: str) -> tuple[optuna.storages.RDBStorage, optuna.Study]:
    """The arm's persistent Optuna study (SQLite); stale RUNNING trials of a killed run become FAIL."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    db = db_path(spec, arm)
    if not db.exists():
        create_db(db, arm)
    storage = optuna.storages.RDBStorage(f"sqlite:///{db}")
    study = optuna.create_study(storage=storage, study_name=arm, direction="maximize",
                                load_if_exists=True)
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)
    return storage, study


def say(line: str) -> None:
    """A search study's progress line (stderr; the summary goes to stdout)."""
    print(line, file=sys.stderr, flush=True)


def store_writer(store: Store, spec: SearchSpec, arm: str, epochs: int,
                 n_new: int = 0) -> tune.Callback:
    """A Tune callback that writes each finished search trial to the Parquet store (one row
    per member), lists the Optuna numbers it wrote in ``.written`` and says one line per
    trial (`say`): its number, how it ended, its objective, and the arm's count so far.

    A failed attempt that Tune retries (`max_failures`, `run_search`) is recorded as a grid
    trial's is: its rows are written with status ``error``, its error in one line and its
    ``attempt`` number, and a line goes to ``failures.jsonl``; the next attempt's rows replace
    them (``attempt`` says which try it was). ``.retries`` counts the retries. Every row
    carries what a grid trial's carries of its attempt: ``created_at`` (when the driver wrote
    it), ``ray_version`` and ``node`` (`attempt_node`); a failed attempt's line in
    failures.jsonl has its ``node`` and ``created_at``, and its progress line its error
    (`short_error`)."""
    import ray
    from ray import tune

    from ablate.config import axes
    from ablate.runner.execute.store import now_iso

    t0 = time.time()

    class StoreWriter(tune.Callback):
        def __init__(self):
            self.last: dict[str, dict] = {}
            self.written: list[int] = []
            self.attempts: dict[str, int] = {}  # Tune trial id -> its attempts recorded so far
            self.pruned = self.failed = self.retries = 0

        def on_trial_result(self, iteration: int, trials: list[TuneTrial], trial: TuneTrial,
                            result: dict, **info: Any) -> None:
            self.last[trial.trial_id] = result

        def on_trial_complete(self, iteration: int, trials: list[TuneTrial], trial: TuneTrial,
                              **info: Any) -> None:
            self.write(trial, "ok", "")

        def on_trial_recover(self, iteration: int, trials: list[TuneTrial], trial: TuneTrial,
                             **info: Any) -> None:
            from ablate.runner.execute.tune_callback import trial_error

            # an attempt failed and Tune runs the trial again: recorded, then retried
            self.write(trial, "error", trial_error(trial), final=False)

        def on_trial_error(self, iteration: int, trials: list[TuneTrial], trial: TuneTrial,
                           **info: Any) -> None:
            from ablate.runner.execute.tune_callback import trial_error

            # its own exception in one line, as a grid trial's failed rows hold theirs
            self.write(trial, "error", trial_error(trial))

        def write(self, trial: TuneTrial, status: str, error: str, final: bool = True) -> None:
            res = self.last.pop(trial.trial_id, {}) if not final else \
                self.last.get(trial.trial_id, {})
            attempt = self.attempts.get(trial.trial_id, 0) + 1
            self.attempts[trial.trial_id] = attempt
            number = int(trial.config.get("optuna_trial", -1))
            params = {k: trial.config[k] for k in PARAMS if k in trial.config}
            cfg = arm_config(spec, arm, **params)
            who = members(spec, cfg)
            accs = json.loads(res.get("seed_accs", "[]")) or [math.nan] * len(who)
            epoch = int(res.get("epoch", 0))
            common = {**axes(cfg), "search_arm": arm, "role": "search", "optuna_trial": number,
                      "pruned": bool(status == "ok" and epoch < epochs), "epochs_run": epoch,
                      "objective": float(res.get(METRIC, math.nan))}
            rows = [{**common, "seed": s, "fold": f, "split": "val", "accuracy": float(a),
                     "status": status, "error": error} for (f, s), a in zip(who, accs)]
            tid = f"{arm}-trial{number:05d}"
            extra = {"attempt": attempt, "created_at": now_iso(), "ray_version": ray.__version__,
                     "node": attempt_node(trial, res)}
            store.write(tid, rows, extra=extra)
            if status != "ok":
                store.log_failure(tid, attempt, status, error, extra["node"], extra["created_at"])
            m, s = divmod(int(time.time() - t0), 60)
            if not final:
                self.retries += 1
                say(f"[{spec.name}] {arm}: search trial #{number} failed (attempt {attempt} of "
                    f"{int(spec.max_failures) + 1}), run again: {short_error(error)} | "
                    f"{m}:{s:02d} elapsed")
                return
            self.written.append(number)
            self.pruned += common["pruned"]
            self.failed += status != "ok"
            how = ("failed" if status != "ok" else f"pruned by ASHA at epoch {epoch}"
                   if common["pruned"] else f"finished {epoch} epochs")
            if attempt > 1:
                how += f" (attempt {attempt})"
            why = f": {short_error(error)}" if status != "ok" else ""
            say(f"[{spec.name}] {arm}: search trial #{number} {how}, val objective "
                f"{common['objective']:.3f}; {len(self.written)}/{n_new or '?'} done "
                f"({self.pruned} pruned, {self.failed} failed){why} | {m}:{s:02d} elapsed")

    return StoreWriter()


def attempt_node(trial: TuneTrial, result: dict) -> str:
    """The node (IP) an attempt of a search trial ran on: its last result's (Tune's
    ``node_ip``), else where Tune placed the trial; '' for an attempt that failed before its
    first epoch was reported (as a grid trial's lost worker records none)."""
    return str(result.get("node_ip") or getattr(trial, "node_ip", None) or "")


SHORT_ERROR = 200  # characters of an error a progress line shows (the rows keep it whole)


def short_error(error: str, limit: int = SHORT_ERROR) -> str:
    """An error for a progress line: one line, cut to `limit` characters with '...'."""
    line = " ".join(str(error).split())
    return line if len(line) <= limit else line[:limit - 3].rstrip() + "..."


def trials_to_run(spec: SearchSpec, study: optuna.Study) -> int:
    """New trials for this run: ``n_trials``, capped so that COMPLETE ones reach ``max_trials``."""
    import optuna

    done = sum(t.state == optuna.trial.TrialState.COMPLETE for t in study.get_trials(deepcopy=False))
    n_new = int(spec.n_trials)
    if spec.max_trials is not None:
        n_new = min(n_new, int(spec.max_trials) - done)
    return max(n_new, 0)


def run_search(spec: SearchSpec, arm: str, store: Store, started: bool = True) -> int:
    """Run this arm's Optuna/Tune search (n_trials more, up to max_trials); the trials written.

    Needs a running Ray (`ablate.runner.execute.ray_env.start_ray`)."""
    import optuna
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search import ConcurrencyLimiter

    from ablate.runner.execute.ray_env import tune_storage
    from ablate.runner.execute.tune_callback import (
        retry_only_what_may_pass,
        worker_deaths_as_trial_failures,
    )
    from ablate.runner.search.searcher import optuna_search
    from ablate.runner.search.trainable import search_trainable
    from ablate.user_code import import_paths

    cfg = arm_config(spec, arm)
    space = build_space(spec.search, cfg)
    storage, study = open_study(spec, arm)
    write_settings(spec, arm)  # what its objective values are of (the rerun check reads it)
    n_new = trials_to_run(spec, study)
    if n_new <= 0:
        say(f"[{spec.name}] {arm}: no search trial to run (max_trials={spec.max_trials} reached)")
        return 0
    say(f"[{spec.name}] {arm}: {n_new} search trial(s) to run, up to {spec.max_concurrent} at once "
        f"(Optuna TPE, ASHA), {cfg.epochs} epochs each at most")
    finished = sum(t.state.is_finished() for t in study.get_trials(deepcopy=False))
    sampler = optuna.samplers.TPESampler(seed=int(spec.sampler_seed) + finished)
    searcher = optuna_search(DefineSpace(space), sampler, arm, storage)
    scheduler = ASHAScheduler(time_attr="training_iteration", max_t=cfg.epochs,
                              grace_period=min(int(spec.grace_period), cfg.epochs),
                              reduction_factor=int(spec.reduction_factor))
    writer = store_writer(store, spec, arm, cfg.epochs, n_new)
    base = {"spec": spec, "arm": arm, "cpus": spec.cpus_per_trial,
            "cache_dir": os.environ.get("ABLATE_CACHE"), "import_paths": import_paths()}
    resources, pieces = search_resources(spec, cfg, base, started)
    fn = tune.with_resources(tune.with_parameters(search_trainable, base=base, pieces=pieces),
                             resources)
    worker_deaths_as_trial_failures()  # a memory kill reaches Tune as the worker's death
    retry_only_what_may_pass()  # Tune retries (max_failures) only what a retry may fix
    with tune_storage("search") as tmp, handlers_kept_through_tune():
        tune.Tuner(
            fn,
            tune_config=tune.TuneConfig(metric=METRIC, mode=MODE, num_samples=n_new,
                                        search_alg=ConcurrencyLimiter(searcher, spec.max_concurrent),
                                        scheduler=scheduler, reuse_actors=True),
            run_config=tune.RunConfig(name=f"{spec.name}-{arm}", storage_path=tmp, verbose=0,
                                      callbacks=[writer],
                                      failure_config=tune.FailureConfig(
                                          max_failures=int(spec.max_failures)),
                                      checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=False)),
        ).fit()
    return len(writer.written)


def search_resources(spec: SearchSpec, cfg: TrialConfig, base: dict,
                     started: bool = True) -> tuple[dict[str, float], dict]:
    """What one search trial asks of Ray and the data it needs on other nodes, as grid studies
    do (`ablate.runner.execute.driver`): its CPUs and the host memory of its members trained jointly
    (the trial kind's `host_memory` for cv_folds x seeds members on the arm's prepared data;
    a need no node holds is refused in one line), and the prepared file as object-store pieces
    when Ray has more than one node or was joined (`ablate.runner.execute.ray_env.RayMode`: the
    `ray_address` option, else $RAY_ADDRESS, the rule of grid studies). `base` gets the
    recipe's identity, which the worker needs to place the file."""
    import ray

    from ablate.runner.execute.ray_env import RayMode
    from ablate.runner.execute.ship import dataset_pieces
    from ablate.runner.plan.resources import check_memory, cluster_node_memory, trials_memory
    from ablate.runner.study.expand import make_trial

    trial = make_trial("graph", cfg)
    members = (spec.cv_folds or 1) * len(cfg.seeds)
    need = trials_memory([trial] * members) if trial.data_hash else None
    # the option, else $RAY_ADDRESS, as `start_ray` joins; a Ray already running in this process
    # when the study began (`started` False) counts as a cluster, as for grid studies
    mode = RayMode.of(spec.ray_address, started)
    ship = False
    if ray.is_initialized():  # (a Tuner stood in for by a test runs without Ray)
        warning = check_memory({"search": need}, cluster_node_memory(), embedded=mode.embedded)
        if warning:
            print(warning, flush=True)
        ship = mode.ship(len(ray.nodes()))
    base.update(dataset=trial.dataset, data_params=trial.data_params, data_hash=trial.data_hash)
    resources = {"cpu": spec.cpus_per_trial, "memory": float(need or 0)}
    return resources, dataset_pieces([trial], ship)

