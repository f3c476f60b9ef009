"""ablate: a Ray-distributed ablation study of node attention and pooling in GNNs.

``from ablate import read_trials`` (and ``read_curves``) reads a result store: the names are
loaded on first use (a module ``__getattr__``), so ``import ablate`` stays light (no torch,
no Ray, no pandas).
"""

from typing import Any

__version__ = "0.1.0"

# public name -> the module that defines it (imported when the name is first used)
_LAZY = {"read_trials": "ablate.runner.execute.store",
         "read_curves": "ablate.runner.execute.store"}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # the next lookup is a plain attribute
        return value
    raise AttributeError(f"module 'ablate' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
