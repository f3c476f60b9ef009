"""A study's datasets before Ray starts: every recipe built once, the data folders checked.

`prepare_datasets` builds (or loads) each dataset recipe of the trials once into the on-disk
cache, in the driver (`ablate.runner.execute.driver.run_study`: those read from local or
downloaded files first, so a bad path fails before Ray starts, `reads_local_files`).
`check_data_paths` is the dry run's check of the same folders and downloads (`check_recipe_paths`:
also a search study's, dry run and run).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ablate.errors import ConfigError

if TYPE_CHECKING:
    from ablate.runner.execute.progress import Progress
    from ablate.runner.study.expand import Study, Trial


def prepare_datasets(trials: list[Trial], progress: bool = True,
                     display: Progress | None = None) -> dict[str, list[str]]:
    """Build (or load) every dataset recipe once; data hash -> evaluated split names.
    `progress`: the dataset's own bar while one is built; `display` counts the recipes.
    A `ConfigError` (a data parameter or path refused) is one line naming the dataset; any
    other error (a damaged cache file, a bug) is raised as it is: its own message and
    traceback, exit 1, a first run's study folder kept."""
    from ablate.data import dataset_cache_path, load_graphsets

    recipes = list({t.data_hash: t for t in trials if t.data_hash is not None}.values())
    splits: dict[str, list[str]] = {}
    for i, t in enumerate(recipes):
        if display is not None:  # a recipe built with its own bar: the line stays above it
            try:
                own_bar = progress and not dataset_cache_path(t.dataset,
                                                              dict(t.data_params)).exists()
            except ConfigError:  # a bad recipe: load_graphsets says so below
                own_bar = progress
            display.step(f"preparing datasets ({t.dataset})", len(recipes), "recipes",
                         draw=not own_bar)
            display.advance(i)
        try:
            sets = load_graphsets(t.dataset, progress=progress, **dict(t.data_params))
        except ConfigError as e:  # a data parameter or path the checks refuse (generators too)
            raise ConfigError(f"dataset {t.dataset}: {e} (dataset parameters are set as "
                              "data.KEY=VALUE)") from None
        splits[t.data_hash] = [s for s in sets if s != "train"]
        _check_ground_truth([u for u in trials if u.data_hash == t.data_hash], sets["train"])
    return splits


def _check_ground_truth(trials: list[Trial], train) -> None:
    """Supervised or oracle attention on data without ground-truth attention (a user's PyG
    set whose graphs carry no `gt`; the TU sets are refused by the config checks already):
    one ConfigError before Ray starts."""
    needs = sorted({getattr(t.config, "supervision", None) for t in trials} & {"sup", "gt"})
    if needs and not (train.gt > 0).any():
        raise ConfigError(f"dataset {trials[0].dataset}: supervision={needs[0]} needs "
                          "ground-truth attention, and its training graphs have none (a node "
                          "attribute gt); use weak or unsup")


def check_data_paths(study: Study) -> list[str]:
    """Dry runs: a dataset folder named by ``data.path`` that does not exist, a half-filled
    or unwritable data folder, raw files that cannot be downloaded: one ConfigError (a run
    finds the same when it prepares the data, before Ray starts). Returns a note per
    download a run would make. The rule of every study's data (`check_recipe_paths`)."""
    return check_recipe_paths(study.trials)


def check_recipe_paths(trials: list[Trial], probe: bool = True) -> list[str]:
    """`check_data_paths` of `trials`: a grid study's dry run, a search study's dry run and
    run (`ablate.runner.search.entry`, its arms' and final configs). `probe` False: the
    folders alone, the servers not asked (a run, which downloads next)."""
    from ablate.data import dataset_cache_path, download

    notes: list[str] = []
    seen = set()
    for t in trials:
        params = dict(t.data_params)
        if not reads_local_files(t) or t.data_hash in seen:
            continue
        seen.add(t.data_hash)
        try:
            if download.downloadable(t.dataset):
                where = (t.dataset, params.get("path"), params.get("url"))  # raw files: per place
                if where not in seen and not dataset_cache_path(t.dataset, params).exists():
                    seen.add(where)
                    note = download.check_files(*where, probe=probe)
                    if note:
                        notes.append(note)
            elif t.dataset == "pyg":  # the user's class imports here (the run builds it)
                from ablate.data.pyg_user import load_target

                load_target(params["target"])
            elif not Path(params["path"]).expanduser().exists():
                raise ConfigError(f"data.path {str(params['path'])!r} does not exist")
        except ConfigError as e:
            raise ConfigError(f"dataset {t.dataset}: {e} (dataset parameters are set as "
                              "data.KEY=VALUE)") from None
    return notes


def check_trial_files(trials: list[Trial]) -> None:
    """The local files each trial's kind reads itself (`TrialKind.check_files`, e.g. the SDC
    study's CIFAR folder): one ConfigError for the first that is missing. Called where the
    trials run on this machine (an embedded Ray, or a dry run without a cluster address)."""
    from ablate.runner.study.kinds import trial_kind

    seen = set()
    for t in trials:
        key = (t.kind, repr(getattr(t.config, "data_params", ())), t.dataset)
        if key not in seen:
            seen.add(key)
            trial_kind(t.kind).check_files(t.config)


def reads_local_files(t: Trial) -> bool:
    """Whether the trial's dataset is read from local or downloaded files (it may fail on a
    bad path or without a network), or built by a user's class (`dataset=pyg`): prepared
    before Ray starts."""
    from ablate.data.download import downloadable

    return t.data_hash is not None and (dict(t.data_params).get("path") is not None
                                        or downloadable(t.dataset) or t.dataset == "pyg")
