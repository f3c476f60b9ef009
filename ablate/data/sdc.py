"""Selective-dependence classification (SDC) mosaics: Algorithm 1 of Pandey, Vashisht & Ramaswamy.

A mosaic is m segments in R^d. For each mosaic the generator draws a label y
uniformly from the k foreground classes and a foreground index i* uniformly
from 0..m-1; segment i* is drawn from D_y and every other segment from the
background distribution D_0 (SPEC §1 "Selective dependence classification").
The label depends on the foreground segment only.

The foreground index is ground truth for EVALUATION only: `SDCData.splits`
holds inputs and labels (`Mosaics(x, y)`), and the indices live apart in
`SDCData.fg_index`, so a trainer that reads `splits` cannot see them.

Tasks (the `task` names of `ablate.trial.sdc_config.SDCConfig`):

- `synthetic_linear`: 2-D Gaussians, k = 3; the foreground classes are
  linearly separable from the background (a linear focus net can rank the
  foreground first), the set-up for a linear focus net and linear classifier.
- `synthetic_nonlinear`: 2-D Gaussians, k = 3; the background clusters lie
  inside the triangle of the foreground clusters, so no linear function
  separates foreground from background.
- `synthetic_k6`: 2-D Gaussians, k = 6 foreground clusters on a hexagon around
  a central background cluster, meant for a 2-layer classifier.
- `digits`: segments are flattened 8x8 scikit-learn digits (d = 64, values /16
  in [0, 1]); foreground digits 0-2 (labels 0..2), background digits 3-9. Ships
  with scikit-learn: the offline default.
- `cifar`: CIFAR-10 from a LOCAL `cifar-10-batches-py` folder (python pickle
  layout; never downloaded), foreground classes 0-2, background 3-9, segments
  are flattened 32x32x3 images stored as uint8 (d = 3072; divide by 255).

All synthetic set-ups use m = 9 and 200 training mosaics, as in the paper.
Image tasks split the base images into disjoint train / val / test pools
before building mosaics, so no image appears in two splits. Every function is
deterministic given its seed.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ablate.errors import ConfigError, choice_error

TASKS = ("synthetic_linear", "synthetic_nonlinear", "synthetic_k6", "digits", "cifar")
SPLITS = ("train", "val", "test_orig")
SYNTHETIC_TASKS = ("synthetic_linear", "synthetic_nonlinear", "synthetic_k6")

# A sampler draws n segments of the given classes: (classes (n,), rng) -> (n, d)
Sampler = Callable[[np.ndarray, np.random.Generator], np.ndarray]


@dataclass(frozen=True)
class Mosaics:
    """Inputs and labels of one split: everything a model may be trained on."""

    x: np.ndarray  # (M, m, d) segments; float32, or uint8 pixels for CIFAR
    y: np.ndarray  # (M,) int64 labels in 0..k-1

    def __len__(self) -> int:
        return len(self.y)


@dataclass(frozen=True)
class SDCData:
    """Every split of an SDC task; foreground indices are kept apart from the inputs."""

    splits: dict[str, Mosaics]  # "train", "val", "test_orig" -> inputs and labels
    fg_index: dict[str, np.ndarray]  # split -> (M,) int64 true foreground segment (eval only)
    n_classes: int  # k, the number of foreground classes (= labels)
    params: dict = field(default_factory=dict)  # the resolved generation recipe

    @property
    def m(self) -> int:
        """Segments per mosaic."""
        return int(self.splits["train"].x.shape[1])

    @property
    def d(self) -> int:
        """Dimension of one segment."""
        return int(self.splits["train"].x.shape[2])

    @property
    def train(self) -> Mosaics:
        return self.splits["train"]

    @property
    def val(self) -> Mosaics:
        return self.splits["val"]

    @property
    def test(self) -> Mosaics:
        return self.splits["test_orig"]


# --------------------------------------------------------------------------------------------
# Algorithm 1


def make_mosaics(n: int, m: int, k: int, sample_fg: Sampler, sample_bg: Sampler,
                 rng: np.random.Generator) -> tuple[Mosaics, np.ndarray]:
    """Algorithm 1 (Pandey et al.): n mosaics of m segments, one from D_y, the rest from D_0.

    y ~ U{0..k-1}, i* ~ U{0..m-1}; segment i* ~ D_y (`sample_fg(y)`), the others
    ~ D_0 (`sample_bg`). Returns (Mosaics(x, y), fg_index) with fg_index (n,) apart.
    """
    if n < 0 or m < 1 or k < 1:
        raise ConfigError(f"need n >= 0, m >= 1, k >= 1; got n={n}, m={m}, k={k}")
    y = rng.integers(0, k, size=n)
    fg = rng.integers(0, m, size=n)
    fg_seg = sample_fg(y, rng)  # (n, d)
    bg_seg = sample_bg(np.zeros(n * (m - 1), np.int64), rng)  # (n * (m-1), d)
    x = np.empty((n, m, fg_seg.shape[1]), dtype=fg_seg.dtype)
    is_fg = np.zeros((n, m), dtype=bool)
    is_fg[np.arange(n), fg] = True
    x[is_fg] = fg_seg
    x[~is_fg] = bg_seg
    return Mosaics(x=x, y=y.astype(np.int64)), fg.astype(np.int64)


def _build(n_per_split: dict[str, int], m: int, k: int,
           samplers: dict[str, tuple[Sampler, Sampler]], seed: int, params: dict) -> SDCData:
    """Run Algorithm 1 for every split with its own child seed and samplers."""
    children = np.random.SeedSequence(seed).spawn(len(SPLITS))
    splits, fg_index = {}, {}
    for split, child in zip(SPLITS, children):
        sample_fg, sample_bg = samplers[split]
        mos, fg = make_mosaics(n_per_split[split], m, k, sample_fg, sample_bg,
                               np.random.default_rng(child))
        splits[split], fg_index[split] = mos, fg
    return SDCData(splits=splits, fg_index=fg_index, n_classes=k, params=params)


# --------------------------------------------------------------------------------------------
# Synthetic 2-D Gaussian base distributions


@dataclass(frozen=True)
class GaussianBase:
    """Isotropic Gaussians N(mu_c, std^2 I): foreground classes 0..k-1, D_0 = equal mixture of bg."""

    fg_means: np.ndarray  # (k, d) mean of D_y
    bg_means: np.ndarray  # (n_bg, d) means of the background mixture components
    std: float  # per-coordinate standard deviation of every component

    def sample_fg(self, classes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Segments of D_y for each y in `classes`."""
        noise = rng.standard_normal((len(classes), self.fg_means.shape[1]))
        return (self.fg_means[classes] + self.std * noise).astype(np.float32)

    def sample_bg(self, classes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Segments of D_0 (`classes` only gives the count): a uniform mixture component each."""
        comp = rng.integers(0, len(self.bg_means), size=len(classes))
        noise = rng.standard_normal((len(classes), self.bg_means.shape[1]))
        return (self.bg_means[comp] + self.std * noise).astype(np.float32)


def _ring(n: int, radius: float, phase: float = 0.0) -> np.ndarray:
    angle = phase + 2 * np.pi * np.arange(n) / n
    return radius * np.stack([np.cos(angle), np.sin(angle)], 1)


def synthetic_base(task: str) -> GaussianBase:
    """The 2-D base distributions of the three error-mode set-ups (docs/sdc.md draws them).

    - synthetic_linear: foreground means at (-4, 4), (0, 4), (4, 4) and seven
      background means at x = -3, -2, ..., 3 on the row y = -2, so the
      half-plane y > 1 holds the foreground: a linear focus net CAN rank it first.
    - synthetic_nonlinear: foreground on a triangle of radius 6 around seven
      background means on a circle of radius 1.5: no line separates
      foreground from background.
    - synthetic_k6: six foreground means on a hexagon of radius 6 around one
      background mean at the origin, std 0.3 (0.5 elsewhere): no line
      separates foreground from background either.
    """
    if task == "synthetic_linear":
        fg = np.array([[-4.0, 4.0], [0.0, 4.0], [4.0, 4.0]])
        bg = np.stack([np.linspace(-3.0, 3.0, 7), np.full(7, -2.0)], 1)
        return GaussianBase(fg, bg, std=0.5)
    if task == "synthetic_nonlinear":
        return GaussianBase(_ring(3, 6.0, np.pi / 2), _ring(7, 1.5), std=0.5)
    if task == "synthetic_k6":
        return GaussianBase(_ring(6, 6.0), np.zeros((1, 2)), std=0.3)
    raise choice_error("synthetic task", task, SYNTHETIC_TASKS)


def generate_synthetic(task: str, n_train: int = 200, n_val: int = 1000, n_test: int = 2000,
                       m: int = 9, seed: int = 0) -> SDCData:
    """A 2-D error-mode set-up (SPEC §1; m = 9 and 200 training mosaics as in the paper)."""
    base = synthetic_base(task)
    k = len(base.fg_means)
    samplers = {s: (base.sample_fg, base.sample_bg) for s in SPLITS}
    params = dict(task=task, n_train=n_train, n_val=n_val, n_test=n_test, m=m, seed=seed)
    return _build({"train": n_train, "val": n_val, "test_orig": n_test}, m, k, samplers,
                  seed, params)


# --------------------------------------------------------------------------------------------
# Image mosaics: scikit-learn digits (offline default) and local CIFAR-10


def _pool_samplers(images: np.ndarray, labels: np.ndarray,
                   fg_classes: tuple[int, ...]) -> tuple[Sampler, Sampler]:
    """Samplers over an image pool: D_y = uniform over images of fg_classes[y], D_0 = the rest."""
    by_class = [np.flatnonzero(labels == c) for c in fg_classes]
    bg = np.flatnonzero(~np.isin(labels, fg_classes))
    if any(len(ix) == 0 for ix in by_class) or len(bg) == 0:
        raise ConfigError("an image pool has no image of some foreground class or no "
                          "background image: use larger splits")

    def sample_fg(classes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        out = np.empty(len(classes), np.int64)
        for c, ix in enumerate(by_class):
            sel = classes == c
            out[sel] = ix[rng.integers(0, len(ix), size=int(sel.sum()))]
        return images[out]

    def sample_bg(classes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return images[bg[rng.integers(0, len(bg), size=len(classes))]]

    return sample_fg, sample_bg


def _check_classes(fg_classes: tuple[int, ...], n_base: int) -> tuple[int, ...]:
    fg = tuple(int(c) for c in fg_classes)
    if not fg or len(set(fg)) != len(fg) or not all(0 <= c < n_base for c in fg) \
            or len(fg) >= n_base:
        raise ConfigError(f"fg_classes must be distinct classes in 0..{n_base - 1} leaving at "
                          f"least one background class, got {fg_classes}")
    return fg


def _split_pool(n_images: int, fractions: tuple[float, float], seed: int) -> dict[str, np.ndarray]:
    """Disjoint image index pools for train / val / test_orig (fractions of train and val)."""
    f_train, f_val = fractions
    if not (0 < f_train and 0 < f_val and f_train + f_val < 1):
        raise ConfigError(f"pool fractions must be positive and sum below 1, got {fractions}")
    perm = np.random.default_rng(seed).permutation(n_images)
    a, b = int(round(f_train * n_images)), int(round((f_train + f_val) * n_images))
    return {"train": perm[:a], "val": perm[a:b], "test_orig": perm[b:]}


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int64)


def generate_digits(n_train: int = 3000, n_val: int = 1000, n_test: int = 2000, m: int = 9,
                    fg_classes: tuple[int, ...] = (0, 1, 2), pool_fractions: tuple = (0.6, 0.2),
                    seed: int = 0) -> SDCData:
    """Digit mosaics: each segment a flattened 8x8 scikit-learn digit (d = 64, in [0, 1])."""
    images, labels = _digits()
    fg = _check_classes(fg_classes, 10)
    pools = _split_pool(len(images), tuple(pool_fractions), seed)
    samplers = {s: _pool_samplers(images[ix], labels[ix], fg) for s, ix in pools.items()}
    params = dict(task="digits", n_train=n_train, n_val=n_val, n_test=n_test, m=m,
                  fg_classes=list(fg), pool_fractions=list(pool_fractions), seed=seed)
    return _build({"train": n_train, "val": n_val, "test_orig": n_test}, m, len(fg), samplers,
                  seed, params)


CIFAR_BATCHES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")


def cifar_dir(path: str | None) -> Path:
    """The `cifar-10-batches-py` folder at `path` (the folder itself or its parent), holding
    every batch; else `ConfigError` in one line."""
    if not path:
        raise ConfigError("task cifar needs a local CIFAR-10 copy: set data.path=<folder holding "
                          "cifar-10-batches-py> (nothing is downloaded)")
    p = Path(path).expanduser()
    if not p.exists():
        raise ConfigError(f"data.path {str(path)!r} does not exist (task cifar reads a local "
                          "cifar-10-batches-py folder; nothing is downloaded)")
    for cand in (p, p / "cifar-10-batches-py"):
        if any((cand / name).is_file() for name in CIFAR_BATCHES):
            missing = [name for name in CIFAR_BATCHES if not (cand / name).is_file()]
            if missing:
                raise ConfigError(f"CIFAR-10 batch(es) {', '.join(missing)} missing under {cand}; "
                                  "unpack cifar-10-python.tar.gz there again")
            return cand
    raise ConfigError(f"no CIFAR-10 python batches ({', '.join(CIFAR_BATCHES)}) under {p} or "
                      f"{p / 'cifar-10-batches-py'}; unpack cifar-10-python.tar.gz there")


def load_cifar_arrays(path: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """CIFAR-10 (train_x, train_y, test_x, test_y) from a local pickle folder; x uint8 (n, 3072)."""
    root = cifar_dir(path)

    def read(name: str) -> tuple[np.ndarray, np.ndarray]:
        with open(root / name, "rb") as fh:
            batch = pickle.load(fh, encoding="bytes")
        x = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3072)
        return x, np.asarray(batch[b"labels"], dtype=np.int64)

    parts = [read(f"data_batch_{i}") for i in range(1, 6)]
    test_x, test_y = read("test_batch")
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            test_x, test_y)


def generate_cifar(path: str | None = None, n_train: int = 40000, n_val: int = 5000,
                   n_test: int = 10000, m: int = 9, fg_classes: tuple[int, ...] = (0, 1, 2),
                   n_val_images: int = 5000, seed: int = 0) -> SDCData:
    """CIFAR-SDC (paper: m = 9, k = 3, 40k train / 10k test mosaics) from a local copy.

    Val mosaics come from `n_val_images` training images held out of the train pool;
    test mosaics from the CIFAR-10 test batch. Segments stay uint8 pixels.
    """
    train_x, train_y, test_x, test_y = load_cifar_arrays(path)
    fg = _check_classes(fg_classes, 10)
    if not 0 < n_val_images < len(train_x):
        raise ConfigError(f"n_val_images must be in 1..{len(train_x) - 1}, got {n_val_images}")
    perm = np.random.default_rng(seed).permutation(len(train_x))
    va, tr = perm[:n_val_images], perm[n_val_images:]
    samplers = {"train": _pool_samplers(train_x[tr], train_y[tr], fg),
                "val": _pool_samplers(train_x[va], train_y[va], fg),
                "test_orig": _pool_samplers(test_x, test_y, fg)}
    params = dict(task="cifar", n_train=n_train, n_val=n_val, n_test=n_test, m=m,
                  fg_classes=list(fg), n_val_images=n_val_images, seed=seed)
    return _build({"train": n_train, "val": n_val, "test_orig": n_test}, m, len(fg), samplers,
                  seed, params)


# --------------------------------------------------------------------------------------------
# Entry point


def _generator(task: str) -> Callable[..., SDCData]:
    if task not in TASKS:
        raise choice_error("task", task, TASKS)
    if task in SYNTHETIC_TASKS:
        return functools.partial(generate_synthetic, task)
    return generate_digits if task == "digits" else generate_cifar


def resolve_params(task: str, params: dict | None = None) -> dict:
    """The generator's defaults for `task` updated with `params`; unknown keys raise ConfigError."""
    import inspect

    sig = inspect.signature(_generator(task))
    defaults = {k: p.default for k, p in sig.parameters.items()
                if k != "task" and p.default is not inspect.Parameter.empty}
    params = dict(params or {})
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise ConfigError(f"unknown data parameter(s) {unknown} for SDC task {task!r}; "
                          f"valid: {', '.join(sorted(defaults))}")
    out = {**defaults, **params}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in out.items()}


def load_sdc(task: str, **params) -> SDCData:
    """Every split of SDC task `task`; `params` override the generator's defaults."""
    return _generator(task)(**resolve_params(task, params))
