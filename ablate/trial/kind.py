"""The interface between the runner and one kind of trial (graph, SDC, or a test's own).

The runner (study expansion, packing, Ray workers, the result store) knows a trial
only through its kind: how to resolve a config, which store columns it gives,
its identity, and how to run it alone or packed with others. A kind is an
instance of a `TrialKind` subclass, registered by its 'module:attr' path in
`ablate.runner.study.kinds.TRIAL_KINDS`, so driver and workers import the same object.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrialResult:
    """What running a trial gives: the store's rows and the per-epoch curves."""

    records: list[dict] = field(default_factory=list)  # one per (seed, split)
    curves: list[dict] = field(default_factory=list)  # one per (seed, evaluated epoch)


class TrialKind:
    """One kind of trial, as the runner sees it. Subclasses set `config` and `run`."""

    name: str = ""  # the study files' ``kind:`` value
    config: type  # frozen dataclass holding every axis of a trial
    datasets: bool = True  # trials load an `ablate.data` dataset (the runner caches and ships it)
    execution_fields: tuple[str, ...] = ("study", "device")  # how/where it runs: not identity
    store_kind: str = ""  # the declared result-store schema of its files (result_store.schema.KINDS)
    # its own columns beyond that schema: (name, type) with type string, int64, double or bool
    store_columns: tuple[tuple[str, str], ...] = ()

    def resolve(self, cfg: Any) -> Any:
        """The config with recipe defaults filled in, validated (raises ConfigError)."""
        return cfg

    def columns(self, cfg: Any) -> dict:
        """Every axis of `cfg` as flat, Parquet-friendly store columns ('dataset' included)."""
        raise NotImplementedError

    def inapplicable(self, cfg: Any) -> set[str]:
        """Axes whose value does not change this trial (blank in trial tables)."""
        return set()

    def data_hash(self, cfg: Any) -> str | None:
        """The hash of the trial's dataset recipe (part of its identity), or None."""
        return None

    def trial_id(self, cfg: Any, data_hash: str | None) -> str:
        """Hash of the resolved config minus `execution_fields`, plus the dataset recipe hash."""
        cols = {k: v for k, v in self.columns(cfg).items() if k not in self.execution_fields}
        return stable_hash({"kind": self.name, "cfg": cols, "data": data_hash})

    def check_files(self, cfg: Any) -> None:
        """Raise `ConfigError` (one line) when a local file or folder the trial reads is
        missing here. The runner calls it before an embedded Ray starts, and dry runs do, so
        a bad path is refused before any trial fails on it (kinds whose data the runner
        prepares, `datasets`, are checked when it is prepared instead)."""

    def run(self, cfg: Any) -> TrialResult:
        """Train and evaluate every seed of `cfg`."""
        raise NotImplementedError

    def pack_key(self, cfg: Any) -> str | None:
        """Trials with equal, non-None keys (and one dataset recipe) may run as one pack."""
        return None

    def run_pack(self, cfgs: list) -> list[TrialResult]:
        """Several trials of one pack; one result per config, in order."""
        return [self.run(c) for c in cfgs]

    def host_memory(self, cfgs: list, data: dict | None) -> int | None:
        """Bytes of host memory a worker needs for the pack `cfgs` given its prepared dataset's
        `ablate.data.cache.footprint` (None when it has none): Ray's ``memory`` resource of
        the pack's trial. None: not known (nothing is declared)."""
        return None


def stable_hash(obj: Any) -> str:
    """A 12-hex-digit hash of a JSON-able object (keys sorted, so order does not matter)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]
