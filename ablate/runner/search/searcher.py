"""The searcher of one arm's Tune run: OptunaSearch whose Optuna trials hold the attempt
they are told (`optuna_search`), for `ablate.runner.search.tuning.run_search`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ablate.runner.study.search_spec import METRIC, MODE

if TYPE_CHECKING:
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    from ablate.runner.search.tuning import DefineSpace


def optuna_search(space: DefineSpace, sampler: optuna.samplers.BaseSampler, arm: str,
                  storage: optuna.storages.RDBStorage) -> OptunaSearch:
    """``OptunaSearch`` over `space` (define-by-run) with `sampler` and the arm's study in
    `storage`, whose Optuna trials hold the intermediate values of the attempt they are told.
    A Tune trial run again (`max_failures`) reports its epochs again from 1, where Optuna's
    `Trial.report` keeps the failed attempt's value of an epoch it holds and warns
    (UserWarning: "The reported value is ignored because this `step=1` is already
    reported"): such an epoch's value replaces the stored one instead (the storage's
    `set_trial_intermediate_value`); a new epoch goes through OptunaSearch as before."""
    from ray.tune.result import TRAINING_ITERATION
    from ray.tune.search.optuna import OptunaSearch

    class AttemptSearch(OptunaSearch):
        def __init__(self, **kwargs: Any):
            super().__init__(**kwargs)
            self.numbers: dict[str, int] = {}  # Tune trial id -> its Optuna trial's number
            self.steps: dict[str, int] = {}  # Tune trial id -> the last epoch Optuna holds

        def suggest(self, trial_id: str) -> dict | None:
            config = super().suggest(trial_id)
            if config and "optuna_trial" in config:
                self.numbers[trial_id] = int(config["optuna_trial"])
            return config

        def on_trial_result(self, trial_id: str, result: dict) -> None:
            step = int(result[TRAINING_ITERATION])
            if step > self.steps.get(trial_id, 0) or trial_id not in self.numbers:
                self.steps[trial_id] = max(step, self.steps.get(trial_id, 0))
                return super().on_trial_result(trial_id, result)
            # an epoch a failed attempt reported, reported again by the retry: its value now
            study = storage.get_study_id_from_name(arm)
            held = storage.get_trial_id_from_study_id_trial_number(study, self.numbers[trial_id])
            storage.set_trial_intermediate_value(held, step, float(result[METRIC]))

    return AttemptSearch(space=space, metric=METRIC, mode=MODE, sampler=sampler,
                         study_name=arm, storage=storage)
