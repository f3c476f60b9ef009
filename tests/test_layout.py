"""The floors of the house (docs/design.md): imports only go down, no circle,
no module reaches into another's private names, the analysis reads Parquet only."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# floor of each part of the package, bottom first; a module may import its own floor or below
FLOORS = [("ablate.errors", "ablate.atomic", "ablate.compat"), ("ablate.data",), ("ablate.models",),
          ("ablate.config",), ("ablate.trial",), ("ablate.runner",), ("ablate.run", "ablate.train")]


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
