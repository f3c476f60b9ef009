"""The trial kinds the runner knows, by name: their registry and how to load one.

`TRIAL_KINDS` maps a study file's ``kind:`` to the 'module:attr' path of an
`ablate.trial.kind.TrialKind` instance; the driver and the Ray workers (which get
the path in their payload) import the same object.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import typing
from typing import Any

from ablate.errors import choice_error
from ablate.trial.kind import TrialKind

# One line per trial kind: the 'module:attr' path of its `ablate.trial.kind.TrialKind`
# instance. The driver and the Ray workers (which get the path in the payload) import it.
TRIAL_KINDS: dict[str, str] = {
    "graph": "ablate.trial.graph:KIND",
    "sdc": "ablate.trial.sdc:KIND",
}


def trial_kind(name: str) -> TrialKind:
    """The registered trial kind `name`."""
    if name not in TRIAL_KINDS:
        raise choice_error("trial kind", name, TRIAL_KINDS)
    return load_attr(TRIAL_KINDS[name])


def load_attr(path: str) -> Any:
    """Import 'package.module:attr'."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


# config fields that are not axes: no override sets them as KEY=VALUE (they have own keys)
NOT_AXES = ("study", "seeds", "data_params", "extra")


@functools.cache
def config_fields(kind: str) -> dict[str, Any]:
    """Field name -> type hint of the kind's config dataclass (read-only; once per kind)."""
    cls = trial_kind(kind).config
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}
