"""Study files and overrides -> validated trials (no Ray): grids, sweeps, seed packing, ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate.config import TrialConfig, resolve, trial_id
from ablate.data import dataset_recipe_hash
from ablate.errors import ConfigError
from ablate.runner.study.compose import STUDIES_DIR, list_studies, load_spec
from ablate.runner.study.expand import build_study, coerce, expand
from ablate.runner.study.trial_table import trial_table

REQUIRED = {"init", "placement", "backbone", "threshold", "supervision", "normalizer", "paper",
            "mnist", "tu", "smoke"}
TINY = {"n_train": 40, "n_val": 40, "n_test": 40, "n_max_large": 40}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    (tmp_path / f"{name}.yaml").write_text(text)
    return tmp_path


def test_every_study_file_expands_and_validates():
    studies = list_studies()
    assert REQUIRED <= set(studies)
    assert all(studies[s] for s in REQUIRED), "every study has a description"
    for name in REQUIRED:
        extra = ["data.path=/data"] if name in ("mnist", "tu") else []
        study, _ = build_study(name, extra)
        assert study.trials, name
        ids = [t.trial_id for t in study.trials]
        assert len(ids) == len(set(ids)), name
        text = (STUDIES_DIR / f"{name}.yaml").read_text()
        assert text.startswith("#"), f"{name}.yaml opens with a comment"


def test_init_study_has_100_distinct_random_inits():
    study, _ = build_study("init")
    cfgs = [t.config for t in study.trials]
    seeds = [s for c in cfgs for s in c.seeds]
    assert len(seeds) >= 100 and len(set(seeds)) == len(seeds)
    assert {c.init_dist for c in cfgs} == {"normal", "uniform"}
    assert len({c.init_scale for c in cfgs}) >= 3
    assert {(c.dataset, c.backbone, c.supervision) for c in cfgs} == {("colors", "gin", "unsup")}


def test_paper_study_covers_spec_rows_on_both_datasets():
    study, _ = build_study("paper")
    rows = {(t.config.backbone, t.config.supervision, bool(t.config.pool_layers),
             t.config.selection) for t in study.trials}
    assert ("gin", "unsup", False, "threshold") in rows  # global pool
    assert ("gin", "unsup", True, "topk") in rows
    assert ("chebygin_ref", "gt", True, "threshold") in rows  # the reference scripts' ChebyGIN
    assert ("chebygin_ref", "weak", True, "threshold") in rows
    assert {t.config.dataset for t in study.trials} == {"colors", "triangles"}
    assert len(study.trials) == 9 * 2 * 2  # 10 seeds in chunks of 5


def test_trial_id_is_config_trial_id_with_dataset_recipe():
    study, _ = build_study("smoke")
    t = study.trials[0]
    cfg = resolve(TrialConfig(**{f: getattr(t.config, f) for f in
                                 ("study", "dataset", "backbone", "pool_layers", "supervision",
                                  "selection", "ratio", "epochs", "eval_every", "seeds",
                                  "data_params")}))
    assert t.trial_id == trial_id(cfg, dataset_recipe_hash(cfg.dataset, dict(cfg.data_params)))
    again, _ = build_study("smoke")
    assert [x.trial_id for x in again.trials] == [x.trial_id for x in study.trials]


def test_overrides_fix_sweep_add_and_delete():
    base, _ = build_study("smoke")
    study, opts = build_study("smoke", ["backbone=gin", "seed=range(0,4)", "+note=hello",
                                        "data.n_train=50", "results_dir=/tmp/r", "force=true"])
    assert {t.config.backbone for t in study.trials} == {"gin"}
    assert len(study.trials) == len(base.trials)  # 1 backbone, but 4 seeds in chunks of 2
    assert {t.config.seeds for t in study.trials} == {(0, 1), (2, 3)}
    assert all(dict(t.config.extra) == {"note": "hello"} for t in study.trials)
    assert all(dict(t.config.data_params)["n_train"] == 50 for t in study.trials)
    assert opts["results_dir"] == "/tmp/r" and opts["force"] is True
    sweep, _ = build_study("smoke", ["backbone=gin,gcn,chebynet", "dataset=colors"])
    assert {t.config.backbone for t in sweep.trials} == {"gin", "gcn", "chebynet"}
    assert len(sweep.trials) == 3 * 4
    pools, _ = build_study("smoke", ["pool_layers=[],[1]", "dataset=colors", "backbone=gin",
                                     "supervision=unsup", "selection=threshold"])
    assert sorted(t.config.pool_layers for t in pools.trials) == [(), (1,)]  # rows collapse
    deleted, _ = build_study("smoke", ["~epochs", "dataset=colors", "backbone=gin"])
    assert {t.config.epochs for t in deleted.trials} >= {100, 300}  # the recipe again


def test_seed_packing_changes_trial_count_not_seed_runs():
    one, _ = build_study("smoke", ["seeds_per_trial=1", "seed=range(0,6)"])
    three, _ = build_study("smoke", ["seeds_per_trial=3", "seed=range(0,6)"])
    assert len(one.trials) == 3 * len(three.trials)
    runs = sorted(s for t in one.trials for s in t.config.seeds)
    assert runs == sorted(s for t in three.trials for s in t.config.seeds)


@pytest.mark.parametrize("override, words", [
    (["bogus=1"], ["unknown key 'bogus'", "backbone", "data.KEY"]),
    (["backbone=foo"], ["unknown backbone 'foo'", "gcn, gin, chebynet, chebygin"]),
    (["normalizer=soft"], ["softmax, sparsemax, spherical"]),
    (["epochs=abc"], ["epochs must be an integer"]),
    (["threshold=2"], ["threshold must be in [0, 1)"]),
    (["data.bogus=1"], ["unknown parameter(s) ['bogus']", "n_train"]),
    (["seeds_per_trial=0"], ["seeds_per_trial must be an integer >= 1"]),
    (["gpus_per_trial=-1"], ["gpus_per_trial must be a number"]),
    (["progress=fancy"], ["valid choices: auto, bar, lines, none"]),
    (["dry_run=maybe"], ["dry_run must be true or false"]),
    (["threshold=interval(0,1)"], ["only choice"]),
    (["backbone=gin", "K=3"], ["K = 1"]),
])
def test_bad_overrides_raise_one_line_naming_valid_choices(override, words):
    with pytest.raises(ConfigError) as e:
        build_study("smoke", override)
    msg = str(e.value)
    assert "\n" not in msg
    for w in words:
        assert w in msg


def test_unknown_study_names_the_valid_ones():
    with pytest.raises(ConfigError, match="valid choices: .*smoke"):
        build_study("nope")


def test_required_value_must_be_given(tmp_path):
    d = _write(tmp_path, "needs", """
description: test
fixed: {dataset: mnist_sp}
data:
  path: ???
""")
    with pytest.raises(ConfigError, match=r"needs data.path=VALUE"):
        build_study("needs", directory=d)
    study, _ = build_study("needs", ["dataset=digits_sp"], directory=d)  # digits take no path
    assert {t.config.dataset for t in study.trials} == {"digits_sp"}


def test_custom_study_file_sections(tmp_path):
    d = _write(tmp_path, "mine", """
description: test
fixed: {dataset: colors, epochs: 2}
data: {n_train: 40, n_val: 40, n_test: 40, n_max_large: 40}
variants:
  - {backbone: gin, seeds: [5, 6]}
  - {backbone: chebygin}
grid:
  pool_layers: [[], [1]]
seeds: 3
seeds_per_trial: 2
max_failures: 0
""")
    study, _ = build_study("mine", [], directory=d)
    got = sorted((t.config.backbone, t.config.pool_layers, t.config.seeds) for t in study.trials)
    assert got == [("chebygin", (), (3,)), ("chebygin", (1,), (3,)),
                   ("gin", (), (5, 6)), ("gin", (1,), (5, 6))]
    assert study.spec.max_failures == 0
    table = trial_table(study)
    assert {"trial_id", "backbone", "pool_layers", "seeds", "done"} <= set(table.columns)
    assert "epochs" not in table.columns  # fixed axes are not columns


def test_bad_study_files_are_reported(tmp_path):
    _write(tmp_path, "bad1", "fixed: {dataset: colors}\ngrdi: {backbone: [gin]}\n")
    with pytest.raises(ConfigError, match="unknown section"):
        load_spec("bad1", tmp_path)
    _write(tmp_path, "bad2", "grid: {backbone: gin}\n")
    with pytest.raises(ConfigError, match="non-empty list of choices"):
        load_spec("bad2", tmp_path)
    _write(tmp_path, "bad3", "grid: {backbone: [gin]}\nvariants: [{backbone: gcn}]\n")
    with pytest.raises(ConfigError, match="both 'grid' and 'variants'"):
        load_spec("bad3", tmp_path)
    _write(tmp_path, "bad4", "fixed: [1, 2\n")
    with pytest.raises(ConfigError, match="not a valid study file"):
        load_spec("bad4", tmp_path)


def test_duplicate_trials_collapse():
    spec = load_spec("smoke")
    spec.variants = [{"backbone": "gin"}, {"backbone": "gin"}]
    spec.grid = {}
    spec.fixed.update(dataset="colors")
    assert len(expand(spec)) == 1


def test_coerce_types():
    assert coerce("pool_layers", [1, 2], tuple[int, ...] | None) == (1, 2)
    assert coerce("pool_layers", 1, tuple[int, ...] | None) == (1,)
    assert coerce("pool_layers", None, tuple[int, ...] | None) is None
    assert coerce("threshold", 1, float | None) == 1.0
    assert coerce("epochs", 3.0, int | None) == 3
    with pytest.raises(ConfigError):
        coerce("epochs", True, int)
    with pytest.raises(ConfigError):
        coerce("backbone", [1], str)


def test_variants_an_override_makes_equal_are_named_and_train_once(tmp_path, capsys):
    """Two variants that differ only in the dataset become one once `dataset=` overrides it:
    one set of trials, and the dry run says which variants merged (as does a run)."""
    from ablate.run import main
    from ablate.runner.study.expand import merge_notes

    d = _write(tmp_path, "merge", """
description: two datasets, global pool vs unsup, overridden to one dataset
fixed: {backbone: gin, epochs: 1}
data: {n_train: 40, n_val: 40, n_test: 40, n_max_large: 40}
variants:
  - {dataset: colors, pool_layers: []}
  - {dataset: colors, supervision: unsup}
  - {dataset: triangles, pool_layers: []}
  - {dataset: triangles, supervision: unsup}
seeds: "range(0,2)"
""")
    study, _ = build_study("merge", [], directory=d)
    assert study.merged == [] and merge_notes(study) == []
    merged, _ = build_study("merge", ["dataset=colors"], directory=d)
    assert merged.merged == [(0, 2), (1, 3)]
    assert len(merged.trials) == len(study.trials) // 2
    assert merge_notes(merged)[0].startswith("variants 1 and 3 of the study are the same once "
                                             "the overrides apply ({pool_layers: []})")
    assert main(["study=" + str(d / "merge.yaml"), "dataset=colors", "dry_run=true",
                 "estimate=off", f"results_dir={tmp_path / 'r'}"]) == 0
    assert "note: variants 2 and 4 of the study are the same" in capsys.readouterr().out
