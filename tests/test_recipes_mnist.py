"""MNIST-75SP as the reference script `scripts/mnist_75sp.sh` runs it (docs/recipes.md).

ChebyGIN rows with mean aggregation and no hidden MLP (backbone chebygin_ref),
the ground-truth oracle for K > 1 on superpixels with intensity > 0 (data.gt=any),
and final models trained on every training image (data.final=true). Tiny MNIST
IDX files are written by the helpers of test_data_real.py; nothing is downloaded.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_data_real import _blob_images, _write_mnist

from ablate.data import dataset_recipe_hash, mnist, superpixels
from ablate.errors import ConfigError


@pytest.fixture(scope="module")
def mnist_dir(tmp_path_factory):
    tr_x, tr_y = _blob_images(20, seed=0)
    te_x, te_y = _blob_images(6, seed=1)
    root = tmp_path_factory.mktemp("mnist_recipe")
    _write_mnist(root, {"train_images": tr_x, "train_labels": tr_y, "test_images": te_x,
                        "test_labels": te_y}, gz=False)
    return root


def test_gt_any_is_uniform_over_nonblack_superpixels():
    intensity = np.array([0.0, 0.2, 0.7, 0.0, 0.5], np.float32)
    np.testing.assert_allclose(superpixels.gt_attention(intensity, "any"), [0, 1 / 3, 1 / 3, 0, 1 / 3])
    spec = superpixels.gt_attention(intensity)  # SPEC default: ~ I on I >= 0.5
    np.testing.assert_allclose(spec, [0, 0, 0.7 / 1.2, 0, 0.5 / 1.2], rtol=1e-6)
    assert superpixels.gt_attention(np.zeros(3, np.float32), "any").sum() == 0
    with pytest.raises(ValueError, match="intensity, any"):
        superpixels.gt_attention(intensity, "bright")


def test_mnist_gt_recipe_parameter(mnist_dir):
    kw = dict(n_train=6, n_val=2, n_test=3)
    spec = mnist.generate_mnist(str(mnist_dir), **kw)
    ref = mnist.generate_mnist(str(mnist_dir), gt="any", **kw)
    for split in ("train", "val", "test_orig", "test_noisy"):
        a, b = spec[split], ref[split]
        np.testing.assert_array_equal(a.x, b.x)  # same superpixels, only the ground truth differs
        # the blob images have no black pixel: every superpixel has intensity > 0
        np.testing.assert_allclose(b.gt, np.repeat(1.0 / b.num_nodes, b.num_nodes), rtol=1e-6)
        assert (a.gt == 0).any() and not np.allclose(a.gt, b.gt)
    digits = mnist.generate_digits(n_train=4, n_val=2, n_test=2, gt="any")
    gs = digits["train"]
    for i in range(len(gs)):
        g = gs.gt[gs.node_ptr[i]:gs.node_ptr[i + 1]]
        assert np.allclose(g[g > 0], g[g > 0][0])  # uniform over its support
    assert dataset_recipe_hash("mnist_sp", {"gt": "any"}) != dataset_recipe_hash("mnist_sp", {})
    with pytest.raises(ConfigError, match="gt must be one of"):
        mnist.generate_mnist(str(mnist_dir), gt="bright", **kw)


def test_mnist_final_trains_on_train_and_val(mnist_dir, monkeypatch):
    seen = {}

    def spy(images, labels, **kw):
        seen.update(images=images, kw=kw)
        return {}

    monkeypatch.setattr(mnist, "build_splits", spy)
    mnist.generate_mnist(str(mnist_dir), n_train=12, n_val=8, n_test=5, final=True)
    flat = {k: {v.tobytes() for v in imgs} for k, imgs in seen["images"].items()}
    assert len(seen["images"]["train"]) == 20 and len(flat["val"]) == 8
    assert flat["val"] <= flat["train"]  # the val images went back into train
    mnist.generate_mnist(str(mnist_dir), n_train=12, n_val=8, n_test=5)
    flat = {k: {v.tobytes() for v in imgs} for k, imgs in seen["images"].items()}
    assert len(flat["train"]) == 12 and not flat["train"] & flat["val"]  # default: held out
    mnist.generate_digits(n_train=10, n_val=4, n_test=3, final=True)
    assert [len(seen["images"][k]) for k in ("train", "val", "test")] == [14, 4, 3]


def test_mnist_study_follows_reference_script():
    from ablate.runner.study.expand import build_study

    study, _ = build_study("mnist", ["data.path=/data"])
    cfgs = [t.config for t in study.trials]
    assert all(dict(c.data_params).get("final") is True for c in cfgs)  # all 60k images
    cheby = [c for c in cfgs if c.backbone.startswith("chebygin")]
    assert cheby and {c.backbone for c in cheby} == {"chebygin_ref"}
    assert {(c.K, c.aggregation, c.hidden) for c in cheby} == {(4, "mean", 0)}
    gin = [c for c in cfgs if c.backbone == "gin"]
    assert {(c.aggregation, c.hidden) for c in gin} == {("sum", 64)}
    gt_of = {(c.backbone, c.supervision): dict(c.data_params).get("gt", "intensity")
             for c in cfgs if c.pool_layers}
    assert gt_of[("chebygin_ref", "gt")] == "any"  # the reference oracle for K > 1
    assert gt_of[("gin", "gt")] == "intensity"
    assert {v for k, v in gt_of.items() if k[1] != "gt"} == {"intensity"}
    offline, _ = build_study("mnist", ["dataset=digits_sp"])  # the digits take the same recipe
    assert len(offline.trials) == len(study.trials)
    assert {dict(t.config.data_params).get("gt") for t in offline.trials} == {None, "any"}
