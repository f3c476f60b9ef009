"""A user's own code named in a study file or an override: 'package.module:attr'.

One mechanism for every open piece (a backbone layer, a trial kind, a data set class):
`load_object` imports the object at a path the way the driver sees it (the directory the
user runs from, then the driver's `sys.path`) and turns every failure into one
`ConfigError` line saying what failed and what is expected. Ray workers import the same
objects: the driver sends `import_paths()` with each trial (the folders it imports user code
from) and a worker adds those present on its node to its own `sys.path`
(`extend_import_path`) before it reads a trial's config. On a cluster whose nodes do not
share the driver's folders, the user's package is installed on every node, or shipped by
Ray (`runtime_env` ``working_dir`` / ``py_modules``; docs/usage.md).

Below every floor that names user code (ablate.data, ablate.models, the runner): it
imports only the standard library and `ablate.errors`.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import sysconfig
from collections.abc import Iterable
from typing import Any

from ablate.errors import ConfigError, did_you_mean

_NAME = r"[A-Za-z_]\w*"
OBJECT_PATH = re.compile(rf"^{_NAME}(\.{_NAME})*:{_NAME}(\.{_NAME})*$")  # package.module:attr
FORM = "'package.module:attr'"


def is_object_path(value: object) -> bool:
    """Whether `value` is written as 'package.module:attr' (a user's object, not a name)."""
    return isinstance(value, str) and bool(OBJECT_PATH.match(value))


def _ensure_cwd() -> None:
    """The directory the user runs from is importable, as `python -m` makes it (a console
    script or a notebook elsewhere may not have it on `sys.path`)."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def load_object(path: str, what: str) -> Any:
    """The object at 'package.module:attr' `path` (attr may be dotted: 'mod:Class.attr').

    `what` names it in errors ("backbone", "trial kind", ...). Raises `ConfigError`, one
    line, when the path is not of that form, its module is not found, importing it raised,
    or the attribute is missing.
    """
    if not is_object_path(path):
        raise ConfigError(f"{what} {path!r} is not a name or a path of the form {FORM}")
    module, _, attr = path.partition(":")
    _ensure_cwd()
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and (module == e.name or module.startswith(e.name + ".")):
            raise ConfigError(
                f"{what} {path!r}: no module named {e.name!r} here (looked in {os.getcwd()} "
                f"and sys.path); run from the folder that holds it, add that folder to "
                f"PYTHONPATH or install its package") from None
        raise ConfigError(f"{what} {path!r}: importing {module} raised "
                          f"{_one_line(e)}") from None
    except Exception as e:  # noqa: BLE001 - anything the user's module raises is one line
        raise ConfigError(f"{what} {path!r}: importing {module} raised {_one_line(e)}") from None
    obj: Any = mod
    for i, part in enumerate(attr.split(".")):
        if not hasattr(obj, part):
            owner = module if i == 0 else f"{module}:{'.'.join(attr.split('.')[:i])}"
            names = [n for n in dir(obj) if not n.startswith("_")]
            raise ConfigError(f"{what} {path!r}: {owner} has no attribute {part!r}"
                              f"{did_you_mean(part, names)}")
        obj = getattr(obj, part)
    return obj


def _one_line(e: BaseException) -> str:
    """'Type: first line of the message' of an exception."""
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def _installation() -> list[str]:
    """The folders of the Python installation (stdlib, site-packages): never sent."""
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots |= {sys.prefix, sys.base_prefix, sys.exec_prefix}
    return sorted(os.path.realpath(r) for r in roots if r)


def import_paths() -> list[str]:
    """The folders this process imports user code from, for its Ray workers: the working
    directory first, then every `sys.path` folder outside the Python installation, in order
    (absolute, each once)."""
    inside = _installation()
    out: list[str] = []
    for p in [os.getcwd(), *sys.path]:
        p = os.path.abspath(p or os.getcwd())
        real = os.path.realpath(p)
        if p in out or not os.path.isdir(p):
            continue
        if any(real == r or real.startswith(r + os.sep) for r in inside):
            continue
        out.append(p)
    return out


def extend_import_path(paths: Iterable[str]) -> list[str]:
    """In a Ray worker: append to `sys.path` each of the driver's `paths` that exists on this
    node and is not on it yet (appended, so nothing of this node's own is shadowed). Returns
    the folders added."""
    added = []
    for p in paths:
        if p and p not in sys.path and os.path.isdir(p):
            sys.path.append(p)
            added.append(p)
    return added
