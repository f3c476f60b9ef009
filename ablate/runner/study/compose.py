"""A study: its YAML file plus command-line overrides, expanded into validated trials.

A study file (``studies/NAME.yaml``) holds

- ``fixed:``     axes shared by every trial (``TrialConfig`` fields);
- ``data:``      dataset recipe overrides (``ablate.data`` generator parameters);
- ``variants:``  explicit rows, each a dict of single axis values (a union); a
  row may carry its own ``seeds``;
- ``grid:``      axes crossed with each other and with every variant (a product;
  each value is a list of choices, so a tuple axis is written ``[[1], [1, 2]]``);
- ``seeds``, ``seeds_per_trial`` (seed packing), ``cpus_per_trial``,
  ``gpus_per_trial``, ``max_failures``, ``kind`` (trial kind, default ``graph``).

Trials = variants x grid x seed chunks. Overrides use Hydra's grammar
(``key=value``, sweeps ``key=a,b`` / ``seed=range(0,10)``, ``+new=value``,
``~key``, ``data.KEY=value``): a plain value replaces the axis everywhere, a sweep
makes it a grid axis. Every trial is resolved and validated here, before Ray
starts; problems raise `ConfigError` with one line naming the valid choices.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.errors import ConfigError, choice_error, did_you_mean
from ablate.runner.study.kinds import NOT_AXES, config_fields, trial_kind


def _builtin_studies() -> Path:
    """The built-in studies: studies/ beside the package (checkout or wheel), else ./studies."""
    package = Path(__file__).resolve().parents[2]  # ablate/ (this file: ablate/runner/study/)
    for d in (package.parent / "studies", package / "studies", Path.cwd() / "studies"):
        if d.is_dir():
            return d
    return package.parent / "studies"


STUDIES_DIR = _builtin_studies()
STUDY_SUFFIXES = (".yaml", ".yml")


def study_dirs() -> list[Path]:
    """Where study names are looked up, in order: the folders of $ABLATE_STUDIES (separated
    by os.pathsep), then the built-in studies."""
    extra = [Path(d) for d in os.environ.get("ABLATE_STUDIES", "").split(os.pathsep) if d]
    return [*extra, STUDIES_DIR]


def is_study_path(arg: str) -> bool:
    """`study=` names a file (a .yaml path, or anything with a folder in it), not a name."""
    return arg.endswith(STUDY_SUFFIXES) or "/" in arg or os.sep in arg


def study_name(arg: str) -> str:
    """The study's name: the file's stem for a path (its results go to RESULTS_DIR/STEM/)."""
    return Path(arg).stem if is_study_path(arg) else arg


def study_files() -> dict[str, list[Path]]:
    """Every study on the search path: name -> the files of that name, in search order."""
    found: dict[str, list[Path]] = {}
    for d in study_dirs():
        for path in sorted(d.glob("*.yaml")) if d.is_dir() else []:
            found.setdefault(path.stem, []).append(path)
    return found


def locate_study(arg: str, directory: Path | None = None) -> Path:
    """The file of `study=ARG`: a path (relative to the working directory, or absolute), or a
    name looked up in `directory`, else on the search path (`study_dirs`). A missing or
    unreadable file, an unknown name or a name found twice is a one-line `ConfigError`."""
    if is_study_path(arg):
        path = Path(arg).expanduser()
        if not path.exists():
            raise ConfigError(f"study file {arg}: no such file")
        if not path.is_file():
            raise ConfigError(f"study file {arg}: not a file")
        if not os.access(path, os.R_OK):
            raise ConfigError(f"study file {arg}: not readable (permission denied)")
        return path.resolve()
    if directory is not None:
        path = Path(directory) / f"{arg}.yaml"
        if not path.is_file():
            raise choice_error("study", arg, sorted(p.stem for p in Path(directory).glob("*.yaml"))
                               or [f"(none found in {directory})"])
        return path
    found = study_files()
    paths = found.get(arg, [])
    if not paths:
        raise choice_error("study", arg, sorted(found) or [
            f"(none found in {', '.join(map(str, study_dirs()))})"])
    if len(paths) > 1:
        raise ConfigError(f"study {arg!r} is defined twice on the search path: {paths[0]} and "
                          f"{paths[1]}; rename one, or pass study=PATH")
    return paths[0]


# Runner options: name -> (default, help). Settable on the command line only.
RUN_KEYS: dict[str, tuple[Any, str]] = {
    "study": (None, "study to run: a name (its file NAME.yaml on the search path: "
                    "$ABLATE_STUDIES, then the built-in studies) or a path to a .yaml file"),
    "results_dir": ("results", "result store root; results go to RESULTS_DIR/STUDY/"),
    "dry_run": (False, "print the trial table, count and cost estimate and the downloads a "
                       "run would make (no data or network needed), then exit"),
    "verify": (False, "read every result file of the study, list every problem, then exit"),
    "force": (False, "rerun trials that are already complete in the store"),
    "ray_address": (None, "join this Ray cluster ('auto' or host:port); default: "
                          "$RAY_ADDRESS, else start an embedded local Ray"),
    "progress": ("auto", "progress display: auto, bar (one live line), lines, none"),
    "reproduce": (None, "rerun this stored trial (its id) alone here and compare with the "
                        "store: exit 0 it holds, 5 it does not"),
    "estimate": ("records", "the dry run's cost estimate: records (stored trials of the same "
                            "shape under results_dir), calibrate (plus short runs here for the "
                            "rest), off"),
}


# Study settings: name -> (default, help). Set in the YAML, overridable on the command line.
STUDY_KEYS: dict[str, tuple[Any, str]] = {
    "seeds": ([0], "seeds to train (alias seed); e.g. 'seed=range(0,10)' (quoted: the shell "
                   "reads brackets); seeds=adaptive (or "
                   "seeds={adaptive:{max:20}}): 10 seeds a row, then 2 a round for the rows of "
                   "undecided comparisons (docs/runner.md)"),
    "seeds_per_trial": (1, "seeds packed into one Ray trial (amortises per-trial overhead)"),
    "cpus_per_trial": (1, "CPUs reserved per trial (also torch threads)"),
    "gpus_per_trial": ("auto", "GPUs per trial, fractional allowed (0.25 = four trials per "
                               "GPU); auto = 0.25 when the cluster has GPUs, else 0"),
    "max_failures": (2, "retries of a trial that raises, returns NaN or loses its worker"),
    "pack_size": ("auto", "seeds trained as one model in one Ray trial, across trials that differ "
                          "only in seeds, init of p, threshold, ratio, kl_weight; auto = 64 when "
                          "trials get a GPU, else 1 trial per pack"),
    "trial_limit": (100_000, "most trials the study may expand to; a larger one is refused "
                             "before anything runs (raise it to run one anyway)"),
}


PROGRESS_MODES = ("auto", "bar", "lines", "none")
ESTIMATE_MODES = ("records", "calibrate", "off")  # ablate.runner.plan.estimate.MODES


_SECTIONS = {"description", "kind", "fixed", "data", "grid", "variants", *STUDY_KEYS}


@dataclass
class StudySpec:
    """A study file after overrides, before expansion."""

    name: str
    kind: str = "graph"
    description: str = ""
    fixed: dict = field(default_factory=dict)
    data: dict = field(default_factory=dict)
    grid: dict = field(default_factory=dict)  # axis -> list of choices
    variants: list = field(default_factory=list)  # list of {axis: value}
    seeds: list = field(default_factory=lambda: [0])
    adaptive: Any = None  # ablate.runner.plan.adaptive.AdaptiveSeeds: seeds added per round
    seeds_per_trial: int = 1
    cpus_per_trial: float = 1
    gpus_per_trial: float | str = "auto"
    max_failures: int = 2
    pack_size: int | str = "auto"
    trial_limit: int = 100_000  # most trials it may expand to (ablate.runner.study.expand)
    path: Path | None = None  # the study file it was read from


def list_studies(directory: Path | None = None) -> dict[str, str]:
    """Study name -> one-line description, for every study on the search path (or in
    `directory`); a name found twice reads from its first file."""
    if directory is not None:
        files = {p.stem: [p] for p in sorted(Path(directory).glob("*.yaml"))}
    else:
        files = study_files()
    return {name: _description(paths[0]) for name, paths in files.items()}


def _description(path: Path) -> str:
    try:
        return str(_read_yaml(path).get("description", "")).strip()
    except ConfigError as e:
        return f"(unreadable: {e})"


def _read_yaml(path: Path) -> dict:
    from omegaconf import OmegaConf

    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except OSError as e:
        raise ConfigError(f"{path}: not readable ({e.strerror or e})") from None
    except Exception as e:  # YAML syntax errors
        raise ConfigError(f"{path}: not a valid study file ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a study file is a mapping of sections")
    return data


def study_file(name: str, directory: Path | None = None) -> dict:
    """The sections of the study `name` (a name or a path, `locate_study`), unvalidated;
    every study kind (search studies included) is read here."""
    return _read_yaml(locate_study(name, directory))


def load_spec(name: str, directory: Path | None = None) -> StudySpec:
    """Read the study `name` (a name or a path, `locate_study`) into a `StudySpec` (no
    overrides yet); its name is the file's stem."""
    path = locate_study(name, directory)
    raw = _read_yaml(path)
    unknown = sorted(set(raw) - _SECTIONS)
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {unknown}; valid: {sorted(_SECTIONS)}"
                          f"{did_you_mean(unknown[0], sorted(_SECTIONS))}")
    spec = StudySpec(name=path.stem, kind=str(raw.get("kind", "graph")),
                     description=str(raw.get("description", "")).strip(), path=path)
    trial_kind(spec.kind)  # a known kind, or a ConfigError naming them
    for sec in ("fixed", "data", "grid"):
        value = raw.get(sec) or {}
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: section {sec!r} must be a mapping")
        setattr(spec, sec, dict(value))
    for axis, choices in spec.grid.items():
        if not isinstance(choices, list) or not choices:
            raise ConfigError(f"{path}: grid axis {axis!r} must be a non-empty list of choices "
                              f"(write a tuple axis as [[1], [1, 2]])")
    if any(not isinstance(v, dict) for v in raw.get("variants") or []):
        raise ConfigError(f"{path}: 'variants' must be a list of mappings")
    spec.variants = [dict(v) for v in raw.get("variants") or []]
    both = sorted({k for v in spec.variants for k in v} & set(spec.grid))
    if both:
        raise ConfigError(f"{path}: axis {both} appears in both 'grid' and 'variants'")
    for key in STUDY_KEYS:
        if key in raw:
            _set_study_key(spec, key, raw[key])
    return spec


def _set_seeds(spec: StudySpec, value: Any) -> None:
    """A seed list, or adaptive seeds (`ablate.runner.plan.adaptive`): then every round's
    seeds, up to its max, are what the study may train."""
    if value == "adaptive" or isinstance(value, dict):
        from ablate.runner.plan.adaptive import parse_adaptive

        spec.adaptive = parse_adaptive(value)
        spec.seeds = list(range(spec.adaptive.max))
    else:
        spec.adaptive = None
        spec.seeds = seed_list(value)


def _set_study_key(spec: StudySpec, key: str, value: Any) -> None:
    if key == "seeds":
        _set_seeds(spec, value)
    elif key in ("seeds_per_trial", "max_failures", "trial_limit"):
        lo = 0 if key == "max_failures" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise ConfigError(f"{key} must be an integer >= {lo}, got {value!r}")
        setattr(spec, key, value)
    elif key in ("gpus_per_trial", "pack_size") and value == "auto":
        setattr(spec, key, "auto")
    elif key == "pack_size":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"pack_size must be an integer >= 1 or auto, got {value!r}")
        spec.pack_size = value
    else:  # cpus_per_trial, gpus_per_trial
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 \
                or (key == "cpus_per_trial" and value <= 0):
            raise ConfigError(f"{key} must be a number {'> 0' if key[0] == 'c' else '>= 0 or auto'}"
                              f", got {value!r}")
        if key == "gpus_per_trial" and value > 1 and value != int(value):
            raise ConfigError(f"gpus_per_trial above 1 must be a whole number, got {value}")
        setattr(spec, key, value)


def seed_list(value: Any) -> list[int]:
    """Seeds from a list, an int, or a string in Hydra's sweep syntax ('range(0,10)', '0,1')."""
    if isinstance(value, str):
        from hydra.core.override_parser.overrides_parser import OverridesParser

        try:
            o = OverridesParser.create().parse_overrides([f"seeds={value}"])[0]
        except Exception:
            raise ConfigError(f"seeds: cannot parse {value!r}; use a list, an int or "
                              "'range(0,10)'") from None
        value = list(o.sweep_iterator()) if o.is_sweep_override() else o.value()
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list | tuple) or not value \
            or any(isinstance(s, bool) or not isinstance(s, int) for s in value):
        raise ConfigError(f"seeds must be a non-empty list of integers, got {value!r}")
    return list(dict.fromkeys(int(s) for s in value))


@dataclass(frozen=True)
class Override:
    """One command-line override, parsed with Hydra's grammar by `parse_overrides`."""

    key: str  # 'epochs', 'data.n_train', 'search.threshold.low' (without + or ~)
    value: Any  # the value; every value of a sweep (a list); None for a deletion
    sweep: bool = False  # key=a,b or key=range(0,10)
    delete: bool = False  # ~key
    add: bool = False  # +key=value or ++key=value


def parse_overrides(overrides: list[str]) -> list[Override]:
    """Parse ``key=value`` overrides with Hydra's grammar, sweeps expanded (every study kind)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception as e:
        raise ConfigError(f"cannot parse overrides: {str(e).splitlines()[0]}") from None
    out = []
    for o in parsed:
        key = o.key_or_group
        sweep = o.is_sweep_override()
        if sweep:
            try:
                values = list(o.sweep_iterator())
            except Exception:
                raise ConfigError(f"{key}: only choice (a,b) and range(...) sweeps expand a "
                                  "grid") from None
            if not values:
                raise ConfigError(f"{key}: the sweep is empty")
        value = None if o.is_delete() else (values if sweep else o.value())
        out.append(Override(key, value, sweep, o.is_delete(), o.is_add() or o.is_force_add()))
    return out


def apply_overrides(spec: StudySpec, overrides: list[str]) -> dict:
    """Apply Hydra-syntax overrides to `spec` in place; return the runner options."""
    options = {k: d for k, (d, _) in RUN_KEYS.items()}
    options["study"] = spec.name
    fields = config_fields(spec.kind)
    for o in parse_overrides(overrides):
        key, value, sweep = o.key, o.value, o.sweep
        if key in RUN_KEYS:
            if sweep or o.delete:
                raise ConfigError(f"{key} takes a single value")
            options[key] = _run_option(key, value)
        elif key in ("seed", "seeds"):
            _set_seeds(spec, [0] if o.delete else value)
            for v in spec.variants:  # the command line wins over per-variant seeds
                v.pop("seeds", None)
        elif key in STUDY_KEYS:
            if sweep:
                raise ConfigError(f"{key} takes a single value")
            _set_study_key(spec, key, STUDY_KEYS[key][0] if o.delete else value)
        elif key.startswith("data."):
            _set_axis(spec, key, value, sweep, o.delete, spec.data, key[5:])
        elif key in fields and key not in NOT_AXES:
            _set_axis(spec, key, value, sweep, o.delete, spec.fixed, key)
        elif o.add:  # +new=value: a free-form axis (TrialConfig.extra)
            _set_axis(spec, "+" + key, value, sweep, o.delete, spec.fixed, "+" + key)
        else:
            valid = sorted([*RUN_KEYS, *STUDY_KEYS, "seed", *(
                f for f in fields if f not in NOT_AXES)])
            raise ConfigError(f"unknown key {key!r}; valid keys: {', '.join(valid)}, data.KEY "
                              f"(dataset parameters), +NEW=VALUE (a new free-form axis)"
                              f"{did_you_mean(key, valid)}")
    return options


def _set_axis(spec: StudySpec, grid_key: str, value: Any, sweep: bool, delete: bool,
              target: dict, key: str) -> None:
    """A plain value fixes the axis everywhere; a sweep makes it a grid axis; ~ deletes it."""
    spec.grid.pop(grid_key, None)
    for v in spec.variants:
        v.pop(grid_key, None)
    target.pop(key, None)
    if delete:
        return
    if sweep:
        spec.grid[grid_key] = value
    else:
        target[key] = value


def _run_option(key: str, value: Any) -> Any:
    if key in ("dry_run", "force", "verify"):
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
        return value
    if key == "progress" and value not in PROGRESS_MODES:
        raise choice_error("progress", value, PROGRESS_MODES)
    if key == "estimate" and value not in ESTIMATE_MODES:
        raise choice_error("estimate", value, ESTIMATE_MODES)
    if key == "reproduce" and value not in (None, ""):
        return str(value)  # ablate.run passes the id as typed (Hydra reads some ids as numbers)
    if key in ("results_dir", "study") and (not isinstance(value, str) or not value):
        raise ConfigError(f"{key} must be a non-empty string, got {value!r}")
    return None if value in (None, "") else str(value)
