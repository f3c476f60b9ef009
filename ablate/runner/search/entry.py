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
3. prints the summary table (`final.summary`).

The modules: `search_spec` (the study file and overrides, composed by
`ablate.runner.study.compose`; arms and space), `trainable` (the Tune trainable),
`tuning` (Optuna study, Tune run, store rows), `final` (best trial,
final evaluation, summary). Each name is imported from the module that defines it;
this one holds only the entry point (`main`), the dry-run text (`describe`), the checks
before Ray starts (`_one_dataset_per_arm`, `_recipe`) and the embedded Ray's stop (`_stop_ray`).
"""

from __future__ import annotations

import sys

from ablate.errors import ConfigError
from ablate.runner.search.final import best_trial, final_evaluation, final_jobs, summary
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
    if spec.dry_run:
        print(describe(spec))
        return 0
    store = Store(spec.results_dir, spec.name)
    made = store.new_folders()  # taken away again if this first run is refused
    store.lock()
    started = False
    try:
        _one_dataset_per_arm(spec, store)
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
        failed = []
        for arm in spec.arms:
            n = run_search(spec, arm, store, started)
            best = best_trial(store, arm)
            print(f"{arm}: {n} new search trials", flush=True)  # the per-trial lines: stderr
            if best is not None:
                failed += [f"{arm} {role}" for role in final_evaluation(spec, arm, best, store)]
        print(summary(spec, store))
        if failed:
            print(f"final evaluation failed for {', '.join(failed)} (stored as failed rows; "
                  "rerun the same command to run them again)", flush=True)
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


def _one_dataset_per_arm(spec: SearchSpec, store) -> None:
    """An arm's Optuna study and its rows in the store are of one data set: a run that gives
    the arm another (``dataset=`` on the command line replaces the arms' own) is refused in
    one line before Ray starts, rather than continue the arm's study with other data."""
    if not store.trial_files():
        return
    df = store.read()
    if df.empty or "search_arm" not in df or "dataset" not in df:
        return
    for arm in spec.arms:
        want = arm_config(spec, arm).dataset
        held = sorted(set(df[df.search_arm == arm].dataset.dropna()) - {want})
        if held:
            raise ConfigError(f"arm {arm}: {store.dir} holds its search on dataset {held[0]}, "
                              f"this run asks for {want}; give another results_dir= (an arm's "
                              "Optuna study searches one data set)")


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
