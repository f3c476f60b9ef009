"""A study expanded into trials: variants x grid x seed chunks, each resolved, validated and
given its id, before Ray starts.

`build_study(name, overrides)` composes the study (`ablate.runner.study.compose`: the YAML
file plus Hydra overrides) and expands it (a study larger than its `trial_limit` is
refused first, counted without building a trial: `check_plan_size`); every trial's config is built from its
axes (`make_config`, values coerced to the field types), resolved and validated by
its kind (`ablate.runner.study.kinds`), so a bad key or value is one `ConfigError` line.
"""

from __future__ import annotations

import itertools
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.errors import ConfigError, did_you_mean
from ablate.runner.study.compose import StudySpec, apply_overrides, load_spec, seed_list
from ablate.runner.study.kinds import config_fields, trial_kind

if TYPE_CHECKING:
    from ablate.runner.execute.progress import Progress


@dataclass(frozen=True)
class Trial:
    """One unit of work for Ray: a resolved config (one or more seeds) and its identity."""

    trial_id: str
    kind: str
    config: Any  # resolved config dataclass
    dataset: str | None = None
    data_params: tuple = ()  # sorted (key, value)
    data_hash: str | None = None


@dataclass
class Study:
    spec: StudySpec
    trials: list[Trial]
    # what plan.json names when it is more than `trials`: an adaptive study's rounds so far
    planned: list[str] | None = None
    # (i, j): variant j (from 0) gives the same trials as variant i < j (overrides made them
    # equal, e.g. dataset=pyg over a study of several datasets): each trains once
    merged: list[tuple[int, int]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def plan_ids(self) -> list[str]:
        """The trial ids a run records as planned (plan.json)."""
        return list(self.planned) if self.planned is not None else [t.trial_id for t in self.trials]


def coerce(name: str, value: Any, hint: Any) -> Any:
    """Convert a YAML/command-line value to the field's declared type, or raise ConfigError."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for a in (a for a in args if a is not type(None)):
            try:
                return coerce(name, value, a)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0])
    if hint is Any:
        return value
    if hint is tuple or origin is tuple:
        if value is None:
            raise ConfigError(f"{name} must be a list, got null")
        items = list(value) if isinstance(value, list | tuple) else [value]
        elem = args[0] if args else Any
        return tuple(coerce(name, v, elem) for v in items)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if hint is str:
        if value is None or isinstance(value, list | dict):
            raise ConfigError(f"{name} must be a single value, got {value!r}")
        return str(value).lower() if isinstance(value, bool) else str(value)
    return value


def _freeze(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


def make_config(kind: str, axes: dict) -> Any:
    """Build the kind's config dataclass from raw axis values (type-checked, not resolved)."""
    return trial_kind(kind).config(**config_kwargs(kind, axes))


def config_kwargs(kind: str, axes: dict) -> dict[str, Any]:
    """The keyword arguments of the kind's config dataclass for raw axis values (coerced to
    the field types; raises ConfigError)."""
    fields = config_fields(kind)
    kwargs: dict[str, Any] = {}
    data, extra = {}, {}
    for key, value in axes.items():
        if key.startswith("data."):
            data[key[5:]] = value
        elif key.startswith("+"):
            extra[key[1:]] = value
        elif key == "data_params":
            data.update(dict(value))
        elif key == "extra":
            extra.update(dict(value))
        elif key in fields:
            kwargs[key] = coerce(key, value, fields[key])
        else:
            raise ConfigError(f"unknown axis {key!r}; valid: {', '.join(sorted(fields))}"
                              f"{did_you_mean(key, sorted(fields))}")
    if "data_params" in fields:
        kwargs["data_params"] = tuple(sorted((k, _freeze(v)) for k, v in data.items()))
    elif data:
        raise ConfigError(f"trial kind {kind!r} takes no data.* parameters")
    if extra:
        if "extra" not in fields:
            raise ConfigError(f"trial kind {kind!r} takes no +new=value axes")
        kwargs["extra"] = tuple(sorted((k, _freeze(v)) for k, v in extra.items()))
    return kwargs


def resolve_config(kind: str, cfg: Any) -> Any:
    """`cfg` with its kind's recipe defaults filled in, validated (raises ConfigError)."""
    return trial_kind(kind).resolve(cfg)


def make_trial(kind: str, cfg: Any, recipes: dict | None = None) -> Trial:
    """Resolve and validate `cfg`, and compute its trial id (config + dataset recipe hash).
    `recipes` ((kind, dataset, data_params) -> data hash) keeps each recipe's hash across
    calls: a recipe is hashed once however many trials share it."""
    k = trial_kind(kind)
    cfg = k.resolve(cfg)
    if not k.datasets:
        return Trial(k.trial_id(cfg, None), kind, cfg)
    key = (kind, cfg.dataset, cfg.data_params)
    try:
        data_hash = recipes[key] if recipes is not None and key in recipes else k.data_hash(cfg)
    except ConfigError as e:
        raise ConfigError(str(e) if str(e).startswith("data.") else f"data.*: {e}") from None
    if recipes is not None:
        recipes[key] = data_hash
    return Trial(k.trial_id(cfg, data_hash), kind, cfg, cfg.dataset, cfg.data_params, data_hash)


def _drop_unused_required(kind: str, axes: dict) -> dict:
    """A required dataset parameter (``data.KEY: ???``) the trial's dataset does not take is
    dropped: `study=mnist dataset=digits_sp` (offline digits) needs no MNIST path."""
    if not trial_kind(kind).datasets or not isinstance(axes.get("dataset"), str):
        return axes
    from ablate.data import DATASETS, dataset_params

    if axes["dataset"] not in DATASETS:
        return axes  # validation names the valid datasets
    takes = dataset_params(axes["dataset"])
    return {k: v for k, v in axes.items()
            if not (k.startswith("data.") and v == "???" and k[5:] not in takes)}


# ``data.KEY: seed`` in a study: the dataset parameter takes each trial's own seed (such a
# study trains one seed per trial), as the reference draws a fresh TU split per run
PER_SEED = "seed"


def plan_size(spec: StudySpec) -> tuple[int, str]:
    """The trials `expand` would make (before duplicates are merged), counted without
    building any, and the axes that multiply to it, in words."""
    n_combos = math.prod(len(v) for v in spec.grid.values())
    fixed = {("data." + k): v for k, v in spec.data.items()}
    fixed.update(spec.fixed)
    step = spec.seeds_per_trial
    chunks, n_seeds = [], []
    for variant in spec.variants or [{}]:
        seeds = seed_list(variant["seeds"]) if "seeds" in variant else spec.seeds
        per_seed = any(k.startswith("data.") and v == PER_SEED
                       for k, v in {**fixed, **variant}.items())
        chunks.append(len(seeds) if per_seed else -(-len(seeds) // step))
        n_seeds.append(len(seeds))
    total = n_combos * sum(chunks)
    words = []
    if len(chunks) > 1:
        words.append(f"{len(chunks)} variants")
    words += [f"{axis} ({len(v)} values)" for axis, v in spec.grid.items() if len(v) > 1]
    if len(set(chunks)) > 1:
        words.append(f"{sum(chunks):,} seed chunks over the variants")
    elif chunks[0] == n_seeds[0]:
        words.append(f"{chunks[0]:,} seeds")
    else:
        words.append(f"{chunks[0]:,} seed chunks ({n_seeds[0]:,} seeds, seeds_per_trial={step})")
    return total, " x ".join(words)


def check_plan_size(spec: StudySpec) -> int:
    """The number of trials the study expands to; above the study's `trial_limit`, a one-line
    `ConfigError` naming the count, the axes that multiply it and the setting that lifts it."""
    total, why = plan_size(spec)
    _check_limit(spec, total, why)
    return total


def _check_limit(spec: StudySpec, total: int, why: str) -> None:
    if total > spec.trial_limit:
        raise ConfigError(f"study {spec.name} expands to {total:,} trials ({why}), more than "
                          f"trial_limit={spec.trial_limit}; narrow a sweep, or lift the limit "
                          f"with trial_limit={total}")


def expand(spec: StudySpec, progress: Progress | None = None,
           merged: list[tuple[int, int]] | None = None) -> list[Trial]:
    """Every trial of the study: variants x grid x seed chunks, resolved, deduplicated;
    a ``data.KEY: seed`` parameter gives every seed its own trial and that seed as value.
    A study larger than its `trial_limit` is refused before any trial is built; `progress`
    counts the trials built (the 'planning' step); `merged` gets (i, j) for each variant j
    whose trials variant i < j already made (`Study.merged`)."""
    total = check_plan_size(spec)
    if progress is not None:
        progress.step("planning", total, "trials")
    grid_keys = list(spec.grid)
    combos = [dict(zip(grid_keys, c)) for c in itertools.product(*spec.grid.values())]
    fixed = {("data." + k): v for k, v in spec.data.items()}
    fixed.update(spec.fixed)
    step = spec.seeds_per_trial
    trials: dict[str, Trial] = {}
    recipes: dict[tuple, str] = {}  # (kind, dataset, data_params) -> data hash, computed once
    build, seeds_hint = trial_kind(spec.kind).config, config_fields(spec.kind).get("seeds")
    origin: dict[str, int] = {}  # trial id -> the variant that made it first
    for vi, variant in enumerate(spec.variants or [{}]):
        variant = dict(variant)
        seeds = seed_list(variant.pop("seeds")) if "seeds" in variant else spec.seeds
        chunks = [tuple(seeds[i:i + step]) for i in range(0, len(seeds), step)]
        for combo in combos:
            base = _drop_unused_required(spec.kind, {**fixed, **variant, **combo})
            missing = [k for k, v in base.items() if v == "???"]
            if missing:
                raise ConfigError(f"study {spec.name} needs {missing[0]}=VALUE on the command "
                                  "line")
            per_seed = [k for k, v in base.items() if k.startswith("data.") and v == PER_SEED]
            # the axes other than the seeds are coerced once per row (not per seed chunk)
            shared = None if per_seed else config_kwargs(
                spec.kind, {**base, "study": spec.name, "seeds": chunks[0]})
            for chunk in ([(s,) for s in seeds] if per_seed else chunks):
                if shared is None:
                    own = {k: chunk[0] for k in per_seed}  # e.g. a TU split drawn per run
                    cfg = make_config(spec.kind, {**base, **own, "study": spec.name,
                                                  "seeds": chunk})
                else:
                    cfg = build(**{**shared, "seeds": coerce("seeds", chunk, seeds_hint)})
                t = make_trial(spec.kind, cfg, recipes)
                trials.setdefault(t.trial_id, t)
                first = origin.setdefault(t.trial_id, vi)
                if merged is not None and first != vi and (first, vi) not in merged:
                    merged.append((first, vi))
                if progress is not None:
                    progress.advance()
    return list(trials.values())


def build_study(name: str, overrides: list[str] = (), directory: Path | None = None,
                progress: Progress | None = None) -> tuple[Study, dict]:
    """Load studies/NAME.yaml, apply overrides, expand and validate every trial (`progress`
    shows the planning step)."""
    spec = load_spec(name, directory)
    options = apply_overrides(spec, list(overrides))
    if spec.adaptive is not None:  # every round's trials (its seeds packed within the round)
        from ablate.runner.plan.adaptive import check_study

        merged: list[tuple[int, int]] = []
        trials = expand_rounds(spec, progress, merged)
        check_study(spec.adaptive, trials)
        return Study(spec, trials, merged=merged), options
    merged = []
    return Study(spec, expand(spec, progress, merged), merged=merged), options


def merge_notes(study: Study) -> list[str]:
    """One line per variant whose trials another variant already makes: the overrides (or
    the study file) made them equal, so they train once and are one row of the report."""
    variants = study.spec.variants

    def show(i: int) -> str:
        return "{" + ", ".join(f"{k}: {v}" for k, v in variants[i].items()) + "}"

    return [f"variants {i + 1} and {j + 1} of the study are the same once the overrides apply "
            f"({show(j)}): they train once and are one row in the report"
            for i, j in study.merged]


def expand_rounds(spec: StudySpec, progress: Progress | None = None,
                  merged: list[tuple[int, int]] | None = None) -> list[Trial]:
    """The trials of every round of an adaptive study, round by round: what it may train at
    most (each trial holds seeds of one round only, so a round's trials keep their ids). The
    study's `trial_limit` holds for all its rounds together, checked before any is built."""
    import dataclasses

    ad = spec.adaptive
    rounds = [dataclasses.replace(spec, seeds=ad.round_seeds(r),
                                  variants=[{k: v for k, v in var.items() if k != "seeds"}
                                            for var in spec.variants])
              for r in range(1, ad.rounds + 1)]
    sizes = [plan_size(one) for one in rounds]
    _check_limit(spec, sum(n for n, _ in sizes),
                 f"{len(rounds)} rounds of adaptive seeds up to max={ad.max}; round 1: "
                 f"{sizes[0][1]}")
    out: dict[str, Trial] = {}
    for r, one in enumerate(rounds, 1):
        for t in expand(one, progress if r == 1 else None, merged if r == 1 else None):
            out.setdefault(t.trial_id, t)
    return list(out.values())
