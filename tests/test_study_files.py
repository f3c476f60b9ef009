"""A study from anywhere: `study=PATH` wherever `study=NAME` works, a search path for names
($ABLATE_STUDIES, then the built-in studies), and the study file kept beside its results."""

from __future__ import annotations

import os

import pytest

from ablate.run import main
from ablate.runner.execute.store import Store, read_trials
from ablate.runner.study.compose import STUDIES_DIR, load_spec, locate_study

MINE = """
description: my own tiny study
fixed: {dataset: colors, backbone: gin, epochs: 1}
data: {n_train: 32, n_val: 16, n_test: 16, n_max_large: 30}
variants:
  - {supervision: unsup}
  - {supervision: sup}
gpus_per_trial: 0
"""


@pytest.fixture(autouse=True)
def _env(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ABLATE_STUDIES", raising=False)


def _one_line(capsys, args, *words) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    for w in words:
        assert w in err[0], err[0]


def test_a_relative_and_an_absolute_path_dry_run(tmp_path, monkeypatch, capsys):
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "mine.yaml").write_text(MINE)
    monkeypatch.chdir(tmp_path)
    for arg in ("exp/mine.yaml", str(tmp_path / "exp" / "mine.yaml"), "./exp/mine.yaml"):
        assert main([f"study={arg}", "dry_run=true", f"results_dir={tmp_path / 'r'}"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("study mine: my own tiny study")
        assert "2 trials (0 done, 2 to run)" in out
    assert not (tmp_path / "r").exists()  # a dry run writes nothing
    assert main(["study=exp/mine.yaml", "verify=true", f"results_dir={tmp_path / 'r'}"]) == 4


def test_bad_study_paths_are_one_line(tmp_path, capsys):
    _one_line(capsys, [f"study={tmp_path / 'none.yaml'}", "dry_run=true"], "none.yaml",
              "no such file")
    (tmp_path / "bad.yaml").write_text("fixed: {dataset: colors\n")
    _one_line(capsys, [f"study={tmp_path / 'bad.yaml'}", "dry_run=true"], "bad.yaml",
              "not a valid study file")
    (tmp_path / "folder.yaml").mkdir()
    _one_line(capsys, [f"study={tmp_path / 'folder.yaml'}"], "folder.yaml", "not a file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_study_file_is_one_line(tmp_path, capsys):
    path = tmp_path / "secret.yaml"
    path.write_text(MINE)
    path.chmod(0)
    _one_line(capsys, [f"study={path}", "dry_run=true"], "secret.yaml", "not readable")


def test_names_search_ablate_studies_first_then_the_built_in_ones(tmp_path, monkeypatch, capsys):
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.mkdir()
    other.mkdir()
    (mine / "mystudy.yaml").write_text(MINE)
    monkeypatch.setenv("ABLATE_STUDIES", os.pathsep.join([str(mine), str(other)]))
    assert locate_study("mystudy") == mine / "mystudy.yaml"
    assert locate_study("smoke") == STUDIES_DIR / "smoke.yaml"  # built-ins are not hidden
    assert load_spec("mystudy").name == "mystudy"
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "  mystudy      my own tiny study  [" + str(mine) + "]" in out
    assert "  smoke " in out and "[built-in]" in out
    (other / "smoke.yaml").write_text(MINE)  # the same name twice on the search path
    _one_line(capsys, ["study=smoke", "dry_run=true"], "defined twice", str(other / "smoke.yaml"),
              str(STUDIES_DIR / "smoke.yaml"))
    assert main([f"study={other / 'smoke.yaml'}", "dry_run=true",
                 f"results_dir={tmp_path / 'r'}"]) == 0  # a path is never ambiguous
    capsys.readouterr()
    _one_line(capsys, ["study=nope"], "unknown study 'nope'", "mystudy", "smoke")


@pytest.mark.slow
def test_a_study_file_runs_from_its_path_and_is_kept_beside_its_trials(tmp_path, ray_env,
                                                                        capsys):
    path = tmp_path / "exp" / "mine.yaml"
    path.parent.mkdir()
    path.write_text(MINE)
    results = tmp_path / "results"
    args = [f"study={path}", f"results_dir={results}", "progress=none"]
    assert main(args) == 0
    assert len(read_trials(results, "mine")) > 0
    kept = sorted((results / "mine").glob("study-*.yaml"))
    assert [p.read_text() for p in kept] == [MINE]
    assert main(args) == 0  # resumes: nothing to run, the same file kept once
    assert sorted((results / "mine").glob("study-*.yaml")) == kept
    assert Store(results, "mine").verify() == []


def test_an_edited_study_file_is_kept_beside_the_first(tmp_path):
    store = Store(tmp_path, "mine")
    path = tmp_path / "mine.yaml"
    path.write_text(MINE)
    first = store.keep_study_file(path)
    assert store.keep_study_file(path) == first  # the same file: nothing new
    path.write_text(MINE.replace("epochs: 1", "epochs: 2"))
    second = store.keep_study_file(path)
    assert second != first and first.read_text() == MINE and "epochs: 2" in second.read_text()
