"""After the search of an arm: its best trial, the final evaluation on fresh seeds, the summary.

`best_trial` picks the best unpruned search trial from the store (the objective
Optuna was told). `final_jobs` lists the rows the final evaluation trains on
``final_seeds`` with the ``final_data`` recipe: ``tuned`` (that trial's values),
``reference`` (the spec's ``reference`` axes, else the SPEC §3 threshold) and
every baseline; `final_evaluation` trains them as Ray tasks (the trial engine's
``run_trial_full``, every split) and writes them to the store; `summary` is the
table printed at the end of a run.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ablate.runner.execute.ray_env import worker_env
from ablate.runner.study.search_spec import CHOICES, PARAMS, SearchSpec, arm_config, build_space, final_config

if TYPE_CHECKING:
    import pandas as pd

    from ablate.runner.execute.store import Store


def stored_rows(store: Store) -> pd.DataFrame:
    """The store's trial rows (`Store.read`); none (an empty frame) before its first trial."""
    import pandas as pd

    return store.read() if store.trial_files() else pd.DataFrame()


def best_trial(store: Store, arm: str) -> dict | None:
    """The best unpruned search trial of `arm` in the store (highest objective, the value Optuna
    was told): params, objective, val accuracy mean/std over its members, optuna number."""
    df = stored_rows(store)
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


FINAL_RETRIES = 2  # a final config that raises or loses its worker runs again up to this often
# (an error a retry may fix: `ablate.errors.retryable`, retried in its task as a grid trial is in
# its worker; a lost worker: Ray's `max_retries`; a task Ray does not retry, e.g. one no node
# can run, fails at once)


def final_evaluation(spec: SearchSpec, arm: str, best: dict, store: Store) -> list[str]:
    """Train and evaluate the `final_jobs` configs on fresh seeds, every split (Ray tasks);
    a row already in the store with the same config is skipped. A config that raises an
    error a retry may fix (`ablate.errors.retryable`, the rule of grid trials: not a config
    error) or whose worker dies is retried (`FINAL_RETRIES`); a config whose task still ends in a Ray
    error (`tune_callback.TRIAL_FAILURES`: its own exception, a worker or node that died, a
    memory-monitor kill, no node to run it) is stored as failed rows (`error_line`, one
    line) while the others go on; a rerun runs it again. Returns the failed roles."""
    import ray

    from ablate.errors import retryable
    from ablate.runner.execute.tune_callback import TRIAL_FAILURES, error_line
    from ablate.runner.search.tuning import say
    from ablate.runner.study.kinds import trial_kind
    from ablate.trial.graph import run_trial_full
    from ablate.trial.provenance import code_provenance
    from ablate.user_code import import_paths

    graph = trial_kind("graph")
    jobs = final_jobs(spec, arm, best)
    done = store.completed()
    ids = {role: f"{arm}-final-{graph.trial_id(c, graph.data_hash(c))}" for role, c in jobs.items()}
    cache, paths = os.environ.get("ABLATE_CACHE"), import_paths()

    @ray.remote(num_cpus=spec.cpus_per_trial, max_retries=FINAL_RETRIES, retry_exceptions=False)
    def _run(cfg):
        worker_env(cache, paths)  # the driver's cache and folders of user code
        for attempt in range(FINAL_RETRIES + 1):  # in the same worker, as a grid trial's retries
            try:
                return run_trial_full(cfg)
            except Exception as e:
                if attempt == FINAL_RETRIES or not retryable(e):
                    raise

    todo = {role: _run.remote(jobs[role]) for role in jobs if ids[role] not in done}
    if todo:
        say(f"[{spec.name}] {arm}: final evaluation of {', '.join(todo)} (best search trial "
            f"#{best['optuna_trial']}) on seeds {list(spec.final_seeds)}")
    failed = []
    for role, ref in todo.items():
        extra = {"search_arm": arm, "role": role, "pruned": False,
                 "optuna_trial": best["optuna_trial"] if role == "tuned" else -1}
        try:
            res = ray.get(ref)
        except TRIAL_FAILURES as e:  # any Ray error: the trial's, not the driver's
            error = error_line(e)
            cause = getattr(e, "cause", None)  # the task's own exception, if it raised one
            # an exception the task raised: retried in the task while a retry may fix it; any
            # other Ray error: how many attempts ran is not known here (Ray retries a task that
            # lost its worker, not one it could not schedule or one its memory monitor killed)
            how = (f"Ray retries a failed task up to {FINAL_RETRIES} times" if cause is None
                   else f"tried {FINAL_RETRIES + 1} times" if retryable(cause)
                   else "not retried: a retry cannot fix this error")
            say(f"[{spec.name}] {arm}: final {role} failed ({how}): {error}")
            cfg = jobs[role]
            base = {**graph.columns(cfg), **code_provenance()}
            rows = [{**base, "seed": s, "split": "test_orig", "status": "error", "error": error}
                    for s in cfg.seeds]
            store.write(ids[role], rows, [], extra=extra)
            failed.append(role)
            continue
        say(f"[{spec.name}] {arm}: final {role} done")
        store.write(ids[role], res.records, res.curves, extra=extra)
    return failed



def search_failures(df: pd.DataFrame, arm: str) -> dict[int, str]:
    """The failed search trials of `arm` in a store's rows (`Store.read`): Optuna number ->
    its error in one line (`tune_callback.trial_error`)."""
    if df.empty or "role" not in df:
        return {}
    bad = df[(df.role == "search") & (df.search_arm == arm) & (df.status != "ok")]
    return {int(n): str(g.error.iloc[0]) for n, g in bad.groupby("optuna_trial")}


def retries_line(df: pd.DataFrame, arm: str) -> str:
    """How many search trials of `arm` were run again after a failed attempt (Tune's retries,
    `max_failures`: the stored rows' ``attempt`` > 1) and how many of them passed, in one line;
    '' when none was. Every failed attempt has its line in failures.jsonl, as a grid trial's."""
    if df.empty or "role" not in df or "attempt" not in df:
        return ""
    rows = df[(df.role == "search") & (df.search_arm == arm)]
    retried = rows[rows.attempt.fillna(1) > 1].groupby("optuna_trial")
    if not len(retried):
        return ""
    passed = sum(bool((g.status == "ok").all()) for _, g in retried)
    return (f"{arm}: {len(retried)} search trial(s) run again after a failed attempt, {passed} "
            f"passed on a retry (the rows' attempt column; each failure in failures.jsonl)")


def failures_line(arm: str, failures: dict[int, str]) -> str:
    """How many search trials of `arm` failed and why, in one line: each distinct error once,
    with its count, the most frequent first."""
    from collections import Counter

    why = "; ".join(f"{n} x {error}" for error, n in Counter(failures.values()).most_common())
    return f"{arm}: {len(failures)} search trial(s) failed: {why}"


def summary(spec: SearchSpec, store: Store) -> str:
    """Per arm: tuned vs reference (and baselines), search val mean +- std, final val/test;
    the arm's failed search trials in one line (`failures_line`), and those run again after a
    failed attempt (`retries_line`)."""
    import pandas as pd

    df = stored_rows(store)
    lines = []
    for arm in spec.arms:
        best = best_trial(store, arm)
        failures = search_failures(df, arm)
        retries = retries_line(df, arm)
        if best is None:
            lines.append(f"{arm}: no finished unpruned trial yet")
            if failures:
                lines.append(failures_line(arm, failures))
            if retries:
                lines.append(retries)
            continue
        roles = ["tuned", "reference", *spec.baselines]
        fin = df[(df.search_arm == arm) & df.role.isin(roles) & (df.status == "ok")]
        tuned_ids = fin[(fin.role == "tuned") & (fin.optuna_trial == best["optuna_trial"])].trial_id
        fin = fin[(fin.role != "tuned") | fin.trial_id.isin(set(tuned_ids))]
        over = (f"{spec.cv_folds}-fold CV x seeds {spec.seeds}" if spec.cv_folds
                else f"seeds {spec.seeds}")
        lines.append(f"== {arm}: {best['n_trials']} search trials ({best['n_pruned']} pruned by ASHA), "
                     f"best #{best['optuna_trial']} "
                     f"(objective {best['objective']:.3f}; val {best['val_mean']:.3f} +- "
                     f"{best['val_std']:.3f} over {over}); final seeds {spec.final_seeds}"
                     + (f", final recipe {spec.final_data}" if spec.final_data else ""))
        if failures:
            lines.append(failures_line(arm, failures))
        if retries:
            lines.append(retries)
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
