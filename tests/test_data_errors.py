"""An error while the data is prepared, grid and search studies alike: a data parameter or path
the checks refuse (`ConfigError`) is one line naming the dataset, exit 2, and a refused first run
leaves no study folder; anything else (a damaged cache file, a bug) keeps its own message and
traceback (exit 1) and the study folder with its study file."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate.errors import ConfigError

TINY = ["data.n_train=20", "data.n_val=20", "data.n_test=20", "data.n_max_large=40"]
STUDIES = {"smoke": ["dataset=colors"],
           "threshold_search": ["arms=colors_chebygin_unsup", "n_trials=1"]}


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))


def _run(study: str, error: Exception, tmp_path: Path, monkeypatch) -> int:
    """`python -m ablate.run` of `study` (a first run) whose data preparation raises `error`,
    before Ray starts."""
    import ablate.data
    import ablate.runner.execute.driver as driver
    from ablate.run import main

    def load_graphsets(*args, **kwargs):
        raise error

    monkeypatch.setattr(ablate.data, "load_graphsets", load_graphsets)
    monkeypatch.setattr(driver, "reads_local_files", lambda t: True)  # prepared before Ray
    return main([f"study={study}", *STUDIES[study], *TINY, f"results_dir={tmp_path / 'r'}"])


@pytest.mark.parametrize("study", sorted(STUDIES))
def test_an_error_that_is_no_data_parameter_keeps_its_message_and_the_folder(
        study, tmp_path, monkeypatch, capsys):
    damaged = ValueError("cannot reshape array of size 7 into shape (2,4)")
    with pytest.raises(ValueError) as got:  # uncaught: its traceback, exit 1
        _run(study, damaged, tmp_path, monkeypatch)
    assert got.value is damaged  # not turned into a data-parameter error
    assert "data.KEY=VALUE" not in capsys.readouterr().err
    assert list((tmp_path / "r" / study).glob("study-*.yaml"))  # not discarded as refused


@pytest.mark.parametrize("study", sorted(STUDIES))
def test_a_refused_data_parameter_is_one_line_exit_2_and_no_folder(
        study, tmp_path, monkeypatch, capsys):
    refused = ConfigError("n_colors must be >= 2 (green and at least one other), got 0")
    assert _run(study, refused, tmp_path, monkeypatch) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: dataset colors: n_colors must be >= 2"), err
    assert "data.KEY=VALUE" in err[-1] and not [e for e in err if "Traceback" in e]
    assert not (tmp_path / "r").exists()  # a refused first run leaves nothing behind


def test_the_generators_own_refusals_are_config_errors():
    """What only a generator checks (COLORS' n_colors, TRIANGLES' max_degree) is a refused
    data parameter, reported as such when the data is prepared."""
    from ablate.data import colors, triangles

    with pytest.raises(ConfigError, match="n_colors must be >= 2"):
        colors.generate(n_colors=1)
    with pytest.raises(ConfigError, match="max_degree must be >= 2"):
        triangles.generate(max_degree=1)
