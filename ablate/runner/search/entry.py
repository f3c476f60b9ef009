"""Optuna hyper-parameter search through Ray Tune: the entry point of ``kind: search`` studies.

A search study (``studies/NAME.yaml`` with ``kind: search``) names ``arms``
(fixed axes such as dataset / backbone / supervision), a ``search:`` space
(threshold, kl_weight, init_scale, ratio as ranges; scorer, init_dist as
choices) and the search budget. ``python -m ablate.run study=threshold_search``
runs `main`, which per arm

1. searches: one persistent Optuna (TPE) study in ``RESULTS/STUDY/ARM/optuna.db``
   driven through Ray Tune with ASHA pruning (`tuning.run_search`); every
   Tune trial trains the members of one configuration jointly on the train and
   val splits only (`trainable`), and is written to the study's store;
2. evaluates the best unpruned configuration, the reference and any baselines on
   fresh ``final_seeds`` over every split (`final.final_evaluation`);
3. prints the summary table (`final.summary`), and exits 1 when a search trial or final
   configuration of the run failed (stored as failed rows with their error in one line).

The modules: `search_spec` (the study file and overrides, composed by
`ablate.runner.study.compose`; arms and space), `trainable` (the Tune trainable),
`tuning` (Optuna study, Tune run, store rows), `searcher` (the OptunaSearch
of a run), `final` (best trial,
final evaluation, summary). Each name is imported from the module that defines it;
this one holds only the entry point (`main`), the dry-run text (`describe`), the checks
before Ray starts (`_distinct_arms`, `_one_config_per_arm`, `_recipe`, `_data_paths`) and the
embedded Ray's stop (`_stop_ray`).
"""

from __future__ import annotations

import sys

from ablate.errors import ConfigError
from ablate.runner.search.final import (
    best_trial,
    final_evaluation,
    final_jobs,
    search_failures,
    stored_rows,
    summary,
)
from ablate.runner.search.tuning import run_search
from ablate.runner.study.compose import locate_study
from ablate.runner.study.search_spec import (
    SearchSpec,
    arm_config,
    build_space,
    final_config,
    load_search_spec,
)


def describe(spec: SearchSpec) -> str:
    """The dry-run text: per arm its fixed axes, epochs, folds, space and final rows."""
    lines = []
    for arm in spec.arms:
        cfg = arm_config(spec, arm)
        space = {k: (tuple(d.choices) if hasattr(d, "choices") else (d.low, d.high, d.log))
                 for k, d in build_space(spec.search, cfg).items()}
        lines.append(f"{arm}: {spec.arms[arm]} epochs={cfg.epochs} dataset={cfg.dataset} "
                     f"cv_folds={spec.cv_folds} space={space} "
                     f"final={sorted(final_jobs(spec, arm, {'params': {}}))}")
    return "\n".join(lines)


def main(name: str, argv: list[str]) -> int:
    """CLI entry for ``kind: search`` studies (called by ablate.run with the whole argv)."""
    from ablate.data import load_graphsets
    from ablate.runner.execute.ray_env import start_ray
    from ablate.runner.execute.store import Store
    from ablate.runner.plan.checks import check_cluster_reachable, cluster_address

    spec = load_search_spec(name, argv)
    for arm in spec.arms:  # validate every arm, space, data recipe and final row before Ray starts
        build_space(spec.search, arm_config(spec, arm))
        for cfg in (arm_config(spec, arm), *final_jobs(spec, arm, {"params": {}}).values()):
            _recipe(cfg)
    _distinct_arms(spec)  # two arms alike would run one search twice: one line, exit 2
    notes = _data_paths(spec)  # a missing data.path: one line, exit 2, as in a grid study
    if spec.dry_run:
        print(describe(spec))
        for note in notes:
            print(f"note: {note}")
        return 0
    store = Store(spec.results_dir, spec.name)
    made = store.new_folders()  # taken away again if this first run is refused
    store.lock()
    started = False
    try:
        _one_config_per_arm(spec, store)
        store.keep_study_file(locate_study(name))  # the study file as run, beside its trials
        check_cluster_reachable(cluster_address(spec.ray_address))  # before the data is built
        for arm in spec.arms:  # build the caches once, in the driver (search and final recipes)
            for cfg in (arm_config(spec, arm), final_config(spec, arm)):
                try:
                    load_graphsets(cfg.dataset, **cfg.data_kwargs)
                except ConfigError as e:  # a data parameter or path refused (generators too);
                    # anything else (a damaged cache, a bug) is raised as it is, folder kept
                    raise ConfigError(f"dataset {cfg.dataset}: {e} (arm {arm}; dataset "
                                      "parameters are set as data.KEY=VALUE, final_data.KEY="
                                      "VALUE; arms=NAME runs only some arms)") from None
        started = start_ray(spec.ray_address)  # False: joined a Ray already running here
        failed, search_failed = [], []
        for arm in spec.arms:
            before = search_failures(stored_rows(store), arm)
            n = run_search(spec, arm, store, started)
            new = search_failures(stored_rows(store), arm).keys() - before.keys()
            if new:  # this run's (a failed trial's number is never run again)
                search_failed.append(f"{arm} {len(new)} of {n}")
            best = best_trial(store, arm)
            print(f"{arm}: {n} new search trials", flush=True)  # the per-trial lines: stderr
            if best is not None:
                failed += [f"{arm} {role}" for role in final_evaluation(spec, arm, best, store)]
        print(summary(spec, store))
        if search_failed:
            print(f"search trials failed in this run: {', '.join(search_failed)} (stored as "
                  "failed rows with their error; rerun the same command for new trials)",
                  flush=True)
        if failed:
            print(f"final evaluation failed for {', '.join(failed)} (stored as failed rows; "
                  "rerun the same command to run them again)", flush=True)
        if failed or search_failed:
            return 1
    except ConfigError:
        store.unlock()
        store.discard_new(made)  # only while it holds no result
        raise
    finally:
        store.unlock()
        if started:
            _stop_ray(store, embedded=not cluster_address(spec.ray_address))
    return 0


def _distinct_arms(spec: SearchSpec) -> None:
    """Two arms whose search and final configs are the same trials (every axis, data
    parameter and seed alike: the trial ids of `ablate.runner.study.expand.make_trial`) would
    run the same search twice, each into an Optuna study of its own, and train the same final
    rows: refused in one line naming them, before anything is written or Ray starts, a dry run
    too. Arms a study file tells apart become so when the command line sets for every arm
    what told them apart (``supervision=unsup`` on threshold_search, ``data.max_train_nodes=
    300`` on tu_search: dd_weak and dd300_weak)."""
    from ablate.runner.study.expand import make_trial

    seen: dict[tuple[str, ...], str] = {}
    for arm in spec.arms:
        key = tuple(make_trial("graph", cfg).trial_id
                    for cfg in (arm_config(spec, arm), final_config(spec, arm)))
        if key in seen:
            raise ConfigError(
                f"arms {seen[key]} and {arm} are the same configuration (every axis and data "
                f"parameter alike, e.g. once an override sets for every arm what told them "
                f"apart), so both would run the same search; run one of them (arms={seen[key]})")
        seen[key] = arm


def _one_config_per_arm(spec: SearchSpec, store) -> None:
    """An arm's Optuna study and its rows in the store are of one configuration: a run that
    gives the arm another value of any fixed axis than its stored search trials record (data
    set, data parameter, backbone, epochs, a free-form axis, ...: the whole resolved config a
    search trial records, `ablate.config.axes`, but the searched parameters, the seeds and what
    is no part of a trial's identity, `ablate.config.trial_id`), or another ``cv_folds`` or
    ``objective`` than its search ran with (`tuning.stored_settings`: objective values of
    another protocol cannot be compared in one Optuna study), is refused in one line before
    Ray starts, naming the arm, the axis or setting and both values, rather than continue the
    arm's study with trials of another configuration. Nothing stored is touched."""
    from ablate.runner.search.tuning import OBJECTIVE_SETTINGS, stored_settings

    df = stored_rows(store)
    searched_rows = not df.empty and "search_arm" in df and "role" in df
    for arm in spec.arms:
        rows = df[(df.search_arm == arm) & (df.role == "search")] if searched_rows else None
        if rows is not None and not rows.empty:
            searched = list(build_space(spec.search, arm_config(spec, arm)))
            given = {*spec.fixed, *spec.arms[arm]}  # named first: the axes a user sets
            for _, trial in rows.groupby("optuna_trial", sort=True):
                params = {p: _plain(trial[p].iloc[0]) for p in searched if p in trial}
                differs = _first_difference(arm_config(spec, arm, **params), trial,
                                            set(searched), given)
                if differs:
                    raise _another_search(arm, store, *differs, "an arm's Optuna study "
                                          "searches one configuration: every axis but the "
                                          "searched parameters and the seeds")
        held = stored_settings(spec, arm, rows)
        for key in OBJECTIVE_SETTINGS:
            if key in held and held[key] != getattr(spec, key):
                raise _another_search(arm, store, key, held[key], getattr(spec, key),
                                      "an arm's Optuna study compares objective values of one "
                                      "cv_folds and objective")


def _another_search(arm: str, store, axis: str, held, want, why: str) -> ConfigError:
    """The one-line refusal of a rerun that would continue `arm`'s search with another
    `axis` (or setting) value than its stored one."""
    return ConfigError(f"arm {arm}: {store.dir} holds its search on {axis} {held}, this run "
                       f"asks for {want}; give another results_dir= ({why})")


_UNSET = "(unset)"


def _first_difference(cfg, rows, searched: set, given: set) -> tuple[str, str, str] | None:
    """The first axis whose value in stored `rows` (one search trial's) differs from `cfg`'s,
    as (axis, stored value, this run's value), or None: the data set first, then the axes the
    study or command line sets (`given`), then every other. An axis a row lacks (a store
    written before the axis was added) holds its earlier value where `CHANGED_DEFAULTS` has
    one and is not compared otherwise; `lr_timing` counts only where a model drops its LR."""
    from ablate.config import CHANGED_DEFAULTS, EXECUTION_FIELDS, axes, lr_drops

    want = axes(cfg)
    skip = searched | {"seeds", *EXECUTION_FIELDS} | (set() if lr_drops(cfg) else {"lr_timing"})
    order = sorted((k for k in want if k not in skip),
                   key=lambda k: (k != "dataset", k not in given))  # stable: field order
    earlier = CHANGED_DEFAULTS["axes"]
    for k in order:
        if k in ("data_params", "extra"):
            prefix, mine = ("data." if k == "data_params" else "+"), _mapping(want[k])
            for blob in (rows[k].dropna().unique() if k in rows else ()):
                held = _mapping(blob)
                for key in sorted(set(mine) | set(held)):
                    if held.get(key, _UNSET) != mine.get(key, _UNSET):
                        return prefix + key, held.get(key, _UNSET), mine.get(key, _UNSET)
            continue
        values = [_plain(v) for v in rows[k].unique()] if k in rows else [None]
        for v in values:
            if v is None and k in earlier:  # stored before the axis: its earlier value
                v = earlier[k]
            if v is not None and v != want[k]:
                return k, v, want[k]
    return None


def _mapping(blob: str) -> dict:
    """A stored JSON object column (data_params, extra) as a dict; a data recipe's mirror
    (``url``) is no part of its identity (`ablate.config.trial_id`)."""
    import json

    out = json.loads(blob) if blob else {}
    out.pop("url", None)
    return out


def _plain(v):
    """A stored cell as a plain Python value: None for a missing one."""
    import pandas as pd

    if v is None or (not isinstance(v, str | bytes | list | tuple | dict) and pd.isna(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def _data_paths(spec: SearchSpec) -> list[str]:
    """The data folders of every arm's search and final configs checked by the grid studies'
    rule (`ablate.runner.plan.datasets.check_recipe_paths`: a ``data.path`` that does not
    exist, a half-filled or unwritable data folder, a pyg class that does not import) before
    anything is written or Ray starts; a dry run also asks the servers of the downloads a run
    would make, and gets a note per download."""
    from ablate.runner.plan.datasets import check_recipe_paths
    from ablate.runner.study.expand import make_trial

    trials = [make_trial("graph", cfg) for arm in spec.arms
              for cfg in (arm_config(spec, arm), *final_jobs(spec, arm, {"params": {}}).values())]
    return check_recipe_paths(trials, probe=spec.dry_run)


def _recipe(cfg) -> None:
    """A config's data recipe checked as a grid study's are (`ablate.data.resolve_params`)."""
    from ablate.data import dataset_recipe_hash

    try:
        dataset_recipe_hash(cfg.dataset, dict(cfg.data_params))
    except ConfigError as e:
        raise ConfigError(str(e) if str(e).startswith("data.") else f"data.*: {e}") from None


def _stop_ray(store, embedded: bool) -> None:
    """`shutdown_ray`, as a grid study's run does; the session's logs kept, and named, when a
    search trial failed."""
    from ablate.runner.execute.reap import shutdown_ray

    def failed() -> bool:
        df = store.read()
        return not df.empty and "role" in df and bool(((df.role == "search")
                                                       & (df.status != "ok")).any())

    logs = shutdown_ray(embedded, failed)
    if logs is not None:
        print(f"Ray's logs of this run: {logs}", file=sys.stderr, flush=True)
