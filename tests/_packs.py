"""Shared by the packed-training tests: tiny dataset recipes, the dataset cache fixture,
the record tolerance, and which parameters get only rounding noise as gradient."""

import copy
import math

import pytest
import torch

from ablate.models.layers import Graph
from ablate.trial import pack_step
from ablate.trial import packed as batched
from ablate.trial.batches import TrainBatches
from ablate.trial.fit import task_loss

CPU = torch.device("cpu")
TINY = (("n_max_large", 40), ("n_test", 40), ("n_train", 64), ("n_val", 40))  # COLORS
TRI = (("n_max_large", 30), ("n_test", 20), ("n_train", 60), ("n_val", 20))  # TRIANGLES
TIMING = {"train_s", "eval_s", "peak_rss_mb"}
# Parameter tolerance between two paths that pad or fuse differently (eager vs replayed,
# foreach vs fused Adam): Adam normalises each update, so an element whose gradient is near
# zero moves by up to lr per step on rounding noise alone (measured: 1.8e-5 on 2 of 57,344
# TRIANGLES weights after 4 epochs). A real mistake (an LR decay one epoch late) moves
# every element by about lr x steps per epoch, over 1e-3.
ATOL = 5e-5


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path_factory, monkeypatch):
    """Datasets cached under the session's temporary folder (import it to use it)."""
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def close(a, b, key: str) -> bool:
    """Record values equal: exact for counts and labels, 1e-4 relative for floats, NaN = NaN."""
    if isinstance(b, float) and math.isnan(b):
        return isinstance(a, float) and math.isnan(a)
    if key in ("accuracy", "val_accuracy", "n_graphs", "seed", "split", "epoch", "status"):
        return a == b
    if isinstance(b, float):
        return abs(a - b) <= 1e-4 * max(1.0, abs(b))
    return a == b


def noise_only(cfg, splits) -> set[str]:
    """Parameters whose gradient is rounding noise only: the last bias of a GNN scorer is
    shift-invariant under softmax (alpha does not change), so Adam random-walks it on noise,
    which differs between paddings. Found as a gradient 1e-6 below every other one."""
    train = TrainBatches(splits["train"], CPU)
    stack = batched.MemberStack([batched.Member(cfg, cfg.seeds[0])],
                                splits["train"].num_features, 1, CPU)
    names = pack_step._trainable(stack, train, cfg)
    m = copy.deepcopy(stack.models[0]).train()
    b = train.dense.index(torch.arange(cfg.batch_size))
    o = m(b.x, Graph(b.A, b.mask), b.gt if cfg.supervision != "unsup" else None)
    (task_loss(o.out, b.y, m.regression) + o.reg).backward()
    grads = {k: p.grad.abs().max().item() for k, p in m.named_parameters() if k in names}
    top = max(grads.values())
    return {k for k, g in grads.items() if g < 1e-6 * top}
