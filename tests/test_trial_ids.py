"""Trial ids are stable: one rule for changed defaults (`ablate.config.CHANGED_DEFAULTS`).

The ids below were computed at the commit before each change named, with the overrides that
select the earlier behaviour; a store made then must be resumed by a rerun today, so a change
to any of them renames stored trials and fails here.
"""

import pytest

from ablate.config import CHANGED_DEFAULTS, TrialConfig, lr_drops, model_b_config, resolve, trial_id
from ablate.runner.study.expand import build_study

# study -> (first trial's id, last trial's id), `build_study(name)` at 4c3b4dc (before issue
# 41 made the published LR timing the default): the same ids with lr_timing=early today
BEFORE_ISSUE_41 = {
    "backbone": ("872db526badf", "10daa7cf821c"), "init": ("61ad047e15c4", "99535792d250"),
    "mnist": ("2f2080bc6304", "de6098c614d8"), "normalizer": ("0e3008c8be78", "9f38695ebe59"),
    "paper": ("3bfc54496690", "73f9fbd07c9f"), "placement": ("80af6831dd8e", "15a3bda1bd0c"),
    "scorer": ("aafed9f601e7", "df0deb6f52da"), "sdc": ("1a4672d9560f", "2860e2f6373d"),
    "seeds": ("02872348ec22", "272593720598"), "smoke": ("109ab9645a54", "2d8df8f7260b"),
    "supervision": ("3bfc54496690", "bcdd8bb174cb"), "threshold": ("9eb58791ba71", "607277cefd52"),
    "tu": ("0a2ff0de9205", "013ff7bb7bdf"),
}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.mark.parametrize("name", sorted(BEFORE_ISSUE_41))
def test_every_study_keeps_its_ids_with_the_earlier_lr_timing(name):
    # SDC trials (Pandey et al.'s synthetic and image tasks) have no LR schedule to time
    study, _ = build_study(name, [] if name == "sdc" else ["lr_timing=early"])
    assert (study.trials[0].trial_id, study.trials[-1].trial_id) == BEFORE_ISSUE_41[name]


def test_the_published_lr_timing_is_a_new_trial_where_a_drop_happens():
    study, _ = build_study("paper")
    early, _ = build_study("paper", ["lr_timing=early"])
    for t, e in zip(study.trials, early.trials):
        assert t.config.lr_timing == "published" and e.config.lr_timing == "early"
        assert (t.trial_id == e.trial_id) == (not t.config.lr_decay_epochs)
    assert any(t.config.lr_decay_epochs for t in study.trials)


def test_a_run_without_lr_drops_keeps_its_id_whatever_the_timing():
    cfg = resolve(TrialConfig(dataset="colors", epochs=5, lr_decay_epochs=()))
    assert trial_id(cfg, "h") == trial_id(cfg.replace(lr_timing="early"), "h")


def test_the_earlier_tu_split_resumes_the_store_made_before_it():
    """Issue 42 item 1: at e4c55ee (before issue 33's split rule) `build_study('tu')` gave the
    PROTEINS seed-0 trials these ids; `data.split=earlier` (and the LR timing of then) must
    give them again, not only the same data hash."""
    study, _ = build_study("tu", ["data.split=earlier", "lr_timing=early"])
    got = {t.config.supervision: t.trial_id for t in study.trials
           if t.config.dataset == "proteins" and t.config.seeds == (0,)}
    assert got == {"unsup": "bda455d7ae20", "weak": "36aed6c5066f"}


def test_changed_defaults_name_real_fields():
    assert set(CHANGED_DEFAULTS["axes"]) <= set(TrialConfig.__dataclass_fields__)
    assert TrialConfig().lr_timing == "published" != CHANGED_DEFAULTS["axes"]["lr_timing"]


def test_a_weak_trial_whose_model_b_drops_its_lr_hashes_the_timing():
    """Weak supervision trains model B with the recipe's drops unless `epochs` was set: with
    no drop of its own, the timing still changes model B, so it is a new trial; with epochs
    set and no drop anywhere it changes nothing and the id stays."""
    recipe_epochs = resolve(TrialConfig(dataset="colors", supervision="weak", lr_decay_epochs=()))
    assert not recipe_epochs.lr_decay_epochs and model_b_config(recipe_epochs).lr_decay_epochs
    assert lr_drops(recipe_epochs)
    assert trial_id(recipe_epochs, "h") != trial_id(recipe_epochs.replace(lr_timing="early"), "h")
    explicit = resolve(TrialConfig(dataset="colors", supervision="weak", epochs=5,
                                   lr_decay_epochs=()))
    assert not lr_drops(explicit) and not model_b_config(explicit).lr_decay_epochs
    assert trial_id(explicit, "h") == trial_id(explicit.replace(lr_timing="early"), "h")


def test_the_beyond_study_keeps_the_ids_its_first_trials_were_stored_with():
    """studies/tu_beyond.yaml's trials as first planned and stored (commit fce19f4, the TU
    fixtures read from data.path=/tmp/tufix): a later change to the open data sets' code that
    keeps their data maps its digest (`ablate.data.SAME_DATA`), so a rerun resumes them."""
    study, _ = build_study("tu_beyond", ["data.path=/tmp/tufix"])
    assert (study.trials[0].trial_id, study.trials[-1].trial_id) == ("a625d7cf576f", "3ac645abebd6")


def test_a_kind_built_on_the_graph_kind_has_ids_of_its_own():
    """A user's `kind: mykinds:KIND` subclassing GraphKind (usage.md) under its own name: its
    trials are not the graph kind's, so a store of graph trials never counts them as done
    (before, the subclass inherited the graph ids and a rerun skipped every trial)."""
    from ablate.trial.graph import KIND, GraphKind

    class Mine(GraphKind):
        name = "mine"

    cfg = resolve(TrialConfig(dataset="colors", backbone="gin", seeds=(0,)))
    graph_id = KIND.trial_id(cfg, "d")
    assert graph_id == trial_id(cfg, "d")  # the graph kind's ids are unchanged
    assert Mine().trial_id(cfg, "d") != graph_id
    assert Mine().trial_id(cfg, "d") == Mine().trial_id(cfg, "d")
