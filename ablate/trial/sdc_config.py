"""The config of a selective-dependence classification (SDC) trial: fields, recipes, checks.

`SDCConfig` holds one trial (one field, one comment; `None` = the task's default
recipe, filled in by `resolve`); `validate` rejects bad values with a
`ConfigError` naming the valid choices; `axes` gives the store columns.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from ablate.config import DEVICES
from ablate.data.cache import recipe_hash
from ablate.data.sdc import SPLITS, TASKS, resolve_params
from ablate.errors import ConfigError, choice_error
from ablate.models.focus import AVERAGE_AT, FOCUS_NORMALIZERS

# Default recipe per task (fields left as None in SDCConfig). The 2-D set-ups use a
# linear focus net (and a linear classifier, except k = 6: one hidden layer = 2-layer g).
_RECIPES: dict[str, dict] = {
    "synthetic_linear": dict(focus_hidden=(), classify_hidden=(), epochs=300, lr=0.01,
                             batch_size=20),
    "synthetic_nonlinear": dict(focus_hidden=(), classify_hidden=(), epochs=300, lr=0.01,
                                batch_size=20),
    "synthetic_k6": dict(focus_hidden=(), classify_hidden=(32,), epochs=300, lr=0.01,
                         batch_size=20),
    "digits": dict(focus_hidden=(64, 64), classify_hidden=(64,), epochs=30, lr=1e-3,
                   batch_size=64),
    "cifar": dict(focus_hidden=(512, 128), classify_hidden=(256,), epochs=30, lr=1e-3,
                  batch_size=128),
}


@dataclass(frozen=True)
class SDCConfig:
    """One SDC trial. `None` fields take the task's default recipe (`resolve`)."""

    study: str = "adhoc"  # study name (result store folder)
    task: str = "digits"  # synthetic_linear, synthetic_nonlinear, synthetic_k6, digits, cifar
    data_params: tuple = ()  # sorted (key, value) overrides of the task's generator (sizes, seed, path)
    normalizer: str = "softmax"  # softmax, softmax_entropy, sparsemax, spherical, hard
    entropy_lambda: float = 0.01  # weight of H(alpha) in the loss (softmax_entropy only)
    average_at: str = "input"  # g reads sum_j alpha_j x_j (input) or sum_j alpha_j h_j (hidden)
    focus_hidden: tuple[int, ...] | None = None  # hidden widths of the focus net f; () = linear
    classify_hidden: tuple[int, ...] | None = None  # hidden widths of the classifier g; () = linear
    epochs: int | None = None  # training epochs
    lr: float | None = None  # Adam learning rate
    weight_decay: float = 0.0  # Adam weight decay
    batch_size: int | None = None  # training mosaics per step
    test_batch_size: int = 2000  # mosaics per evaluation batch (speed only)
    seeds: tuple[int, ...] = (0,)  # model-initialisation seeds trained by this trial
    eval_splits: tuple[str, ...] = ("val", "test_orig")  # splits with a record each (+ "train")
    eval_every: int = 0  # curve point every this many epochs; 0 = about 100 points
    device: str = "auto"  # auto (CUDA if present), cpu or cuda

    def replace(self, **changes) -> SDCConfig:
        return dataclasses.replace(self, **changes)

    @property
    def data_kwargs(self) -> dict:
        return dict(self.data_params)

    @property
    def dataset(self) -> str:
        """The dataset column of the result store."""
        return "sdc_" + self.task


def validate_choices(cfg: SDCConfig) -> None:
    """Reject categorical values outside their valid sets (ConfigError names the choices)."""
    for name, choices in [("task", TASKS), ("normalizer", FOCUS_NORMALIZERS),
                          ("average_at", AVERAGE_AT), ("device", DEVICES)]:
        if getattr(cfg, name) not in choices:
            raise choice_error(name, getattr(cfg, name), choices)
    for split in cfg.eval_splits:
        if split not in SPLITS:
            raise choice_error("eval split", split, SPLITS)


def resolve(cfg: SDCConfig) -> SDCConfig:
    """Fill every `None` field from the task's recipe and validate the result."""
    validate_choices(cfg)
    r = _RECIPES[cfg.task]
    out = cfg.replace(
        focus_hidden=tuple(int(w) for w in (cfg.focus_hidden if cfg.focus_hidden is not None
                                             else r["focus_hidden"])),
        classify_hidden=tuple(int(w) for w in (cfg.classify_hidden
                                               if cfg.classify_hidden is not None
                                               else r["classify_hidden"])),
        epochs=int(cfg.epochs if cfg.epochs is not None else r["epochs"]),
        lr=float(cfg.lr if cfg.lr is not None else r["lr"]),
        batch_size=int(cfg.batch_size if cfg.batch_size is not None else r["batch_size"]),
        seeds=tuple(int(s) for s in cfg.seeds),
        eval_splits=tuple(cfg.eval_splits),
        data_params=tuple(sorted(dict(cfg.data_params).items())),
    )
    validate(out)
    return out


def validate(cfg: SDCConfig) -> None:
    """Check a resolved config; raise `ConfigError` with one line naming the bad value."""
    validate_choices(cfg)
    resolve_params(cfg.task, cfg.data_kwargs)  # unknown data parameters
    if cfg.average_at == "hidden" and not cfg.focus_hidden:
        raise ConfigError("average_at=hidden needs a focus net with a hidden layer: set "
                          "focus_hidden (the synthetic tasks default to a linear focus net)")
    if any(w < 1 for w in (*cfg.focus_hidden, *cfg.classify_hidden)):
        raise ConfigError("focus_hidden and classify_hidden must be positive widths, got "
                          f"{cfg.focus_hidden} / {cfg.classify_hidden}")
    if cfg.epochs < 1 or cfg.batch_size < 1 or cfg.test_batch_size < 1:
        raise ConfigError("epochs, batch_size and test_batch_size must be >= 1")
    if not cfg.lr > 0 or cfg.weight_decay < 0:
        raise ConfigError(f"lr must be > 0 and weight_decay >= 0, got {cfg.lr}, "
                          f"{cfg.weight_decay}")
    if not cfg.entropy_lambda >= 0:
        raise ConfigError(f"entropy_lambda must be >= 0, got {cfg.entropy_lambda}")
    if not cfg.seeds:
        raise ConfigError("seeds must name at least one seed")
    if not cfg.eval_splits:
        raise ConfigError(f"eval_splits must name at least one of {', '.join(SPLITS)}")


def axes(cfg: SDCConfig) -> dict:
    """The config as flat, Parquet-friendly columns (tuples become comma strings)."""
    out: dict = {}
    for f in dataclasses.fields(cfg):
        v = getattr(cfg, f.name)
        if f.name == "data_params":
            v = json.dumps(dict(v), sort_keys=True, default=str)
        elif isinstance(v, tuple):
            v = ",".join(str(x) for x in v)
        out[f.name] = v
    out["dataset"] = cfg.dataset
    return out


def data_hash(cfg: SDCConfig) -> str:
    """Hash of the fully resolved data recipe (path left out: where data lives is not what it is)."""
    params = {k: v for k, v in resolve_params(cfg.task, cfg.data_kwargs).items() if k != "path"}
    return recipe_hash(cfg.dataset, {k: list(v) if isinstance(v, tuple) else v
                                     for k, v in params.items()})
