"""The trial kinds the runner knows, by name: their registry and how to load one.

`TRIAL_KINDS` maps a study file's ``kind:`` to the 'module:attr' path of an
`ablate.trial.kind.TrialKind` instance; the driver and the Ray workers (which get
the path in their payload) import the same object. A study file may also name a user's
own kind by its path (``kind: mypkg.kinds:KIND``), imported by `ablate.user_code` in the
driver and in the workers alike.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any

from ablate.errors import ConfigError, choice_error
from ablate.trial.kind import TrialKind
from ablate.user_code import is_object_path, load_object

# One line per trial kind: the 'module:attr' path of its `ablate.trial.kind.TrialKind`
# instance. The driver and the Ray workers (which get the path in the payload) import it.
TRIAL_KINDS: dict[str, str] = {
    "graph": "ablate.trial.graph:KIND",
    "sdc": "ablate.trial.sdc:KIND",
}


def kind_path(name: str) -> str:
    """The 'module:attr' path of the trial kind `name`: a registered name's, or a user's
    kind named by its path (itself)."""
    if name in TRIAL_KINDS:
        return TRIAL_KINDS[name]
    if is_object_path(name):
        return name
    raise choice_error("trial kind", name, [*TRIAL_KINDS, "package.module:attr (your own)"])


def trial_kind(name: str) -> TrialKind:
    """The trial kind `name` (registered, or a user's 'package.module:attr'); one line
    (`ConfigError`) when it does not import or is not a `TrialKind` instance."""
    return load_attr(kind_path(name))


def load_attr(path: str) -> TrialKind:
    """The `TrialKind` instance at 'package.module:attr' `path` (driver and Ray workers)."""
    kind = load_object(path, "trial kind")
    if not isinstance(kind, TrialKind):
        what = "a class" if isinstance(kind, type) else f"a {type(kind).__name__}"
        raise ConfigError(f"trial kind {path!r} is {what}, not an instance of "
                          "ablate.trial.kind.TrialKind (a study file's kind: names the instance)")
    return kind


# config fields that are not axes: no override sets them as KEY=VALUE (they have own keys)
NOT_AXES = ("study", "seeds", "data_params", "extra")


@functools.cache
def config_fields(kind: str) -> dict[str, Any]:
    """Field name -> type hint of the kind's config dataclass (read-only; once per kind)."""
    cls = trial_kind(kind).config
    hints = typing.get_type_hints(cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(cls)}
