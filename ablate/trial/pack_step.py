"""One optimisation step of every member of a pack: gather, vmapped losses, backward, Adam.

``replay`` (`TrialConfig.step`): batches padded to the split's largest graph (fixed
shapes), gathered on the device, Adam capturable with a device LR; on CUDA each
batch shape is captured once as a CUDA graph and replayed. ``eager``: batches
padded to their own largest graph, Python step by step.
"""

from __future__ import annotations

import copy
import warnings

import numpy as np
import torch
from torch import Tensor
from torch.func import functional_call, vmap

from ablate.config import TrialConfig
from ablate.models.layers import Graph
from ablate.trial.batches import DenseBatch, TrainBatches, collate
from ablate.trial.fit import task_loss
from ablate.trial.members import MemberStack
from ablate.trial.memory import is_out_of_memory

WARMUP_STEPS = 2  # eager steps of a batch shape (on a side stream) before its CUDA graph is captured


def _gather(train: TrainBatches, idx: Tensor, static: bool) -> DenseBatch:
    """Graphs idx (S, B) of every member: (S, B, ...), padded to the split's (static) or the
    batch's largest graph. x, A, mask, y are the split's; gt is each member's own where the
    split holds per-member targets (`TrainBatches.set_member_gt`, weak supervision)."""
    S, B = idx.shape
    flat = idx.reshape(-1)
    if train.dense is not None:
        b = train.dense.index(flat, trim=not static)  # trim: a host sync, the eager path only
    else:
        ids = flat.cpu().numpy()
        n = int(train.gs.num_nodes.max() if static else train.gs.num_nodes[ids].max())
        b = collate(train.gs, ids, n_max=n).to(train.device)
    out = DenseBatch(*(t.reshape(S, B, *t.shape[1:]) for t in
                       (b.x, b.A, b.mask, b.gt, b.y, b.n_nodes)))
    if train.has_member_gt:
        out = out.replace_gt(train.member_gt_batch(idx, b.x.shape[1]))
    return out


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
        if replay and device.type == "cuda" and train.dense is None:
            warnings.warn("step=replay: the training split is too large to keep collated on the "
                          "GPU, so its steps are collated on the host and not captured",
                          RuntimeWarning, stacklevel=2)
        names = _trainable(stack, train, cfg)
        self.train_p = {k: stack.params[k].requires_grad_() for k in names}
        self.fixed_p = {k: v for k, v in stack.params.items() if k not in self.train_p}
        # the fixed-shape step: a device LR (changed in place by the schedule) and fused,
        # capturable Adam (its step count on the device) on every device, so the CPU runs
        # the optimiser a CUDA graph captures; eager: fused Adam with a Python LR
        lr = torch.tensor(cfg.lr, device=device) if replay else cfg.lr
        kw = dict(capturable=True) if replay else {}
        self.opt = torch.optim.Adam(list(self.train_p.values()), lr=lr, betas=(0.5, 0.999),
                                    weight_decay=cfg.weight_decay, fused=True, **kw)
        self.total = torch.zeros(len(stack), device=device)
        self._loss = _loss_fn(stack, cfg)
        # the dropout key (`ablate.models.dropout`): each member's seed and the steps taken,
        # a device counter advanced in place by `_body` (so a replayed graph advances it too)
        self.dropout_seed = torch.tensor([m.seed for m in stack.members], dtype=torch.int64,
                                         device=device)
        self.step = torch.zeros((), dtype=torch.int64, device=device)
        self._graphs: dict[int, tuple] = {}  # batch size -> (replay, static index buffer)
        self._eager_runs: dict[int, int] = {}
        self._uncaptured: set[int] = set()  # batch sizes whose capture failed: run eagerly
        self._bound: list = []  # (name, object) of what the captured graphs read

    def set_lr(self, lr: float) -> None:
        for g in self.opt.param_groups:
            if isinstance(g["lr"], Tensor):
                g["lr"].fill_(lr)  # in place: a captured graph reads this buffer
            else:
                g["lr"] = lr

    def buffers(self) -> list[tuple[str, object]]:
        """(name, object) of everything outside this step that a captured graph reads: the
        pre-collated split and per-member targets, each LR group entry, the stack's
        parameters and hyperparameters. A graph replays the addresses it was captured with,
        so one replaced since (`TrainBatches.dense` rebuilt, an LR group assigned a float, a
        parameter swapped in `stack.params`) would be read or updated stale. The step's own
        tensors (Adam state, `total`, the dropout counter) are only ever changed in place."""
        out: list[tuple[str, object]] = []
        dense = self.train.dense
        if dense is not None:
            out += [(f"train.{k}", getattr(dense, k)) for k in ("x", "A", "mask", "gt", "y")]
        if getattr(self.train, "member_gt", None) is not None:
            out.append(("train.member_gt", self.train.member_gt))
        out += [(f"lr[{i}]", g["lr"]) for i, g in enumerate(self.opt.param_groups)]
        out += [(f"param {k}", v) for k, v in self.stack.params.items()]
        out += [(f"hyper {k}", v) for k, v in self.stack.hyper.items()]
        return out

    def _check_bound(self) -> None:
        """Drop the captured graphs if an object they read was replaced (one warning). An
        identity check per object, on the host: a few microseconds per replay."""
        now = self.buffers()
        if len(now) == len(self._bound) and all(
                x is y for (_, x), (_, y) in zip(now, self._bound)):
            return
        was = dict(self._bound)
        changed = sorted(n for n, x in now if was.get(n) is not x)
        warnings.warn(f"a buffer captured in the CUDA graph was replaced ({', '.join(changed)}); "
                      "re-capturing the step", RuntimeWarning, stacklevel=3)
        self._graphs.clear()
        self._eager_runs.clear()
        self._bound = []

    def _body(self, idx: Tensor) -> None:
        b = _gather(self.train, idx, self.static)
        loss = self._loss(self.train_p, self.fixed_p, self.stack.hyper, self.dropout_seed,
                          self.step, b.x, b.A, b.mask, b.gt, b.y)  # (S,)
        loss.sum().backward()  # members share no parameters: each gets its own gradient
        self.opt.step()
        self.total.add_(loss.detach() * idx.shape[1])
        if self.cfg.dropout > 0:
            self.step.add_(1)

    def run(self, idx: Tensor) -> None:
        B = idx.shape[1]
        if not self.graphs_on or B in self._uncaptured:
            self.opt.zero_grad(set_to_none=True)
            self._body(idx)
            return
        if self._graphs:
            self._check_bound()
        graph = self._graphs.get(B)
        if graph is None:
            if self._eager_runs.get(B, 0) < WARMUP_STEPS:
                self._eager_runs[B] = self._eager_runs.get(B, 0) + 1
                self._warm(lambda: self._body(idx))
                return
            static_idx = idx.clone()
            self.opt.zero_grad(set_to_none=True)  # gradients are allocated by the graph
            try:
                replay = self._capture(lambda: self._body(static_idx))
            except CaptureError as e:  # run this shape uncaptured from now on
                warnings.warn(f"CUDA graph capture of the {B}-graph batch step failed "
                              f"({e.cause!r}); running that step uncaptured", RuntimeWarning,
                              stacklevel=2)
                self._uncaptured.add(B)
                self.opt.zero_grad(set_to_none=True)  # drop gradients the capture assigned
                self._body(idx)
                return
            graph = self._graphs[B] = (replay, static_idx)  # captured, not yet run: below
            self._bound = self.buffers()
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
        gradients, steps Adam, adds to `total`: the step, without Python or host syncs).

        An error inside the captured region is re-raised as itself when it is an
        out-of-memory error, torch's or a CUDA library's (so `run_members` splits the pack),
        else as `CaptureError`;
        the error that ending an aborted capture raises on exit never hides it.
        """
        g = torch.cuda.CUDAGraph()
        inner: BaseException | None = None
        stream = torch.cuda.current_stream()
        pool = torch.cuda.graph_pool_handle()  # named here: a failed capture has no g.pool()
        try:
            with torch.cuda.graph(g, pool=pool):
                try:
                    step()
                except BaseException as e:  # noqa: BLE001 - kept, re-raised below
                    inner = e
                    raise
        except BaseException as outer:  # noqa: BLE001
            abandon_capture(stream, pool)
            err = inner if inner is not None else outer
            if isinstance(err, KeyboardInterrupt) or is_out_of_memory(err):
                raise err from None
            raise CaptureError(err) from err
        return g.replay

    def release(self) -> None:
        self._graphs.clear()
        for p in self.train_p.values():
            p.grad = None
            p.requires_grad_(False)


def abandon_capture(stream: torch.cuda.Stream, pool: tuple[int, int]) -> None:
    """Leave the process as it was before a capture that failed.

    When `cudaStreamEndCapture` fails, `torch.cuda.graph.__exit__` raises before it restores
    the current stream, and `capture_end` raises before it tells the caching allocator the
    capture is over: the process would stay on the graph's side stream, the allocator would
    keep routing that stream's allocations to the graph's private pool and, believing a
    capture still runs, would no longer free its cache and retry before an out-of-memory
    error. Here: the current stream is restored, the allocator leaves the pool, and the pool
    is released (its memory returns once the graph's tensors are gone). A capture that ended
    (the error came from inside the step, `capture_end` succeeded and restored the stream) is
    left to torch: the graph releases its own pool when it is freed."""
    if torch.cuda.current_stream() == stream:
        return
    from ablate.compat import cuda_pool_exit

    torch.cuda.set_stream(stream)
    dev = stream.device.index
    for fn in cuda_pool_exit():
        try:
            fn(dev, pool)
        except RuntimeError:  # already ended / released by torch itself
            pass


class CaptureError(RuntimeError):
    """Capturing a step as a CUDA graph failed (not for lack of memory); `cause` says why."""

    def __init__(self, cause: BaseException):
        super().__init__(f"CUDA graph capture failed: {cause!r}")
        self.cause = cause


def _loss_fn(stack: MemberStack, cfg: TrialConfig):
    """vmap of each member's loss over stacked params, hyperparameters, dropout seeds and
    batches, the step counter shared: (S,)."""
    base, regression, use_gt = stack.base, stack.regression, cfg.supervision != "unsup"

    def loss_fn(train_p: dict, fixed_p: dict, hyper: dict, seed, step, x, A, mask, gt, y):
        key = {"dropout_seed": seed, "step": step}  # read only with dropout, in training
        o = functional_call(base, {**train_p, **fixed_p},
                            (x, Graph(A, mask), gt if use_gt else None), {"hyper": {**hyper, **key}})
        return task_loss(o.out, y, regression) + o.reg

    return vmap(loss_fn, in_dims=(0, 0, 0, 0, None, 0, 0, 0, 0, 0))
