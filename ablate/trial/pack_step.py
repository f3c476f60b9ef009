"""One optimisation step of every member of a pack: gather, vmapped losses, backward, Adam.

``replay`` (`TrialConfig.step`): batches padded to the split's largest graph (fixed
shapes), gathered on the device, Adam capturable with a device LR; on CUDA each
batch shape is captured once as a CUDA graph and replayed. ``eager``: batches
padded to their own largest graph, Python step by step.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import Tensor
from torch.func import functional_call, vmap

from ablate.config import TrialConfig
from ablate.models.layers import Graph
from ablate.trial.batches import DenseBatch, TrainBatches, collate
from ablate.trial.fit import task_loss
from ablate.trial.members import MemberStack

WARMUP_STEPS = 2  # eager steps of a batch shape (on a side stream) before its CUDA graph is captured


def _gather(train: TrainBatches, idx: Tensor, static: bool) -> DenseBatch:
    """Graphs idx (S, B) of every member: (S, B, ...), padded to the split's (static) or the
    batch's largest graph."""
    S, B = idx.shape
    flat = idx.reshape(-1)
    if train.dense is not None:
        b = train.dense.index(flat, trim=not static)  # trim: a host sync, the eager path only
    else:
        ids = flat.cpu().numpy()
        n = int(train.gs.num_nodes.max() if static else train.gs.num_nodes[ids].max())
        b = collate(train.gs, ids, n_max=n).to(train.device)
    return DenseBatch(*(t.reshape(S, B, *t.shape[1:]) for t in
                        (b.x, b.A, b.mask, b.gt, b.y, b.n_nodes)))


def _trainable(stack: MemberStack, train: TrainBatches, cfg: TrialConfig) -> list[str]:
    """Names of the parameters that get a gradient in the sequential path.

    Parameters unused by the loss (the scorer under gt supervision) get no gradient
    there, so Adam neither decays nor moves them; they stay fixed here too.
    """
    m = copy.deepcopy(stack.models[0]).train()
    n = min(len(train), cfg.batch_size)
    b = train.dense.index(torch.arange(n, device=train.device)) if train.dense is not None \
        else collate(train.gs, np.arange(n)).to(train.device)
    o = m(b.x, Graph(b.A, b.mask), b.gt if cfg.supervision != "unsup" else None)
    loss = task_loss(o.out, b.y, m.regression) + o.reg
    loss.backward()
    return [k for k, p in m.named_parameters() if p.grad is not None]


class PackStep:
    """One optimisation step of every member: gather, vmapped losses, backward, Adam.

    `run(idx)` trains on graphs idx (S, B) (a device tensor); the per-member sums of
    loss x batch size accumulate in `total` (S,) on the device. With `replay` on CUDA
    each batch shape is captured once as a CUDA graph after `WARMUP_STEPS` eager steps
    and replayed from then on (static inputs: the index buffer; parameters, Adam state,
    LR and `total` are updated in place by the graph).
    """

    def __init__(self, stack: MemberStack, train: TrainBatches, cfg: TrialConfig,
                 device: torch.device, replay: bool):
        self.stack, self.train, self.cfg = stack, train, cfg
        self.static = replay
        self.graphs_on = replay and device.type == "cuda" and train.dense is not None
        names = _trainable(stack, train, cfg)
        self.train_p = {k: stack.params[k].requires_grad_() for k in names}
        self.fixed_p = {k: v for k, v in stack.params.items() if k not in self.train_p}
        cuda = device.type == "cuda"
        # a device LR (changed in place by the schedule) and capturable state on CUDA
        lr = torch.tensor(cfg.lr, device=device) if cuda else cfg.lr
        kw = dict(capturable=True, foreach=True) if cuda else dict(fused=True)
        self.opt = torch.optim.Adam(list(self.train_p.values()), lr=lr, betas=(0.5, 0.999),
                                    weight_decay=cfg.weight_decay, **kw)
        self.total = torch.zeros(len(stack), device=device)
        self._loss = _loss_fn(stack, cfg)
        self._graphs: dict[int, tuple] = {}  # batch size -> (replay, static index buffer)
        self._eager_runs: dict[int, int] = {}

    def set_lr(self, lr: float) -> None:
        for g in self.opt.param_groups:
            if isinstance(g["lr"], Tensor):
                g["lr"].fill_(lr)
            else:
                g["lr"] = lr

    def _body(self, idx: Tensor) -> None:
        b = _gather(self.train, idx, self.static)
        loss = self._loss(self.train_p, self.fixed_p, self.stack.hyper,
                          b.x, b.A, b.mask, b.gt, b.y)  # (S,)
        loss.sum().backward()  # members share no parameters: each gets its own gradient
        self.opt.step()
        self.total.add_(loss.detach() * idx.shape[1])

    def run(self, idx: Tensor) -> None:
        if not self.graphs_on:
            self.opt.zero_grad(set_to_none=True)
            self._body(idx)
            return
        B = idx.shape[1]
        graph = self._graphs.get(B)
        if graph is None:
            if self._eager_runs.get(B, 0) < WARMUP_STEPS:
                self._eager_runs[B] = self._eager_runs.get(B, 0) + 1
                self._warm(lambda: self._body(idx))
                return
            static_idx = idx.clone()
            self.opt.zero_grad(set_to_none=True)  # gradients are allocated by the graph
            replay = self._capture(lambda: self._body(static_idx))
            graph = self._graphs[B] = (replay, static_idx)  # captured, not yet run: below
        graph[1].copy_(idx)
        graph[0]()

    def _warm(self, step) -> None:
        """One eager step on a side stream (what CUDA graph capture needs before it)."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.opt.zero_grad(set_to_none=True)
            step()
        torch.cuda.current_stream().wait_stream(side)

    def _capture(self, step):
        """Record `step` as a CUDA graph; returns its replay (each replay assigns fresh
        gradients, steps Adam, adds to `total`: the step, without Python or host syncs)."""
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        return g.replay

    def release(self) -> None:
        self._graphs.clear()
        for p in self.train_p.values():
            p.grad = None
            p.requires_grad_(False)


def _loss_fn(stack: MemberStack, cfg: TrialConfig):
    """vmap of each member's loss over stacked params, hyperparameters and batches: (S,)."""
    base, regression, use_gt = stack.base, stack.regression, cfg.supervision != "unsup"

    def loss_fn(train_p: dict, fixed_p: dict, hyper: dict, x, A, mask, gt, y):
        o = functional_call(base, {**train_p, **fixed_p},
                            (x, Graph(A, mask), gt if use_gt else None), {"hyper": hyper})
        return task_loss(o.out, y, regression) + o.reg

    return vmap(loss_fn)
