"""A user's own code by 'package.module:attr' (`ablate.user_code`): one line per failure, and
the folders the driver imports from reach the Ray workers."""

from __future__ import annotations

import os
import sys

import pytest

from ablate.errors import ConfigError
from ablate.user_code import extend_import_path, import_paths, is_object_path, load_object


def test_object_paths_are_told_from_names():
    assert is_object_path("mypkg.layers:MyConv")
    assert is_object_path("mod:Class.attr")
    assert not is_object_path("dense_gin")
    assert not is_object_path("mod:")
    assert not is_object_path("a b:c")
    assert not is_object_path(3)


def test_load_object_imports_from_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "user_mod_cwd.py").write_text("class Thing:\n    value = 7\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert load_object("user_mod_cwd:Thing.value", "backbone") == 7


@pytest.mark.parametrize("path, says", [
    ("not a path", "is not a name or a path of the form 'package.module:attr'"),
    ("no_such_module_xyz:A", "no module named 'no_such_module_xyz' here"),
    ("os:pathx", "os has no attribute 'pathx'; did you mean 'path'?"),
    ("json:loads.nope", "json:loads has no attribute 'nope'"),
])
def test_load_object_fails_in_one_line(path, says):
    with pytest.raises(ConfigError) as e:
        load_object(path, "trial kind")
    assert says in str(e.value) and "\n" not in str(e.value)
    assert str(e.value).startswith(f"trial kind {path!r}")


def test_a_module_that_raises_or_lacks_a_dependency_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "user_mod_raises.py").write_text("raise RuntimeError('broken\\nsecond line')\n")
    (tmp_path / "user_mod_needs.py").write_text("import not_installed_dep_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"importing user_mod_raises raised RuntimeError: broken$"):
        load_object("user_mod_raises:X", "backbone")
    with pytest.raises(ConfigError, match="raised ModuleNotFoundError: No module named "
                                          "'not_installed_dep_xyz'"):
        load_object("user_mod_needs:X", "backbone")


def test_import_paths_are_the_users_folders_not_the_installation(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    extra = tmp_path / "lib"
    extra.mkdir()
    monkeypatch.syspath_prepend(str(extra))
    paths = import_paths()
    assert paths[0] == str(tmp_path) and str(extra) in paths
    assert not any(p.startswith(os.path.realpath(sys.prefix)) for p in paths)
    assert len(paths) == len(set(paths))


def test_a_worker_appends_the_drivers_folders_present_on_its_node(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    here, gone = tmp_path / "here", tmp_path / "gone"
    here.mkdir()
    assert extend_import_path([str(here), str(gone), sys.path[0]]) == [str(here)]
    assert sys.path[-1] == str(here)
    assert extend_import_path([str(here)]) == []  # once
