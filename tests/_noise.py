"""Which parameters of a pack get only rounding noise as gradient (shared by packed-step tests)."""

import copy

import torch

from ablate.models.layers import Graph
from ablate.trial import pack_step
from ablate.trial import packed as batched
from ablate.trial.batches import TrainBatches
from ablate.trial.fit import task_loss

CPU = torch.device("cpu")


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
