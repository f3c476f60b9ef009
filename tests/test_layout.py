"""The floors of the house (docs/design.md): imports only go down, no circle,
no module reaches into another's private names, the analysis reads Parquet only."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# floor of each part of the package, bottom first; a module may import its own floor or below
FLOORS = [("ablate.errors", "ablate.atomic", "ablate.compat", "ablate.user_code"), ("ablate.data",),
          ("ablate.models",), ("ablate.config",), ("ablate.trial",), ("ablate.runner",),
          ("ablate.run", "ablate.train")]


def _floor(module: str) -> int:
    for i, parts in enumerate(FLOORS):
        if any(module == p or module.startswith(p + ".") for p in parts):
            return i
    raise AssertionError(f"{module}: not on any floor of tests/test_layout.py")


def _modules(package: str) -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        out[".".join(parts)] = path
    return out


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Line numbers of imports under `if TYPE_CHECKING:` (not run)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for sub in ast.walk(node):
                lines.add(getattr(sub, "lineno", -1))
    return lines


def _imports(module: str, path: Path) -> list[tuple[str, list[str], ast.AST]]:
    """(imported module, names, node) for every import that runs, at any depth."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_only(tree)
    out = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", -1) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, [], node) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if node.level:  # relative import
                pkg = module.split(".")[: -node.level] if not path.name == "__init__.py" \
                    else module.split(".")[: len(module.split(".")) - node.level + 1]
                base = ".".join([*pkg, node.module])
            out.append((base, [a.name for a in node.names], node))
    return out


def _resolve(target: str, names: list[str], known: dict[str, Path]) -> list[str]:
    """The ablate modules an import loads: `from ablate.trial import fit` loads ablate.trial.fit."""
    got = [f"{target}.{n}" for n in names if f"{target}.{n}" in known]
    return got or ([target] if target in known else [])


def test_no_circle_in_the_other_packages():
    """result_store, analysis and benchmarks: no module imports one that imports it back
    (lazy imports inside functions included)."""
    for package in ("result_store", "analysis"):
        known = _modules(package)
        graph = {m: {d for target, names, _ in _imports(m, p) if target.startswith(package)
                     for d in _resolve(target, names, known) if d != m and not m.startswith(d + ".")}
                 for m, p in known.items()}
        _no_circle(graph)
    _no_circle(_script_graph(ROOT / "benchmarks"))


def _script_graph(folder: Path) -> dict[str, set[str]]:
    """The scripts of `folder` (not a package) -> the sibling scripts each loads: by name from
    the folder on sys.path (`import bench_gpu`), or from its file
    (`importlib.util.spec_from_file_location("tu_fidelity", HERE / "tu_fidelity.py")`)."""
    scripts = {p.stem: p for p in sorted(folder.glob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in scripts.items():
        deps = {target.split(".")[0] for target, _, _ in _imports(name, path)}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(
                    node.func, "id", "")) == "spec_from_file_location":
                deps |= {Path(c.value).stem for arg in node.args for c in ast.walk(arg)
                         if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        graph[name] = {d for d in deps if d in scripts and d != name}
    return graph


def test_the_script_graph_sees_both_ways_a_benchmark_loads_another(tmp_path):
    """`_script_graph` finds a circle made by a plain import and one by a file load."""
    (tmp_path / "a.py").write_text("def f():\n    import b\n")
    (tmp_path / "b.py").write_text("import importlib.util\nfrom pathlib import Path\n"
                                   "s = importlib.util.spec_from_file_location(\n"
                                   "    'a', Path(__file__).with_name('a.py'))\n")
    graph = _script_graph(tmp_path)
    assert graph == {"a": {"b"}, "b": {"a"}}
    with pytest.raises(AssertionError, match="import circle: a -> b -> a"):
        _no_circle(graph)
    assert _script_graph(ROOT / "benchmarks")["tables"] >= {"tu_fidelity"}  # a file load


def _no_circle(graph: dict[str, set[str]]) -> None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph.get(m, ())):
            if state.get(d) == 1:
                raise AssertionError("import circle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_imports_only_go_down_and_never_in_a_circle():
    known = _modules("ablate")
    graph: dict[str, set[str]] = {m: set() for m in known}
    upward = []
    for module, path in known.items():
        for target, names, node in _imports(module, path):
            if not target.startswith("ablate"):
                continue
            for dep in _resolve(target, names, known):
                if dep == module or module.startswith(dep + "."):
                    continue  # a package's own __init__
                graph[module].add(dep)
                if _floor(dep) > _floor(module):
                    upward.append(f"{module} imports {dep} (line {node.lineno})")
    assert not upward, "imports going up a floor:\n" + "\n".join(upward)
    _no_circle(graph)  # lazy imports inside functions included


def test_no_module_imports_another_modules_private_names():
    bad = []
    for package in ("ablate", "analysis", "result_store", "benchmarks"):
        for module, path in _modules(package).items():
            for target, names, node in _imports(module, path):
                if not target.startswith(("ablate", "analysis", "result_store")):
                    continue
                for n in names:
                    if n.startswith("_") and not n.startswith("__"):
                        bad.append(f"{module}: from {target} import {n} (line {node.lineno})")
    assert not bad, "\n".join(bad)


def test_analysis_imports_nothing_from_ablate():
    for module, path in _modules("analysis").items():
        for target, _, node in _imports(module, path):
            assert not target.startswith("ablate"), f"{module} imports {target} ({node.lineno})"


def test_the_store_format_imports_neither_ablate_nor_analysis():
    """result_store lies below both: the runner and the analysis share its one reader."""
    for module, path in _modules("result_store").items():
        for target, _, node in _imports(module, path):
            top = target.split(".")[0]
            assert top not in ("ablate", "analysis"), f"{module} imports {target} ({node.lineno})"


def test_every_module_says_what_it_holds():
    for package in ("ablate", "analysis", "result_store"):
        for module, path in _modules(package).items():
            tree = ast.parse(path.read_text())
            if not tree.body:
                continue  # an empty package marker
            assert ast.get_docstring(tree), f"{module}: no docstring saying what it holds"


MAX_MODULE_LINES = 450  # a module past this is split by what it holds


def test_no_module_is_longer_than_the_limit():
    long = [f"{module}: {n} lines" for package in ("ablate", "analysis", "result_store")
            for module, path in _modules(package).items()
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not long, f"modules over {MAX_MODULE_LINES} lines:\n" + "\n".join(long)


def test_the_public_entry_points_keep_their_names():
    import ablate.data
    import ablate.train
    import ablate.trial.graph

    assert ablate.train.run_trial is ablate.trial.graph.run_trial  # the documented old path
    assert ablate.train.run_trial_full is ablate.trial.graph.run_trial_full
    assert callable(ablate.data.load_dataset)
    assert (ROOT / "ablate" / "run.py").is_file() and (ROOT / "analysis" / "report.py").is_file()


def test_no_module_reads_a_private_attribute_of_another_module():
    """`import ablate.trial.packed as p; p._x` reaches into p as much as `from ... import _x`."""
    bad = []
    for package in ("ablate", "analysis", "benchmarks"):
        known = {**_modules("ablate"), **_modules("analysis")}
        for module, path in _modules(package).items():
            tree = ast.parse(path.read_text())
            aliases = {}  # local name -> imported project module
            for target, _, node in _imports(module, path):
                if isinstance(node, ast.Import):
                    for a in node.names:
                        if a.name in known:
                            aliases[a.asname or a.name] = a.name
                else:
                    for a in node.names:
                        if f"{target}.{a.name}" in known:
                            aliases[a.asname or a.name] = f"{target}.{a.name}"
            for node in ast.walk(tree):
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                        and node.value.id in aliases and node.attr.startswith("_")
                        and not node.attr.startswith("__") and aliases[node.value.id] != module):
                    bad.append(f"{module}: {node.value.id}.{node.attr} (line {node.lineno})")
    assert not bad, "\n".join(bad)


# Ray (Tune included), torch and scikit-image: their private names go through ablate.compat only
LIBRARIES = ("ray", "torch", "skimage")
# private names known to be theirs, caught on any object (one handed out by a function, say)
LIBRARY_PRIVATE_NAMES = {
    "_private", "_internal", "_raylet", "_global_node", "_actor_task_failed",  # ray / Tune
    "_C", "_cuda_endAllocateToPool", "_cuda_releasePool", "_dynamo", "_inductor",  # torch
    "_slic", "_slic_cython", "_enforce_label_connectivity_cython",  # scikit-image
}
# compat's accessors that hand out a private module or class itself (every attribute read on
# it would be a private call outside compat): compat's own use and the tests only
RAW_ACCESSORS = {"ray_worker", "_ray_utils", "_tune_actor_manager"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _from_library(module: str) -> bool:
    return module.split(".")[0] in LIBRARIES


def _root(node: ast.AST) -> ast.AST:
    """The leftmost part of `a.b().c[0].d`: `a`."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def library_private_accesses(source: str) -> list[str]:
    """Where `source` reaches a private name of Ray, Tune, torch or scikit-image (see
    `test_only_compat_touches_private_names_of_ray_torch_and_skimage`)."""
    tree = ast.parse(source)
    library: set[str] = set()  # local names bound to a module or object of those libraries
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _from_library(a.name):
                    library.add(a.asname or a.name.split(".")[0])
                    if any(_private(p) for p in a.name.split(".")):
                        bad.append(f"import {a.name} (line {node.lineno})")
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if _from_library(node.module):
                for a in node.names:
                    library.add(a.asname or a.name)
                    if any(_private(p) for p in [*node.module.split("."), a.name]):
                        bad.append(f"from {node.module} import {a.name} (line {node.lineno})")
            if node.module == "ablate.compat":
                bad += [f"from ablate.compat import {a.name}: hands out a private module or "
                        f"class (line {node.lineno})" for a in node.names if a.name in RAW_ACCESSORS]
    for node in ast.walk(tree):
        where, attr = None, None
        if isinstance(node, ast.Attribute) and _private(node.attr):
            where, attr = node.value, node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _private(node.args[1].value)):
            where, attr = node.args[0], node.args[1].value
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module",
                                                                              "__import__")
              and _from_library(node.args[0].value)
              and any(_private(p) for p in node.args[0].value.split("."))):
            bad.append(f"import_module({node.args[0].value!r}) (line {node.lineno})")
        if attr is None:
            continue
        root = _root(where)
        if attr in LIBRARY_PRIVATE_NAMES or (isinstance(root, ast.Name) and root.id in library):
            bad.append(f"{ast.unparse(where)}.{attr} (line {node.lineno})")
    return bad


def test_only_compat_touches_private_names_of_ray_torch_and_skimage():
    """Every private name of Ray (Tune included), torch and scikit-image that ablate uses goes
    through an accessor of `ablate.compat`, which checks the version and that the name is
    there (issue 42). Which objects count as theirs is decided by the source alone, so the rule
    is pragmatic: in every module of ablate/ and analysis/ but ablate/compat.py,

    - a private attribute (one leading underscore, not a dunder) read, written or passed to
      getattr/setattr/hasattr/delattr as a literal, on an expression whose leftmost name was
      imported from ray, torch or skimage (`ray._private`, `torch._C`, `tune.x._y`,
      `torch.cuda.current_stream()._z`);
    - a private attribute on any object when its name is in `LIBRARY_PRIVATE_NAMES`, the
      private names known to be theirs (`x._global_node`, `manager._actor_task_failed`, on
      objects handed out by a function, which the source cannot trace);
    - importing a private module or name of those packages (`from ray._private import
      worker`, `import torch._C`, `from torch import _C`, `import_module("ray._private.x")`);
    - importing compat's accessors that hand out a private module or class itself
      (`RAW_ACCESSORS`: every attribute read on what they return is private to Ray).

    A module's own private attributes (`self._lock`, a subclass's own `self._waiting`) and
    public names of the standard library (`os._exit`) are not theirs and pass."""
    bad = []
    for package in ("ablate", "analysis"):
        for module, path in _modules(package).items():
            if module == "ablate.compat":
                continue
            bad += [f"{module}: {b}" for b in library_private_accesses(path.read_text())]
    assert not bad, ("private names of Ray/torch/scikit-image outside ablate.compat (add an "
                     "accessor there):\n" + "\n".join(bad))


def test_the_private_name_rule_catches_what_it_names():
    """The rule of the test above, on the calls issue 42 moved into ablate.compat and others."""
    caught = {
        "manager = tune_actor_manager_of_some_kind()\noriginal = manager._actor_task_failed": 1,
        "import ray\nray._private.worker.print_to_stdstream = quiet": 1,
        "node = getattr(worker(), '_global_node', None)": 1,
        "x._global_node.get_session_dir_path()": 1,
        "import torch\ntorch._C._cuda_releasePool(0, pool)": 2,
        "import torch as t\nt.cuda.current_stream()._as_parameter_": 1,
        "from ray import tune\ntune.Tuner._private_thing": 1,
        "from ray._private import worker": 1,
        "import skimage.segmentation._slic": 1,
        "from torch import _C": 1,
        "import importlib\nimportlib.import_module('ray._private.utils')": 1,
        "from ablate.compat import ray_worker": 1,
        "setattr(torch_module, '_C', None)": 1,
    }
    for source, n in caught.items():
        assert len(library_private_accesses(source)) == n, (source, library_private_accesses(source))
    passed = ["self._lock = 1", "import os\nos._exit(1)", "import torch\ntorch.cuda.is_available()",
              "from ablate.compat import wrap_print_to_stdstream, ray_session_dir",
              "import numpy as np\nnp._private_thing", "other._cache", "x.__class__"]
    for source in passed:
        assert library_private_accesses(source) == [], source


# The runner's stages (docs/design.md): study -> plan -> execute; search (kind: search) uses
# them all. A stage imports nothing from a later one.
STAGES = "ablate.runner."
LATER = {"study": ("plan", "execute", "search"), "plan": ("execute", "search")}
# study/ -> a later stage: the exceptions, each a lazy import inside a function, with its reason
STUDY_EXCEPTIONS = {
    ("ablate.runner.study.compose", "ablate.runner.plan.adaptive"):
        "`_set_seeds` parses `seeds: {adaptive: ...}` with `parse_adaptive`: the adaptive-seed "
        "options (AdaptiveSeeds) live with the round planning that reads them (issue 43); lazy, "
        "so a study without adaptive seeds never loads plan/",
    ("ablate.runner.study.expand", "ablate.runner.plan.adaptive"):
        "`build_study` checks an adaptive study with `check_study`, which needs the report's rows "
        "and one-axis comparisons of the expanded trials (`plan_rows`, from analysis.variants): "
        "planning; lazy, only for adaptive studies",
}
# plan/ -> execute/ or search/ inside a function (never at module level): none needed so far
PLAN_LAZY_EXCEPTIONS: dict[tuple[str, str], str] = {}


def _in_functions(tree: ast.Module) -> set[int]:
    """Line numbers of the statements inside a function (run when it is called, not on import)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for sub in ast.walk(node):
                if sub is not node:
                    lines.add(getattr(sub, "lineno", -1))
    return lines


def _stage(module: str) -> str | None:
    return module[len(STAGES):].split(".")[0] if module.startswith(STAGES) else None


def test_the_runner_stages_import_only_earlier_stages():
    """study/ imports nothing of plan/, execute/ or search/; plan/ nothing of execute/ or search/
    at module level, and inside a function only what `PLAN_LAZY_EXCEPTIONS` lists (imports under
    `if TYPE_CHECKING:` do not run and pass)."""
    known = _modules("ablate")
    bad, used = [], set()
    for module, path in known.items():
        stage = _stage(module)
        if stage not in LATER:
            continue
        lazy = _in_functions(ast.parse(path.read_text()))
        for target, names, node in _imports(module, path):
            for dep in _resolve(target, names, known) or [target]:
                if _stage(dep) not in LATER[stage]:
                    continue
                key, where = (module, dep), f"{module} imports {dep} (line {node.lineno})"
                allowed = STUDY_EXCEPTIONS if stage == "study" else PLAN_LAZY_EXCEPTIONS
                if node.lineno in lazy and key in allowed:
                    used.add(key)
                elif node.lineno in lazy and stage == "plan":
                    bad.append(where + ": lazy, not in PLAN_LAZY_EXCEPTIONS")
                else:
                    bad.append(where)
    assert not bad, "a runner stage imports a later one:\n" + "\n".join(bad)
    stale = set(STUDY_EXCEPTIONS) | set(PLAN_LAZY_EXCEPTIONS)
    assert used == stale, f"exceptions no longer needed (remove them): {sorted(stale - used)}"


def test_the_stage_rule_catches_what_it_names(tmp_path, monkeypatch):
    """The rule above on a fabricated runner: a module-level plan -> execute import and a lazy
    study -> search import fail; a TYPE_CHECKING-only one passes."""
    pkg = tmp_path / "ablate" / "runner"
    for sub in ("study", "plan", "execute", "search"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (tmp_path / "ablate" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "execute" / "x.py").write_text("X = 1\n")
    (pkg / "search" / "s.py").write_text("S = 1\n")
    (pkg / "plan" / "p.py").write_text("from ablate.runner.execute.x import X\n")
    (pkg / "study" / "q.py").write_text("def f():\n    from ablate.runner.search.s import S\n")
    (pkg / "study" / "t.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                        "    from ablate.runner.execute.x import X\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "STUDY_EXCEPTIONS", {})
    try:
        test_the_runner_stages_import_only_earlier_stages()
    except AssertionError as e:
        text = str(e)
    else:
        raise AssertionError("the stage rule passed a fabricated violation")
    assert "ablate.runner.plan.p imports ablate.runner.execute.x" in text
    assert "ablate.runner.study.q imports ablate.runner.search.s" in text
    assert "study.t" not in text
