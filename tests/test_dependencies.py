"""Dependencies that tell the truth, and --help built from the config's field metadata.

Every third-party package that ablate/ or analysis/ imports must be declared in
pyproject.toml's `[project] dependencies`, not arrive through another package: the
imports are read statically (ast, no network, no install), mapped to distribution names
with `importlib.metadata.packages_distributions()`, and checked against the declaration.
An import guarded by `try: ... except ImportError` is optional and not required.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from ablate import config
from ablate.run import _field_docs, help_text

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ablate", "analysis", "result_store")  # what pyproject's packages.find includes


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _dist_name(requirement: str) -> str:
    """PEP 503-normalised distribution name of a requirement string ("ray[tune]>=2" -> "ray")."""
    name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1)
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared(extra: str | None = None) -> set[str]:
    project = _project()
    reqs = project["dependencies"] if extra is None else project["optional-dependencies"][extra]
    return {_dist_name(r) for r in reqs}


def _is_import_error(handler: ast.ExceptHandler) -> bool:
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError")
               for n in names)


def _optional_lines(tree: ast.AST) -> set[int]:
    """Line numbers of imports inside a `try` body whose handlers catch ImportError."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(_is_import_error(h) for h in node.handlers):
            for stmt in node.body:
                out |= {n.lineno for n in ast.walk(stmt) if isinstance(n, ast.Import | ast.ImportFrom)}
    return out


def third_party_imports(packages=PACKAGES, root: Path = ROOT) -> dict[str, set[str]]:
    """Top-level imported module name -> files importing it (required imports only: anywhere in
    a module, functions and TYPE_CHECKING blocks included; not stdlib, relative or own)."""
    own = set(packages)
    found: dict[str, set[str]] = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            optional = _optional_lines(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                if node.lineno in optional:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in sys.stdlib_module_names or top in own or top == "__future__":
                        continue
                    found.setdefault(top, set()).add(str(path.relative_to(root)))
    return found


def test_every_imported_package_is_declared():
    imports = third_party_imports()
    assert {"torch", "numpy", "pandas"} <= set(imports)  # the scan sees the code
    to_dist = packages_distributions()
    declared = _declared()
    problems = []
    for module, files in sorted(imports.items()):
        dists = {_dist_name(d) for d in to_dist.get(module, [])}
        if not dists:
            problems.append(f"{module}: imported by {sorted(files)[0]} but not installed "
                            "(no distribution provides it)")
        elif not dists & declared:
            problems.append(f"{module} (distribution {'/'.join(sorted(dists))}): imported by "
                            f"{', '.join(sorted(files)[:3])} but not in pyproject's dependencies")
    assert not problems, "\n".join(problems)


def test_no_declared_dependency_is_unused():
    """A declared runtime dependency is imported somewhere (psutil was declared and unused)."""
    to_dist = packages_distributions()
    used = {_dist_name(d) for m in third_party_imports() for d in to_dist.get(m, [])}
    assert _declared() - used == set()


def test_test_only_packages_are_in_the_test_extra():
    assert "networkx" not in _declared()
    assert "networkx" in _declared("test")
    assert "psutil" not in _declared() | _declared("test")


def test_scan_catches_an_undeclared_import_and_skips_optional_ones(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        "import os\nfrom . import b\nimport numpy as np\n"
        "def f():\n    from matplotlib import pyplot\n"
        "try:\n    import colorama\nexcept ImportError:\n    colorama = None\n")
    (pkg / "b.py").write_text("from pkg.a import f\nimport omegaconf.errors\n")
    assert third_party_imports(("pkg",), tmp_path) == {
        "numpy": {"pkg/a.py"}, "matplotlib": {"pkg/a.py"}, "omegaconf": {"pkg/b.py"}}


# --help from the config's field metadata -------------------------------------------------

def test_every_config_field_has_a_doc():
    missing = [f.name for f in dataclasses.fields(config.TrialConfig) if not f.metadata.get("doc")]
    assert missing == []


def test_help_prints_multi_line_field_docs_whole():
    out = help_text()
    assert ("  scorer_relu=       bool  -- gnn scorer: ReLU on its scores (an ablation: the "
            "reference's attention GNN has none on its last layer, as False)\n") in out
    assert "eager (per-batch shapes, for debugging); auto = replay on CUDA, eager on CPU" in out
    assert "K=                 int|null  -- Chebyshev scales; 1 for gcn/gin" in out


def test_help_lists_the_valid_values_of_every_axis_that_has_them():
    """Any axis whose bad value is refused with "valid choices" shows those choices in --help
    (step, weak_target and lr_timing showed `str` only)."""
    from ablate.errors import ConfigError

    out = help_text()
    base = config.resolve(config.TrialConfig())
    found = []
    for f in dataclasses.fields(config.TrialConfig):
        try:
            config.validate_choices(dataclasses.replace(base, **{f.name: "not-a-value"}))
        except ConfigError as e:
            if "valid choices: " in str(e):
                choices = str(e).split("valid choices: ")[1].split(";")[0].split(", ")
                found.append(f.name)
                assert f"  {f.name + '=':<18} {'|'.join(choices)}  -- " in out, f.name
        except (TypeError, ValueError):
            pass
    assert {"step", "weak_target", "lr_timing", "backbone", "dataset"} <= set(found), found
    assert "seeds=adaptive" in out


@pytest.mark.parametrize("future", [True, False])
def test_field_docs_from_metadata_not_source(future):
    """Multi-line docs collapse to one line; a `#` in a default or a doc is kept; the class
    needs no source file (made by make_dataclass, as an install without sources would)."""
    cls = dataclasses.make_dataclass("Cfg", [
        ("colour", "str" if future else str, dataclasses.field(
            default="#ff0000", metadata={"doc": "hex colour\n    (a '#' then six digits)"})),
        ("sizes", "tuple[int, ...] | None" if future else tuple[int, ...] | None,
         dataclasses.field(default=None, metadata={"doc": "sizes  # of nodes"})),
        ("plain", "int" if future else int, dataclasses.field(default=3)),
    ])
    assert cls().colour == "#ff0000"
    assert _field_docs(cls) == [
        ("colour", "str", "hex colour (a '#' then six digits)"),
        ("sizes", "tuple[int, ...] | None", "sizes # of nodes"),
        ("plain", "int", ""),
    ]


def test_the_lock_file_is_refreshed_from_pyproject():
    """lock/requirements.lock was resolved from today's pyproject.toml (its input file is what
    `python lock/refresh.py` writes now), pins every package with hashes, and leaves torch to
    install.sh (a CPU machine must never pull a CUDA build from a lock)."""
    import importlib.util
    import re

    lock = ROOT / "lock"
    spec = importlib.util.spec_from_file_location("refresh", lock / "refresh.py")
    refresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refresh)
    listed = [ln for ln in (lock / "requirements.in").read_text().splitlines()
              if ln and not ln.startswith("#")]
    assert listed == refresh.inputs(), "pyproject.toml changed: run python lock/refresh.py"
    text = (lock / "requirements.lock").read_text()
    pins = re.findall(r"^([A-Za-z0-9_.\[\]-]+)==", text, flags=re.M)
    assert pins and "torch" not in pins and not any(p.startswith("nvidia") for p in pins)
    for name in ("ray", "torch-geometric", "scikit-image", "optuna", "pytest"):
        assert name in pins, name
    blocks = re.split(r"\n(?=[A-Za-z0-9_.\[\]-]+==)", text.strip())
    assert all("--hash=sha256:" in b for b in blocks if "==" in b.split("\n")[0])


def _lock_pins() -> list[tuple[str, str, str]]:
    """(name, version, environment marker) of every pin of lock/requirements.lock."""
    text = (ROOT / "lock" / "requirements.lock").read_text()
    return [(m.group(1).lower(), m.group(2), (m.group(3) or "").strip()) for m in re.finditer(
        r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^\s;\\]+)\s*(?:;([^\\\n]*))?", text, flags=re.M)]


def test_every_pin_of_the_lock_lies_in_its_pyproject_range():
    """Issue 42 item 4: the lock cannot drift outside what pyproject.toml declares."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    ranges = {}
    for dep in [*project["dependencies"], *project["optional-dependencies"]["test"]]:
        req = Requirement(dep)
        ranges[canonicalize_name(req.name)] = req.specifier
    pins = _lock_pins()
    assert len(pins) > 50
    declared = [(n, v) for n, v, _ in pins if canonicalize_name(n) in ranges]
    assert len({n for n, _ in declared}) >= len(ranges) - 1  # all but torch (install.sh's)
    for name, version in declared:
        assert ranges[canonicalize_name(name)].contains(version, prereleases=True), (name, version)


def test_the_packages_that_shape_data_have_one_version_for_every_python():
    """SLIC's kernels (scikit-image, NumPy) are part of the MNIST-75SP recipe: one lock must
    give one minor of each on every Python the project supports, the pinned one, or the same
    install.sh gives other MNIST trial ids on 3.11 and 3.12."""
    from ablate.data import SLIC_PINNED

    pins = _lock_pins()
    for name, minor in SLIC_PINNED.items():
        got = [(v, marker) for n, v, marker in pins if n == name]
        assert len(got) == 1 and not got[0][1], (name, got)
        assert got[0][0].split(".")[:2] == minor.split("."), (name, got, minor)
