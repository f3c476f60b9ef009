"""MNIST-75SP and its offline stand-in DIGITS-75SP: superpixel graphs of digit images.

Follows SPEC section 1 "MNIST-75SP" (and the authors' `MNIST75sp` code); the
superpixel pipeline itself is `ablate.data.superpixels`.

- `generate_mnist` reads MNIST from a LOCAL directory (IDX files, plain or
  gzipped, in `path`, `path/raw` or torchvision's `path/MNIST/raw`); nothing is
  ever downloaded. Validation images are HELD OUT of the 60k training images
  (the reference validated on training images; we do not) unless `final=True`.
- `generate_digits` runs the same pipeline on scikit-learn's bundled 8x8
  handwritten digits (values / 16, bilinearly upscaled to 28x28): the offline
  default the SPEC asks for.

Splits: "train", "val", "test_orig", "test_noisy", "test_noisyc".

Recipe switches that follow the reference script `scripts/mnist_75sp.sh`
(see docs/recipes.md):

- `final=True`: the reference's final models train on all 60,000 training
  images. The n_val validation images go back into "train" (n_train + n_val
  graphs); "val" still holds those same images, so its curves track the fit on
  part of the training set, not generalisation. With `final=False` (default)
  "train" and "val" are disjoint.
- `gt`: the ground-truth attention (`superpixels.gt_attention`): "intensity"
  (SPEC default, intensity >= 0.5) or "any" (uniform over superpixels with
  intensity > 0: the reference's ground-truth oracle for ChebyGIN, K > 1).
- `slic`: the SLIC rule (`ablate.data.slic.SLIC_RULES`): "v0.15", scikit-image 0.15 as the
  authors' data were made (default), or "v0.19", today's scikit-image (before issue 26).
- `noise`: the scale of the test noise (`NOISE_SCALES`), see below.

Node features, every split: 5 channels [I, I, I, row, col]. The intensity is
replicated three times in ALL splits (not only in TEST-NOISY-C, which needs
three intensity channels for independent per-channel noise) so that one model,
trained on 5 channels, evaluates every split. Each channel is standardised with
the mean/std of the TRAIN nodes.

Noise (SPEC: TEST-NOISY x0.4, same noise on the intensity channels;
TEST-NOISY-C x0.6, independent per channel) is drawn with `noise_seed` and
added to the STANDARDISED intensity channels of the test graphs; coordinates
are untouched. Its raw size is that of the authors' code (`noise="padded"`, default):
0.4 and 0.6 times the intensity std over the training graphs zero-padded to 75 nodes
(they standardise over zero-padded batches; we standardise over real nodes, whose std
is about 3% larger, so the noise in our units is 0.4 and 0.6 times the ratio of the two,
`noise_factor`). `noise="nodes"`: 0.4 and 0.6 of our own std (before issue 26).
Ground-truth attention always comes from the clean raw intensities, and the noisy
splits reuse the test graphs' superpixels, centroids and ground truth (superpixels are
extracted once per image; the cache stores them once).

Graphs are point graphs (`GraphSet.coord`): the complete Gaussian-kernel adjacency
(`ablate.data.kernel.adjacency`) is derived from the centroids where batches are made, never
stored (8.8 GB of edges for the 75,000 graphs of a full recipe, against about 0.2 GB
for what defines them).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from ablate.data import slic as slic_rules
from ablate.data.graphs import GraphSet
from ablate.data.superpixels import (
    GT_VARIANTS,
    MAX_SUPERPIXELS,
    SLIC_DEFAULT,
    gt_attention,
    images_to_superpixels,
)
from ablate.errors import ConfigError, choice_error

NOISE_STD = 0.4  # TEST-NOISY: one Gaussian draw per node, shared by the 3 intensity channels
NOISE_C_STD = 0.6  # TEST-NOISY-C: independent Gaussian per node and intensity channel
NOISE_SCALES = ("padded", "nodes")  # std over graphs zero-padded to 75 nodes (the authors'); real nodes
N_INTENSITY = 3  # replicated intensity channels, then (row, col)
IMAGE_SIZE = 28

MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def generate_mnist(
    path: str | None = None,
    n_train: int = 55000,
    n_val: int = 5000,
    n_test: int = 10000,
    noise_seed: int = 111,
    split_seed: int = 111,
    gt: str = "intensity",
    final: bool = False,
    slic: str = SLIC_DEFAULT,
    noise: str = "padded",
    progress: bool = False,
) -> dict[str, GraphSet]:
    """MNIST-75SP splits from local MNIST IDX files (SPEC 1); val is held out of the 60k train
    unless `final` (then train = n_train + n_val images, as the reference's final models);
    `slic` and `noise` as the module docstring says."""
    check_choices(gt, slic, noise)
    train_x, train_y, test_x, test_y = load_mnist_arrays(path)
    if n_train + n_val > len(train_x):
        raise ConfigError(f"n_train + n_val = {n_train + n_val} exceeds the {len(train_x)} "
                          "MNIST training images")
    if n_test > len(test_x):
        raise ConfigError(f"n_test = {n_test} exceeds the {len(test_x)} MNIST test images")
    rng = np.random.default_rng(split_seed)
    perm = rng.permutation(len(train_x))
    tr, va = _train_val(perm, n_train, n_val, final)
    te = rng.permutation(len(test_x))[:n_test]
    images = {"train": train_x[tr], "val": train_x[va], "test": test_x[te]}
    labels = {"train": train_y[tr], "val": train_y[va], "test": test_y[te]}
    images = {k: v.astype(np.float32) / 255.0 for k, v in images.items()}
    return build_splits(images, labels, noise_seed=noise_seed, gt=gt, slic=slic, noise=noise,
                        progress=progress)


def generate_digits(
    n_train: int = 1200,
    n_val: int = 300,
    n_test: int = 297,
    noise_seed: int = 111,
    split_seed: int = 111,
    gt: str = "intensity",
    final: bool = False,
    slic: str = SLIC_DEFAULT,
    noise: str = "padded",
    progress: bool = False,
) -> dict[str, GraphSet]:
    """DIGITS-75SP: the MNIST-75SP pipeline on scikit-learn's 1797 8x8 digits upscaled to 28x28
    (`gt`, `final`, `slic` and `noise` as in `generate_mnist`)."""

    check_choices(gt, slic, noise)
    images, labels = digits_images(n_train, n_val, n_test, split_seed, final)
    return build_splits(images, labels, noise_seed=noise_seed, gt=gt, slic=slic, noise=noise,
                        progress=progress)


def digits_images(n_train: int = 1200, n_val: int = 300, n_test: int = 297, split_seed: int = 111,
                  final: bool = False) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The (28, 28) images in [0, 1] and labels of each DIGITS-75SP split ("train", "val",
    "test"), as `generate_digits` draws them."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    total = n_train + n_val + n_test
    if total > len(digits.images):
        raise ConfigError(f"n_train + n_val + n_test = {total} exceeds the "
                          f"{len(digits.images)} scikit-learn digits")
    perm = np.random.default_rng(split_seed).permutation(len(digits.images))
    tr, va = _train_val(perm, n_train, n_val, final)
    idx = {"train": tr, "val": va, "test": perm[n_train + n_val:total]}
    images = {k: upscale_digits(digits.images[v] / 16.0) for k, v in idx.items()}
    labels = {k: digits.target[v] for k, v in idx.items()}
    return images, labels


def _train_val(perm: np.ndarray, n_train: int, n_val: int,
               final: bool) -> tuple[np.ndarray, np.ndarray]:
    """Train and val image indices: disjoint, or (final) train = train + val, val unchanged."""
    tr, va = perm[:n_train], perm[n_train:n_train + n_val]
    return (perm[:n_train + n_val] if final else tr), va


def check_choices(gt: str = "intensity", slic: str = SLIC_DEFAULT, noise: str = "padded") -> None:
    """`ConfigError` (one line naming the valid values) for an unknown gt, slic or noise."""
    if gt not in GT_VARIANTS:
        raise ConfigError(f"gt must be one of {', '.join(GT_VARIANTS)}, got {gt!r}")
    slic_rules.check_rule(slic)
    if noise not in NOISE_SCALES:
        raise choice_error("noise", noise, NOISE_SCALES)


def upscale_digits(images: np.ndarray, size: int = IMAGE_SIZE) -> np.ndarray:
    """(n, 8, 8) images in [0, 1] bilinearly resized to (n, size, size), no anti-aliasing."""
    from skimage.transform import resize

    if len(images) == 0:
        return np.zeros((0, size, size), np.float32)
    out = resize(np.asarray(images, np.float64), (len(images), size, size), order=1,
                 anti_aliasing=False, mode="edge")
    return np.clip(out, 0.0, 1.0).astype(np.float32)


def build_splits(
    images: dict[str, np.ndarray],
    labels: dict[str, np.ndarray],
    noise_seed: int = 111,
    gt: str = "intensity",
    slic: str = SLIC_DEFAULT,
    noise: str = "padded",
    progress: bool = False,
) -> dict[str, GraphSet]:
    """Superpixel graphs of images["train"/"val"/"test"] (n, 28, 28) in [0, 1], plus noisy tests;
    ground truth `gt` ("intensity" or "any", `superpixels.gt_attention`), SLIC rule `slic`, noise
    scale `noise` (module docstring). Point graphs: each graph stores its nodes' features,
    centroids and ground truth; its complete weighted adjacency is derived from the centroids
    where batches are made (`GraphSet.points`)."""
    check_choices(gt, slic, noise)
    raw = raw_splits(images, labels, gt=gt, slic=slic, progress=progress)
    mean, std = feature_stats(raw["train"].x)
    factor = noise_factor(raw["train"], std[0]) if noise == "padded" else 1.0
    for gs in raw.values():
        gs.x = ((gs.x - mean) / std).astype(np.float32)
    test = raw["test"]
    noisy, noisyc = _copy(test), _copy(test)
    n = len(test.x)
    noisy.x[:, :N_INTENSITY] += np.random.default_rng([noise_seed, 0]).normal(
        0.0, NOISE_STD * factor, size=(n, 1)).astype(np.float32)
    noisyc.x[:, :N_INTENSITY] += np.random.default_rng([noise_seed, 1]).normal(
        0.0, NOISE_C_STD * factor, size=(n, N_INTENSITY)).astype(np.float32)
    return {"train": raw["train"], "val": raw["val"], "test_orig": test,
            "test_noisy": noisy, "test_noisyc": noisyc}


def raw_splits(
    images: dict[str, np.ndarray],
    labels: dict[str, np.ndarray],
    gt: str = "intensity",
    slic: str = SLIC_DEFAULT,
    progress: bool = False,
) -> dict[str, GraphSet]:
    """Superpixel graphs of images["train"/"val"/"test"] with UNSTANDARDISED features
    [I, I, I, row, col] (what `build_splits` standardises; the authors' pipeline starts here)."""
    raw: dict[str, GraphSet] = {}
    for split in ("train", "val", "test"):
        sps = images_to_superpixels(images[split], progress=progress, desc=f"superpixels {split}",
                                    rule=slic)
        raw[split] = _point_graphs(sps, np.asarray(labels[split], np.int64), gt)
        del sps
    return raw


def _point_graphs(sps: list[tuple[np.ndarray, np.ndarray]], y: np.ndarray,
                  gt: str) -> GraphSet:
    """One split's graphs from (intensity, centre) per image: unstandardised features
    [I, I, I, row, col], centroids and ground truth; no stored edges."""
    if not sps:
        return _empty(N_INTENSITY + 2)
    sizes = np.array([len(i) for i, _ in sps], np.int64)
    zero = np.zeros(len(sps) + 1, np.int64)
    return GraphSet(
        x=np.concatenate([_raw_features(i, c) for i, c in sps]).astype(np.float32),
        gt=np.concatenate([gt_attention(i, gt) for i, _ in sps]).astype(np.float32),
        node_ptr=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        edge_index=np.zeros((2, 0), np.int64), edge_ptr=zero, y=y,
        coord=np.concatenate([c for _, c in sps]).astype(np.float32))


def padded_std(gs: GraphSet, nodes: int = MAX_SUPERPIXELS) -> float:
    """Std of the (raw) intensity over the graphs of `gs` zero-padded to `nodes` nodes each: the
    std the authors standardise with (theirs over zero-padded training batches)."""
    i = np.asarray(gs.x[:, 0], np.float64)
    slots = nodes * len(gs)
    if slots == 0:
        return 1.0
    mean = i.sum() / slots
    var = (i ** 2).sum() / slots - mean ** 2
    return float(np.sqrt(var)) if var > 0 else 1.0


def noise_factor(train: GraphSet, std: float) -> float:
    """Our units (std over real nodes, `std`) -> the authors' noise scale: padded std / `std`."""
    return padded_std(train) / float(std)


def feature_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std of (train) node features; a zero std becomes 1."""
    if len(x) == 0:
        return np.zeros(x.shape[1], np.float32), np.ones(x.shape[1], np.float32)
    mean = x.mean(axis=0, dtype=np.float64)
    std = x.std(axis=0, dtype=np.float64)
    std[std == 0] = 1.0
    return mean.astype(np.float32), std.astype(np.float32)


def _raw_features(intensity: np.ndarray, coord: np.ndarray) -> np.ndarray:
    """Unstandardised node features [I, I, I, row, col] of one superpixel graph."""
    return np.concatenate([np.repeat(intensity[:, None], N_INTENSITY, axis=1), coord], axis=1)


def _empty(channels: int) -> GraphSet:
    """A split with no graphs (e.g. n_val=0) that still has `channels` feature channels."""
    zero = np.zeros(1, np.int64)
    return GraphSet(x=np.zeros((0, channels), np.float32), gt=np.zeros(0, np.float32),
                    node_ptr=zero, edge_index=np.zeros((2, 0), np.int64), edge_ptr=zero.copy(),
                    y=np.zeros(0, np.int64), coord=np.zeros((0, 2), np.float32))


def _copy(gs: GraphSet) -> GraphSet:
    """A GraphSet with its own copy of x; every other array is the same object, so the cache
    stores it once (`ablate.data.cache.save_splits`)."""
    return gs.replace(x=gs.x.copy())


# --------------------------------------------------------------------------- MNIST IDX files


def find_mnist_files(path: str | None) -> dict[str, Path]:
    """The four MNIST IDX files (plain or .gz) in `path`, `path/raw` or `path/MNIST/raw`."""
    expected = ", ".join(f"{name}[.gz]" for name in MNIST_FILES.values())
    if path is None:
        raise ConfigError("MNIST is read from a local directory and never downloaded: set "
                          f"path= to a directory holding {expected}")
    root = Path(path).expanduser()
    if not root.is_dir():
        raise ConfigError(f"MNIST directory {str(root)!r} does not exist; it should hold "
                          f"{expected} (or have them in raw/ or MNIST/raw/)")
    for folder in (root, root / "raw", root / "MNIST" / "raw"):
        found = {}
        for key, name in MNIST_FILES.items():
            for cand in (name, name + ".gz", _dotted(name), _dotted(name) + ".gz"):
                if (folder / cand).is_file():
                    found[key] = folder / cand
                    break
        if len(found) == len(MNIST_FILES):
            return found
    raise ConfigError(f"MNIST files not found in {str(root)!r} (nor in raw/ or MNIST/raw/); "
                      f"expected {expected}")


def _dotted(name: str) -> str:
    """The 'train-images.idx3-ubyte' spelling some mirrors use."""
    return name.replace("-idx", ".idx")


def read_idx(path: str | Path) -> np.ndarray:
    """An IDX file (magic 0 0 dtype ndim, big-endian int32 dims, data), plain or gzipped."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES:
        raise ConfigError(f"{str(path)!r} is not an IDX file")
    ndim = data[3]
    dims = np.frombuffer(data, dtype=">i4", count=ndim, offset=4).astype(np.int64)
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    count = int(np.prod(dims))
    offset = 4 + 4 * ndim
    if len(data) < offset + count * dtype.itemsize:
        raise ConfigError(f"{str(path)!r} is truncated: header says shape {tuple(dims)}")
    arr = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    return arr.reshape(tuple(dims)).astype(dtype.newbyteorder("="))


def load_mnist_arrays(path: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train images uint8 (n, 28, 28), train labels int64, test images, test labels)."""
    files = find_mnist_files(path)
    out = {key: read_idx(p) for key, p in files.items()}
    for split in ("train", "test"):
        imgs, labs = out[f"{split}_images"], out[f"{split}_labels"]
        if imgs.ndim != 3 or labs.ndim != 1 or len(imgs) != len(labs):
            raise ConfigError(f"MNIST {split} files in {str(files[f'{split}_images'].parent)!r} "
                              f"disagree: images {imgs.shape}, labels {labs.shape}")
    return (out["train_images"], out["train_labels"].astype(np.int64),
            out["test_images"], out["test_labels"].astype(np.int64))
