"""A search study (``kind: search``): its spec, composed by `ablate.runner.study.compose`, and its space.

`load_search_spec` reads ``studies/NAME.yaml`` with `compose.study_file` and the
command line with `compose.parse_overrides`, the reader and the Hydra override
grammar of every other study, so ``seed=range(0,5)``, ``data.n_train=200``,
``~data.KEY`` and ``+new=value`` mean the same here as there. Beyond the keys of
an ordinary study a search study takes ``arms=a,b``, ``final_data.KEY=`` and
``search.PARAM.KEY=`` (see docs/search.md). `arm_config` / `final_config` turn
an arm into the `TrialConfig` a search trial or the final evaluation trains;
`build_space` gives the arm's Optuna distributions.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ablate.errors import ConfigError, did_you_mean
from ablate.runner.study.compose import (
    STUDY_KEYS,
    locate_study,
    parse_overrides,
    seed_list,
    study_file,
)
from ablate.runner.study.expand import make_config, resolve_config
from ablate.runner.study.kinds import NOT_AXES, config_fields

METRIC = "val_acc"  # the objective: mean validation accuracy over the members (see `objective`)
MODE = "max"
RANGES = ("threshold", "kl_weight", "init_scale", "ratio")  # searched as {low, high, log}
CHOICES = ("scorer", "init_dist")  # searched as {choices: [...]}
PARAMS = RANGES + CHOICES  # searchable axes
OBJECTIVES = ("mean", "mean_minus_std")  # mean val accuracy; or minus its std over folds
SECTIONS = ("fixed", "data", "arms", "search", "final_data", "baselines")  # mappings
SEED_KEYS = ("seeds", "final_seeds")
# settings one value sets (YAML or command line): name -> (smallest allowed, or a type)
SETTINGS: dict[str, Any] = {
    "n_trials": 0, "max_trials": 0, "sampler_seed": 0, "grace_period": 1,
    "reduction_factor": 2, "max_concurrent": 1, "cv_folds": 0, "cpus_per_trial": float,
    "max_failures": 0,
    "objective": OBJECTIVES, "results_dir": str, "ray_address": str, "dry_run": bool,
}


@dataclass
class SearchSpec:
    """A search study after command-line overrides."""

    name: str
    description: str = ""
    fixed: dict = field(default_factory=dict)  # TrialConfig axes shared by every arm
    data: dict = field(default_factory=dict)  # dataset recipe overrides
    arms: dict = field(default_factory=dict)  # arm name -> its fixed axes
    search: dict = field(default_factory=dict)  # param -> {low, high, log, when} or {choices, when}
    seeds: list = field(default_factory=lambda: [0, 1, 2])  # trained inside every search trial
    cv_folds: int = 0  # k >= 2: k-fold CV over train + val graphs; 0: train on train, score val
    objective: str = "mean"  # mean val accuracy, or mean_minus_std (over folds; reference TU)
    final_data: dict = field(default_factory=dict)  # recipe overrides for the final evaluation only
    reference: dict | None = None  # axes of the final 'reference' row; None = SPEC §3 threshold
    baselines: dict = field(default_factory=dict)  # role -> axes: extra rows of the final evaluation
    final_seeds: list = field(default_factory=lambda: [100, 101, 102])  # fresh seeds, final eval
    n_trials: int = 20  # new Optuna trials per arm and run
    max_trials: int | None = None  # cap on finished trials per arm (resume up to a total)
    sampler_seed: int = 0  # TPE seed (offset by the trials already in the study)
    grace_period: int = 5  # ASHA: epochs before a trial may be stopped
    reduction_factor: int = 2  # ASHA: keep 1 / reduction_factor per rung
    max_concurrent: int = 2  # Tune trials at once
    cpus_per_trial: float = 1
    # retries of a search trial that raises, returns NaN or loses its worker, when a retry may
    # fix its error (`ablate.errors.retryable`): the grid studies' setting and default
    max_failures: int = STUDY_KEYS["max_failures"][0]
    results_dir: str = "results"
    ray_address: str | None = None
    dry_run: bool = False


_DEFAULTS = SearchSpec(name="")


def is_search_study(name: str) -> bool:
    """True when studies/NAME.yaml exists and declares ``kind: search``."""
    try:
        return study_file(name).get("kind") == "search"
    except ConfigError:
        return False


def load_search_spec(name: str, overrides: list[str] = ()) -> SearchSpec:
    """studies/NAME.yaml (``kind: search``) with Hydra-grammar overrides, validated."""
    path = locate_study(name)
    raw = dict(study_file(str(path)))
    if raw.pop("kind", None) != "search":
        raise ConfigError(f"{path}: not a search study (it needs kind: search)")
    known = {f.name for f in dataclasses.fields(SearchSpec)} - {"name"}
    bad = sorted(set(raw) - known)
    if bad:
        raise ConfigError(f"{path}: unknown section(s) {bad}; valid: {sorted(known | {'kind'})}")
    for sec in SECTIONS:
        value = raw.get(sec) or {}
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: section {sec!r} must be a mapping")
        raw[sec] = dict(value)
    spec = SearchSpec(name=path.stem, **raw)
    spec.description = str(spec.description or "").strip()
    arms_wanted = _apply_overrides(spec, overrides)
    spec.seeds, spec.final_seeds = seed_list(spec.seeds), seed_list(spec.final_seeds)
    for key in SETTINGS:
        setattr(spec, key, _setting(key, getattr(spec, key)))
    if arms_wanted is not None:
        missing = [a for a in arms_wanted if a not in spec.arms]
        if missing:
            raise ConfigError(f"arms: unknown arm {missing[0]!r}; valid choices: "
                              f"{', '.join(spec.arms)}{did_you_mean(missing[0], spec.arms)}")
        spec.arms = {a: spec.arms[a] for a in arms_wanted}
    if not spec.arms:
        raise ConfigError(f"study {name}: no arms to search (section 'arms')")
    _check_protocol(spec)
    return spec


def _apply_overrides(spec: SearchSpec, overrides: list[str]) -> list[str] | None:
    """Apply the overrides to `spec` in place; return the arms named by ``arms=``, if any."""
    axes = [f for f in config_fields("graph") if f not in NOT_AXES]
    arms = None
    for o in parse_overrides(overrides):
        key, value = o.key, o.value
        if key == "study":
            continue
        if o.sweep and key not in ("arms", "seed", *SEED_KEYS):
            raise ConfigError(f"{key} takes a single value in a search study (the arms and the "
                              "search space say what varies)")
        if key == "arms":
            arms = [str(a) for a in (value if isinstance(value, list) else [value])] \
                if not o.delete else None
        elif key in ("seed", *SEED_KEYS):
            name = "seeds" if key == "seed" else key
            setattr(spec, name, getattr(_DEFAULTS, name) if o.delete else value)
        elif key in SETTINGS:
            setattr(spec, key, getattr(_DEFAULTS, key) if o.delete else value)
        elif key.startswith(("data.", "final_data.")):
            section, _, name = key.partition(".")
            _put(getattr(spec, section), name, value, o.delete)
            if section == "data":
                _unset_in_arms(spec, key)
        elif key.startswith("search."):
            parts = key.split(".")
            if len(parts) not in (2, 3) or parts[1] not in PARAMS or (len(parts) == 2
                                                                       and not o.delete):
                raise ConfigError(f"{key}: write search.PARAM.KEY=VALUE (or ~search.PARAM) with "
                                  f"PARAM one of {', '.join(PARAMS)}")
            if len(parts) == 2:
                spec.search.pop(parts[1], None)
            else:
                _put(spec.search.setdefault(parts[1], {}), parts[2], value, o.delete)
        elif key in axes:
            _put(spec.fixed, key, value, o.delete)
            _unset_in_arms(spec, key)
        elif o.add:  # +new=value: a free-form axis (TrialConfig.extra), as in every study
            _put(spec.fixed, "+" + key, value, o.delete)
            _unset_in_arms(spec, "+" + key)
        else:
            valid = sorted(["arms", "seed", *SEED_KEYS, *SETTINGS, *axes])
            raise ConfigError(f"unknown key {key!r}; valid keys: {', '.join(valid)}, data.KEY, "
                              f"final_data.KEY, search.PARAM.KEY, +NEW=VALUE"
                              f"{did_you_mean(key, valid)}")
    return arms


def _unset_in_arms(spec: SearchSpec, key: str) -> None:
    """A trial axis or data.KEY set on the command line holds for every arm: it replaces the
    value an arm sets (``dataset=tu:MUTAG`` on a study whose arms name their data sets), as it
    replaces a grid axis and the variants' values in a grid study (`compose._set_axis`)."""
    for axes_ in spec.arms.values():
        if isinstance(axes_, dict):
            axes_.pop(key, None)


def _put(target: dict, key: str, value: Any, delete: bool) -> None:
    target.pop(key, None)
    if not delete:
        target[key] = value


def _setting(key: str, value: Any) -> Any:
    """A validated setting value, or a one-line ConfigError."""
    kind = SETTINGS[key]
    if key in ("max_trials", "ray_address") and value in (None, ""):
        return None
    if kind is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
    elif kind is str:
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{key} must be a non-empty string, got {value!r}")
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigError(f"{key} must be a number > 0, got {value!r}")
    elif isinstance(kind, tuple):
        if value not in kind:
            raise ConfigError(f"{key} must be one of {', '.join(kind)}, got {value!r}")
    elif isinstance(value, bool) or not isinstance(value, int) or value < kind:
        raise ConfigError(f"{key} must be an integer >= {kind}, got {value!r}")
    return value


def _check_protocol(spec: SearchSpec) -> None:
    """Folds, members, search space and baselines of a spec, or a ConfigError."""
    missing = [f"data.{k}" for k, v in spec.data.items() if v == "???"]
    if missing:
        raise ConfigError(f"study {spec.name} needs {missing[0]}=VALUE on the command line")
    if spec.data.get("final"):
        raise ConfigError("data.final=true would let the search score graphs it trained on: "
                          "write it under final_data (the final evaluation only)")
    k = spec.cv_folds
    if k == 1:
        raise ConfigError("cv_folds must be 0 (score the val split) or an integer >= 2, got 1")
    if len(spec.seeds) * max(k, 1) < 3:
        raise ConfigError(f"seeds: the objective is a mean over >= 3 trained models (seeds x "
                          f"cv_folds), got seeds {spec.seeds} and cv_folds={k}")
    for p, d in spec.search.items():
        if p in RANGES and isinstance(d, dict) and {"low", "high"} <= set(d):
            continue
        if p in CHOICES and isinstance(d, dict) and isinstance(d.get("choices"), list) \
                and d["choices"]:
            continue
        raise ConfigError(f"search.{p}: need one of {RANGES} with low and high, or one of "
                          f"{CHOICES} with a non-empty list of choices")
    if spec.reference is not None and not isinstance(spec.reference, dict):
        raise ConfigError("reference: a mapping of axes (the final 'reference' row), or null")
    for role, axes_ in spec.baselines.items():
        if role in ("search", "tuned", "reference") or not isinstance(axes_, dict):
            raise ConfigError(f"baselines.{role}: a baseline is a new role name with a mapping "
                              "of axes, e.g. global_pool: {pool_layers: [], supervision: unsup}")


def arm_config(spec: SearchSpec, arm: str, **params: Any):
    """The resolved TrialConfig of `arm` with the given searched values and the search seeds."""
    axes = {**{"data." + k: v for k, v in spec.data.items()}, **spec.fixed, **spec.arms[arm],
            **params, "study": spec.name, "seeds": params.pop("seeds", spec.seeds)}
    return resolve_config("graph", make_config("graph", axes))


def final_config(spec: SearchSpec, arm: str, **params: Any):
    """`arm_config` on the final-evaluation recipe (``final_data`` overrides) with the final seeds."""
    final = {"data." + k: v for k, v in spec.final_data.items()}
    return arm_config(spec, arm, **{"seeds": spec.final_seeds, **final, **params})


def build_space(search: dict, cfg) -> dict:
    """Optuna distributions for one arm: the parameters whose ``when`` matches its fixed axes."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    space = {}
    for name, d in search.items():
        when = d.get("when") or {}
        if not all(getattr(cfg, k) in (v if isinstance(v, list) else [v]) for k, v in when.items()):
            continue
        if name in CHOICES:
            space[name] = CategoricalDistribution(list(d["choices"]))
        else:
            space[name] = FloatDistribution(float(d["low"]), float(d["high"]), log=bool(d.get("log")))
    if not space:
        raise ConfigError("search: no parameter applies to this arm (check the 'when' conditions)")
    return space


def members(spec: SearchSpec, cfg) -> list[tuple[int, int]]:
    """(fold, seed) of every model one search trial trains, fold-major; fold -1 without CV."""
    folds = range(spec.cv_folds) if spec.cv_folds else [-1]
    return [(f, s) for f in folds for s in cfg.seeds]
