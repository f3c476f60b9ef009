"""A pack of members (configuration, seed) trained as one batched model (`torch.func`).

The models are tiny, so a step costs kernel launches and per-op overhead rather
than arithmetic. Stacking the S members of a pack along a leading dimension and
running one `vmap`-ed forward and one backward per batch makes S members cost
little more than one. A *member* is one seed of one resolved configuration; the
members of a pack share every shape and differ only in values that stack
(`PACKABLE`): the seed, the initialisation of p (`init_dist`, `init_scale`) and
the per-member tensors `threshold`, `ratio`, `kl_weight` fed to the forward.
Each member keeps everything `train.run_seed` gives it:

- its initialisation (`torch.manual_seed(seed); GraphNet(cfg, ...)`, so `cos_p_init`
  is unchanged), stacked with `torch.func.stack_module_state`;
- its shuffling (`torch.Generator().manual_seed(seed)`, one permutation per epoch);
- its loss (task loss + KL term) and gradient: `vmap` keeps members independent;
- its Adam state: Adam with L2 weight decay and the step LR schedule is
  elementwise, so one optimiser over the (S, ...) stacked tensors is S optimisers.

Two ways to run a step (`TrialConfig.step`):

- ``replay``: every batch is padded to the split's largest graph (a fixed shape; the
  last, smaller batch of an epoch has its own fixed shape, as the recipe keeps it),
  batches are gathered on the device from the pre-collated split, the loss sums stay
  on the device (one host sync per epoch, where non-finite members are found), Adam
  is capturable with a device LR that the schedule changes in place; on CUDA the
  step is captured once per batch shape as a CUDA graph and replayed.
- ``eager``: batches padded to their own largest graph, Python step by step (the
  debugging path; on CPU the default, where a CUDA graph does not exist).

Padding is masked, so both give the records of `run_seed` up to float rounding
(`tests/test_batched.py`). A member whose epoch loss is not finite is recorded as
`status="nan"`; the others go on. Validation curves and the final evaluation run one
`vmap`-ed forward for all members over the shared evaluation batches, bring each
batch's outputs to the host once, and summarise each member with `train.summarize`.
On CUDA a pack that does not fit in memory is split in halves and run in turn.

Not packed (`train.run_seed` trains seed by seed): weak supervision (model B first),
Gao & Ji selection (PyG TopKPooling has data-dependent shapes), dropout (per-member
random masks could not reproduce the sequential RNG stream).
"""

from __future__ import annotations

import copy
import gc
import hashlib
import json
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor
from torch.func import functional_call, stack_module_state, vmap

from ablate.config import TrialConfig, axes
from ablate.data import GraphSet
from ablate.models.layers import Graph
from ablate.models.network import GraphNet, NetOutput
from ablate.models.pooling import PoolResult
from ablate.trial.batches import DenseBatch, TrainBatches, collate, eval_batches
from ablate.trial.graph import (
    _peak_rss_mb,
    evaluate,
    init_cosine,
    lr_at,
    pool_test_auc,
    summarize,
    task_loss,
)

EVAL_ENTRIES = 50_000_000  # feature entries (members x graphs x nodes x channels) per vmapped eval
STACKED = ("threshold", "ratio", "kl_weight")  # per-member values fed to the forward as tensors
PACKABLE = ("seeds", "init_dist", "init_scale", *STACKED)  # axes members of one pack may differ in
WARMUP_STEPS = 2  # eager steps of a batch shape (on a side stream) before its CUDA graph is captured


@dataclass(frozen=True)
class Member:
    """One seed of one resolved configuration."""

    cfg: TrialConfig
    seed: int


def eligible(cfg: TrialConfig) -> bool:
    """Whether `cfg` (resolved) can train in a pack (fixed shapes, no per-seed model B)."""
    return (cfg.supervision in ("unsup", "sup", "gt") and cfg.selection != "gao"
            and cfg.dropout == 0)


def pack_key(cfg: TrialConfig) -> str:
    """Configurations with equal keys can share a pack: they differ only in `PACKABLE` axes."""
    a = axes(cfg)
    for k in (*PACKABLE, "study"):
        a.pop(k, None)
    return hashlib.sha256(json.dumps(a, sort_keys=True, default=str).encode()).hexdigest()[:12]


def replays(cfg: TrialConfig, device: torch.device) -> bool:
    """Whether the fixed-shape step is used: step=replay, or step=auto on CUDA."""
    return cfg.step == "replay" or (cfg.step == "auto" and device.type == "cuda")


def _gather(train: TrainBatches, idx: Tensor, static: bool) -> DenseBatch:
    """Graphs idx (S, B) of every member: (S, B, ...), padded to the split's (static) or the
    batch's largest graph."""
    S, B = idx.shape
    flat = idx.reshape(-1)
    if train.dense is not None:
        d = train.dense
        if static:
            b = DenseBatch(d.x[flat], d.A[flat], d.mask[flat], d.gt[flat], d.y[flat],
                           d.n_nodes[flat])
        else:
            n = int(d.n_nodes[flat].max())  # a host sync: the eager path only
            b = DenseBatch(d.x[:, :n][flat], d.A[:, :n, :n][flat], d.mask[:, :n][flat],
                           d.gt[:, :n][flat], d.y[flat], d.n_nodes[flat])
    else:
        ids = flat.cpu().numpy()
        n = int(train.gs.num_nodes.max() if static else train.gs.num_nodes[ids].max())
        b = collate(train.gs, ids, n_max=n).to(train.device)
    return DenseBatch(*(t.reshape(S, B, *t.shape[1:]) for t in
                        (b.x, b.A, b.mask, b.gt, b.y, b.n_nodes)))


class MemberStack:
    """S members as stacked parameters and hyperparameters, with a template `GraphNet`.

    Args:
        members: resolved configs sharing a `pack_key`, one seed each, in order.
        in_ch, out_ch: model sizes; device: where the stack lives.
    """

    def __init__(self, members: list[Member], in_ch: int, out_ch: int, device: torch.device):
        self.members = list(members)
        models = []
        for m in self.members:
            torch.manual_seed(m.seed)
            models.append(GraphNet(m.cfg, in_ch, out_ch).to(device))
        self.models = models  # one materialised model per member (leave-one-out evaluation)
        self.base = copy.deepcopy(models[0])  # template for functional_call
        params, _ = stack_module_state(models)  # GraphNet has no buffers
        self.params = {k: v.detach() for k, v in params.items()}  # (S, ...) each
        self.hyper = {k: torch.tensor([float(getattr(m.cfg, k)) for m in self.members],
                                      device=device) for k in STACKED}  # (S,) each
        self.regression = models[0].regression

    def __len__(self) -> int:
        return len(self.members)

    def materialise(self, i: int) -> GraphNet:
        """Member i's `GraphNet` holding its current parameters."""
        m = self.models[i]
        with torch.no_grad():
            for k, p in m.named_parameters():
                p.copy_(self.params[k][i])
        return m


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


def _host_batch(b: DenseBatch) -> DenseBatch:
    """What `summarize` reads of a batch (labels, sizes, mask, gt), on the host; no x, no A."""
    B = len(b)
    empty = torch.empty(B, 0, 0)
    return DenseBatch(empty, empty, b.mask.cpu(), b.gt.cpu(), b.y.cpu(), b.n_nodes.cpu())


def _eval_forward(stack: MemberStack, alive: list[int], batches, cfg: TrialConfig):
    """Per member (in `alive` order) a list of (host batch, NetOutput on the host)."""
    base = stack.base
    n_pools = len(cfg.pool_layers)

    def fwd(p: dict, hyper: dict, x, A, mask, gt):
        o = functional_call(base, p, (x, Graph(A, mask), gt), {"hyper": hyper})
        pools = tuple((r.alpha, r.gt, r.mask_before, r.graph.mask) for r in o.pools)
        return o.out, pools

    per_member: list[list[tuple[DenseBatch, NetOutput]]] = [[] for _ in alive]
    idx = torch.tensor(alive, device=next(iter(stack.params.values())).device)
    base.eval()
    width = max([b.x.shape[-1] for _, b in batches[:1]] + list(cfg.filters) + [cfg.hidden or 0])
    with torch.no_grad():
        for _, b in batches:
            hb = _host_batch(b)
            per = b.x.shape[0] * b.x.shape[1] * width * cfg.K
            chunk = max(1, EVAL_ENTRIES // max(per, 1))
            for s0 in range(0, len(alive), chunk):
                sel = idx[s0:s0 + chunk]
                p = {k: v[sel] for k, v in stack.params.items()}
                h = {k: v[sel] for k, v in stack.hyper.items()}
                out, pools = vmap(fwd, in_dims=(0, 0, None, None, None, None))(
                    p, h, b.x, b.A, b.mask, b.gt)
                out = out.cpu()  # one transfer per batch and chunk of members
                pools = [tuple(t.cpu() for t in layer) for layer in pools]
                for j in range(len(sel)):
                    res = [PoolResult(None, Graph(hb.A, pools[ly][3][j]), pools[ly][0][j],
                                      pools[ly][2][j], pools[ly][1][j], None)
                           for ly in range(n_pools)]
                    per_member[s0 + j].append((hb, NetOutput(out[j], res)))
    return per_member


def evaluate_members(stack: MemberStack, alive: list[int], batches, cfg: TrialConfig,
                     loo: bool = False) -> list[dict]:
    """`train.evaluate` records of the members `alive` (indices into the stack) on `batches`."""
    if loo:  # leave-one-out attention needs the model itself: materialise each member
        return [evaluate(stack.materialise(i), batches, stack.members[i].cfg, loo=True)
                for i in alive]
    outs = _eval_forward(stack, alive, batches, cfg)
    return [summarize(o, stack.members[i].cfg, stack.regression) for i, o in zip(alive, outs)]


Outcome = tuple[list[dict], list[dict]] | str  # (records, curves) of a member, or its error


def run_members(members: list[Member], splits: dict[str, GraphSet],
                device: torch.device) -> list[Outcome]:
    """Train and evaluate every member as one batched model; one outcome per member, in order.

    An outcome is (records, curves) as `run_seed` builds them (`train_s` is the pack's
    training wall time / S, validation curves included as in `fit`) or, for a member whose
    training loss became non-finite, the error. On CUDA a pack that runs out of memory is
    split in halves, each run in turn.
    """
    try:
        return _run_members(members, splits, device)
    except torch.cuda.OutOfMemoryError:
        if len(members) == 1:
            raise
    gc.collect()
    torch.cuda.empty_cache()
    half = len(members) // 2
    return (run_members(members[:half], splits, device)
            + run_members(members[half:], splits, device))


def fit_members(stack: MemberStack, train: TrainBatches, cfg: TrialConfig, device: torch.device,
                replay: bool, val=None, every: int = 0) -> tuple[dict[int, str], list[list[dict]]]:
    """Train the stack for cfg.epochs (in place): (failed member -> error, curves per member).

    Validation curves on `val` (eval batches) every `every` epochs and at the last one.
    """
    members, S = stack.members, len(stack)
    step = PackStep(stack, train, cfg, device, replay)
    gens = [torch.Generator().manual_seed(m.seed) for m in members]
    failed: dict[int, str] = {}  # stack index -> error
    curves: list[list[dict]] = [[] for _ in members]
    G = len(train)
    for epoch in range(1, cfg.epochs + 1):
        stack.base.train()
        step.set_lr(lr_at(cfg, epoch))
        perms = torch.stack([torch.randperm(G, generator=g) for g in gens]).to(device)  # (S, G)
        step.total.zero_()
        for s in range(0, G, cfg.batch_size):
            step.run(perms[:, s:s + cfg.batch_size])
        means = (step.total / max(G, 1)).tolist()  # the epoch's one host sync
        for i, mean in enumerate(means):
            if i not in failed and not math.isfinite(mean):
                failed[i] = f"non-finite training loss at epoch {epoch}"
        alive = [i for i in range(S) if i not in failed]
        if not alive:
            break
        if val is not None and (epoch % every == 0 or epoch == cfg.epochs):
            for i, v in zip(alive, evaluate_members(stack, alive, val, cfg)):
                curves[i].append({"seed": members[i].seed, "epoch": epoch,
                                  "train_loss": means[i], "val_accuracy": v["accuracy"],
                                  "val_loss": v["loss"], "val_auc": v["attn_auc_l0"]})
    step.release()
    return failed, curves


def _run_members(members: list[Member], splits: dict[str, GraphSet],
                 device: torch.device) -> list[Outcome]:
    cfg = members[0].cfg  # shapes, recipe and schedule: equal across the pack
    S = len(members)
    in_ch = splits["train"].num_features
    regression = cfg.task == "regression"
    out_ch = 1 if regression else int(max(int(g.y.max()) for g in splits.values()) + 1)
    train = TrainBatches(splits["train"], device)
    stack = MemberStack(members, in_ch, out_ch, device)
    cos_p = [init_cosine(m, cfg.dataset, in_ch) for m in stack.models]
    val = eval_batches(splits["val"], cfg.test_batch_size, device)
    every = cfg.eval_every or max(1, cfg.epochs // 50)

    t0 = time.perf_counter()
    failed, curves = fit_members(stack, train, cfg, device, replays(cfg, device), val, every)
    train_s = (time.perf_counter() - t0) / S  # validation curves included, as in `fit`

    alive = [i for i in range(S) if i not in failed]
    records: list[list[dict]] = [[] for _ in members]
    for split, gs in splits.items():
        if split == "train" or not alive:
            continue
        te = time.perf_counter()
        batches = val if split == "val" else eval_batches(gs, cfg.test_batch_size, device)
        recs = evaluate_members(stack, alive, batches, cfg,
                                loo=cfg.loo_auc and not cfg.pool_layers and split != "val")
        eval_s = (time.perf_counter() - te) / len(alive)
        for i, rec in zip(alive, recs):
            rec.update(seed=members[i].seed, split=split, status="ok", error="",
                       cos_p_init=cos_p[i], train_s=train_s, eval_s=eval_s, device=str(device))
            records[i].append(rec)
    out: list[Outcome] = []
    for i in range(S):
        pool_test_auc(records[i], cfg.dataset)
        for r in records[i]:
            r["peak_rss_mb"] = _peak_rss_mb()
        out.append(failed[i] if i in failed else (records[i], curves[i]))
    return out


def run_seeds_batched(cfg: TrialConfig, splits: dict[str, GraphSet],
                      device: torch.device) -> list[Outcome]:
    """Every seed of one resolved, `eligible` config as one pack (outcomes in seed order)."""
    return run_members([Member(cfg, s) for s in cfg.seeds], splits, device)
