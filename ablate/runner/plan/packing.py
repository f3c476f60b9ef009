"""Packs: trials that train as one batched model inside one Ray trial.

A trial keeps its meaning (one resolved config and its seed chunk, one trial id,
one Parquet file). On a GPU one trial's seeds are far too few to fill the device,
so the runner groups trials whose configs differ only in values that stack per
member (`ablate.trial.packed.PACKABLE`: seeds, init of p, threshold, ratio, kl_weight)
and that use the same dataset recipe into packs of up to `pack_size` seeds. A
pack runs as one Ray trial through its kind's `pack` function; the driver still
writes one file per trial, each row tagged with its `pack_id`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ablate.runner.study.expand import Trial
from ablate.runner.study.kinds import trial_kind

GPU_PACK_SEEDS = 64  # pack_size=auto on a GPU: where packed step times flatten (DESIGN.md)


@dataclass(frozen=True)
class Pack:
    """Trials run together as one Ray trial; `pack_id` is the trial id for a pack of one."""

    pack_id: str
    trials: tuple[Trial, ...]

    @property
    def seeds(self) -> int:
        return sum(len(getattr(t.config, "seeds", (0,))) for t in self.trials)


def pack_seeds(setting: int | str, gpus_per_trial: float) -> int:
    """Seeds per pack: the study's pack_size, or auto = GPU_PACK_SEEDS with a GPU, else 0
    (0: every trial is its own pack, as on a CPU packing trials would only cost parallelism)."""
    if setting != "auto":
        return int(setting)
    return GPU_PACK_SEEDS if gpus_per_trial > 0 else 0


def _key(t: Trial) -> tuple | None:
    """What trials must share to be packed, or None if `t` trains alone."""
    key = trial_kind(t.kind).pack_key(t.config)
    return None if key is None else (t.kind, t.data_hash, key)


def make_packs(trials: list[Trial], max_seeds: int) -> list[Pack]:
    """Group `trials` (in order) into packs of at most `max_seeds` seeds (a trial never splits)."""
    groups: dict[object, list[list[Trial]]] = {}
    for t in trials:
        key = _key(t) if max_seeds > 1 else None
        if key is None:
            groups[("alone", t.trial_id)] = [[t]]
            continue
        packs = groups.setdefault(key, [[]])
        n = sum(len(x.config.seeds) for x in packs[-1])
        if packs[-1] and n + len(t.config.seeds) > max_seeds:
            packs.append([])
        packs[-1].append(t)
    return [Pack(_pack_id(p), tuple(p)) for ps in groups.values() for p in ps]


def _pack_id(trials: list[Trial]) -> str:
    if len(trials) == 1:
        return trials[0].trial_id
    blob = ",".join(t.trial_id for t in trials)
    return "pack-" + hashlib.sha256(blob.encode()).hexdigest()[:10]
