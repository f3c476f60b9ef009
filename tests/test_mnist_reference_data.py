"""MNIST-75SP as the authors made it (issue 26): their SLIC, their noise scale.

`tests/fixtures/mnist_superpixels_reference.npz` holds the first 200 MNIST test images with
the superpixels the authors' unmodified extraction code made with scikit-image 0.15's SLIC
(a copy of `shared/fixtures/`, whose README says what each array is). Our default rule must
give every image the same superpixels: the same count, and the same mean intensity and
centre to 1e-5. Today's scikit-image (`slic="v0.19"`) must not (the test can fail), and it
must still be what `skimage.segmentation.slic` does; the request loop that clusters each
seed grid once must equal the authors' loop of one SLIC call per `n_segments`. The noisy
tests add the authors' raw noise: 0.4 / 0.6 times the intensity std over training graphs
zero-padded to 75 nodes. Unknown `data.slic` / `data.noise`: one line, exit 2, before Ray.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from skimage.segmentation import slic as skimage_slic
from sklearn.datasets import load_digits

from ablate.data import dataset_recipe_hash, mnist, resolve_params, slic, superpixels
from ablate.data.graphs import GraphSet
from ablate.errors import ConfigError
from ablate.run import main

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "mnist_superpixels_reference.npz"


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    with np.load(FIXTURE) as f:
        return {k: f[k] for k in f.files}


def _images(ref: dict) -> np.ndarray:
    """The images as the authors' code (and ours) feed SLIC: uint8 / 255 in float32."""
    return ref["images"].astype(np.float32) / 255.0


def _matches(ref: dict, rule: str) -> tuple[int, int]:
    """(images with the reference's superpixel count, of those with its features to 1e-5)."""
    counts = features = 0
    for i, img in enumerate(_images(ref)):
        intensity, coord = superpixels.image_superpixels(img, rule)
        a, b = ref["sp_ptr"][i], ref["sp_ptr"][i + 1]
        if len(intensity) != b - a:
            continue
        counts += 1
        want = np.stack([ref["sp_intensity"][a:b], ref["sp_row"][a:b], ref["sp_col"][a:b]], 1)
        got = np.stack([intensity, coord[:, 0], coord[:, 1]], 1)
        features += bool(np.abs(got - want).max() <= 1e-5)
    return counts, features


def test_default_superpixels_are_the_authors(reference):
    """Every one of the 200 images: the same superpixels as the authors' data."""
    assert len(reference["images"]) == 200 and reference["sp_ptr"][-1] == len(reference["sp_row"])
    assert _matches(reference, superpixels.SLIC_DEFAULT) == (200, 200)


def test_todays_slic_is_not_the_authors(reference):
    counts, _ = _matches(reference, "v0.19")
    assert counts < 170  # the fixture's README: 155 of 200 with the same count


def _digit() -> np.ndarray:
    return mnist.upscale_digits(load_digits().images[:1] / 16.0)[0]


def _test_images() -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    dim = rng.random((28, 28)) * 0.6 + 0.1  # not in [0, 1]: 0.19's rescaling matters
    return [_digit(), rng.random((28, 28)) * (rng.random((28, 28)) > 0.5), dim]


def test_v019_rule_is_todays_skimage_slic():
    """The authors' loop, one call of the installed `skimage.segmentation.slic` per n, equals
    the 0.19 rule rebuilt on its kernels (labels there start at 1)."""
    for img in _test_images():
        n = superpixels.N_SEGMENTS_START
        while True:
            ref = skimage_slic(img.astype(np.float64), n_segments=n, compactness=0.25,
                               channel_axis=None)
            if len(np.unique(ref)) <= superpixels.MAX_SUPERPIXELS:
                break
            n -= 1
        np.testing.assert_array_equal(superpixels.slic_segments(img, "v0.19") + 1, ref)


@pytest.mark.parametrize("rule", slic.SLIC_RULES)
def test_grid_reuse_equals_one_slic_call_per_n(rule):
    for img in _test_images():
        n = superpixels.N_SEGMENTS_START
        while len(np.unique(ref := slic.segments(img, n, rule))) > superpixels.MAX_SUPERPIXELS:
            n -= 1
        np.testing.assert_array_equal(superpixels.slic_segments(img, rule), ref)


def test_sizes_follow_the_segments_asked_for_under_v015():
    """0.15 sizes segments by the n asked for (784 / 95 -> min 4, max 24), 0.19 by the seeds
    placed (a 9 x 9 grid for n = 95: 784 / 81 -> min 4, max 29)."""
    assert slic._sizes(784, 95, 81, "v0.15") == (4, 24)
    assert slic._sizes(784, 95, 81, "v0.19") == (4, 29)
    assert slic._placed(slic._grid((1, 28, 28), 95), (1, 28, 28)) == 81


def _graphs(sizes: list[int], values: list[float]) -> GraphSet:
    x = np.concatenate([np.full((n, 5), v, np.float32) for n, v in zip(sizes, values)])
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    zero = np.zeros(len(sizes) + 1, np.int64)
    return GraphSet(x=x, gt=np.zeros(len(x), np.float32), node_ptr=ptr,
                    edge_index=np.zeros((2, 0), np.int64), edge_ptr=zero,
                    y=np.zeros(len(sizes), np.int64))


def test_padded_std_is_the_std_of_graphs_zero_padded_to_75_nodes():
    gs = _graphs([3, 75, 10], [0.2, 0.5, 1.0])
    padded = np.zeros((3, 75))
    padded[0, :3], padded[1, :75], padded[2, :10] = 0.2, 0.5, 1.0
    assert mnist.padded_std(gs) == pytest.approx(padded.std(), rel=1e-6)
    assert mnist.noise_factor(gs, 0.25) == pytest.approx(padded.std() / 0.25, rel=1e-6)


def test_noise_has_the_authors_raw_scale():
    """Same draws, scaled: in raw intensity units the noise is 0.4 (0.6) times the std of the
    training intensities zero-padded to 75 nodes per graph (computed here from scratch)."""
    imgs = mnist.upscale_digits(load_digits().images[:48] / 16.0)
    images = {"train": imgs[:36], "val": imgs[36:38], "test": imgs[38:]}
    labels = {k: np.zeros(len(v), np.int64) for k, v in images.items()}
    ours = mnist.build_splits(images, labels)
    before = mnist.build_splits(images, labels, noise="nodes")
    sps = superpixels.images_to_superpixels(images["train"], workers=1)
    intensity = np.concatenate([i for i, _ in sps]).astype(np.float64)
    padded = np.zeros((len(sps), 75))
    for g, (i, _) in enumerate(sps):
        padded[g, : len(i)] = i
    real_std = intensity.astype(np.float32).std(dtype=np.float64)
    assert 0.8 < padded.std() / real_std < 1.0  # zero slots: a smaller std
    for split, size in (("test_noisy", mnist.NOISE_STD), ("test_noisyc", mnist.NOISE_C_STD)):
        noise = (ours[split].x - ours["test_orig"].x)[:, :3] * real_std  # raw units
        unit = (before[split].x - before["test_orig"].x)[:, :3] / size  # the same N(0, 1) draws
        np.testing.assert_allclose(noise, unit * size * padded.std(), rtol=1e-3, atol=1e-6)
        assert not (ours[split].x[:, 3:] - ours["test_orig"].x[:, 3:]).any()  # coordinates
    for split in ("train", "val", "test_orig"):
        np.testing.assert_array_equal(ours[split].x, before[split].x)


def test_unknown_slic_or_noise_is_one_line_and_exit_2_before_ray(capsys, tmp_path):
    with pytest.raises(ConfigError, match=r"unknown slic 'v0\.17'; valid choices: v0\.15, v0\.19"):
        resolve_params("digits_sp", {"slic": "v0.17"})
    with pytest.raises(ConfigError, match="valid choices: padded, nodes"):
        resolve_params("mnist_sp", {"noise": "raw"})
    for bad in ("data.slic=v0.17", "data.noise=raw"):
        capsys.readouterr()
        code = main(["study=mnist", "dataset=digits_sp", bad, f"results_dir={tmp_path}"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1, err
        assert "valid choices" in err[0]
    assert not ("ray" in sys.modules and sys.modules["ray"].is_initialized())


def test_recipe_carries_the_slic_rule_and_noise():
    default = dataset_recipe_hash("digits_sp")
    assert dataset_recipe_hash("digits_sp", {"slic": "v0.15", "noise": "padded"}) == default
    others = {dataset_recipe_hash("digits_sp", p) for p in
              ({"slic": "v0.19"}, {"noise": "nodes"}, {"slic": "v0.19", "noise": "nodes"})}
    assert len(others) == 3 and default not in others
