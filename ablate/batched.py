"""Several seeds of one configuration trained as one batched model (`torch.func`).

The models are tiny, so a training step costs per-op overhead rather than
arithmetic; stacking the S seeds of a trial along a leading dimension and
running one `vmap`-ed forward and one backward per batch makes S seeds cost
little more than one. Each seed keeps everything `run_seed` gives it:

- its initialisation (`torch.manual_seed(seed); GraphNet(...)`, so `cos_p_init`
  is unchanged), stacked with `torch.func.stack_module_state`;
- its shuffling (`torch.Generator().manual_seed(seed)`, one permutation per epoch);
- its loss (task loss + KL term) and gradient: `vmap` keeps seeds independent;
- its Adam state: Adam with L2 weight decay and the step LR schedule is
  elementwise, so one optimiser over the (S, ...) stacked tensors is S optimisers.

Per step the S batches (same sizes, different graphs) are padded to a common
node count; padding is masked, so results match per-seed training up to float
rounding. A seed whose epoch loss is not finite is recorded as `status="nan"`
(as `run_trial_full` does for `NaNLoss`) and the others go on. Validation curves
and the final evaluation run one `vmap`-ed forward for all seeds over the shared
evaluation batches and summarise each seed with `train.summarize`, giving the
records of `run_seed`.

Not batched (the sequential path is used): one seed, weak supervision (model B
first), Gao & Ji selection (PyG TopKPooling has data-dependent shapes), dropout
(per-seed random masks could not reproduce the sequential RNG stream).
"""

from __future__ import annotations

import copy
import math
import time

import numpy as np
import torch
from torch import Tensor
from torch.func import functional_call, stack_module_state, vmap

from ablate.batching import DenseBatch, TrainBatches, collate, eval_batches
from ablate.config import TrialConfig
from ablate.data import GraphSet
from ablate.models.layers import Graph
from ablate.models.network import GraphNet, NetOutput
from ablate.models.pooling import PoolResult, cosine
from ablate.train import _peak_rss_mb, evaluate, make_optimizer, optimal_projection, summarize, task_loss

EVAL_ENTRIES = 50_000_000  # feature entries (seeds x graphs x nodes x channels) per vmapped eval call


def eligible(cfg: TrialConfig, device: torch.device) -> bool:
    """Whether `cfg` (resolved) trains its seeds as one batched model."""
    return (len(cfg.seeds) >= 2 and cfg.supervision in ("unsup", "sup", "gt")
            and cfg.selection != "gao" and cfg.dropout == 0
            and device.type in ("cpu", "cuda"))


def _gather(train: TrainBatches, idx: Tensor) -> DenseBatch:
    """Graphs idx (S, B) of every seed, padded to their common largest node count: (S, B, ...)."""
    S, B = idx.shape
    flat = idx.reshape(-1)
    if train.dense is not None:
        d = train.dense
        n = int(d.n_nodes[flat].max())
        b = DenseBatch(d.x[:, :n][flat], d.A[:, :n, :n][flat], d.mask[:, :n][flat],
                       d.gt[:, :n][flat], d.y[flat], d.n_nodes[flat])
    else:
        n = int(train.gs.num_nodes[flat.numpy()].max())
        b = collate(train.gs, flat.numpy(), n_max=n).to(train.device)
    return DenseBatch(*(t.reshape(S, B, *t.shape[1:]) for t in
                        (b.x, b.A, b.mask, b.gt, b.y, b.n_nodes)))


class SeedStack:
    """S seeds of one config as stacked parameters, with a template `GraphNet` to call them.

    Args:
        cfg: resolved config; seeds: the seeds, in order; in_ch, out_ch: model sizes.
    """

    def __init__(self, cfg: TrialConfig, seeds: list[int], in_ch: int, out_ch: int,
                 device: torch.device):
        self.cfg, self.seeds = cfg, list(seeds)
        models = []
        for seed in self.seeds:
            torch.manual_seed(seed)
            models.append(GraphNet(cfg, in_ch, out_ch).to(device))
        self.models = models  # one materialised model per seed (evaluation fallback)
        self.base = copy.deepcopy(models[0])  # template for functional_call
        params, _ = stack_module_state(models)  # GraphNet has no buffers
        self.params = {k: v.detach() for k, v in params.items()}  # (S, ...) each
        self.regression = models[0].regression

    def __len__(self) -> int:
        return len(self.seeds)

    def materialise(self, i: int) -> GraphNet:
        """Seed i's `GraphNet` holding its current parameters."""
        m = self.models[i]
        with torch.no_grad():
            for k, p in m.named_parameters():
                p.copy_(self.params[k][i])
        return m


def _trainable(stack: SeedStack, train: TrainBatches, cfg: TrialConfig) -> list[str]:
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


def _make_step(stack: SeedStack, cfg: TrialConfig):
    """vmap of each seed's loss over stacked params and per-seed batches: (S,) losses.

    `losses.sum().backward()` then gives every seed its own gradient (seeds share no
    parameters), with plain autograd (torch.func.grad would import TorchDynamo, ~2 s).
    """
    base, regression, use_gt = stack.base, stack.regression, cfg.supervision != "unsup"

    def loss_fn(train_p: dict, fixed_p: dict, x, A, mask, gt, y):
        o = functional_call(base, {**train_p, **fixed_p}, (x, Graph(A, mask),
                                                           gt if use_gt else None))
        return task_loss(o.out, y, regression) + o.reg

    return vmap(loss_fn)


def _eval_forward(stack: SeedStack, alive: list[int], batches, cfg: TrialConfig):
    """Per seed (in `alive` order) a list of (batch, NetOutput) over the shared `batches`."""
    base = stack.base
    n_pools = len(cfg.pool_layers)

    def fwd(p: dict, x, A, mask, gt):
        o = functional_call(base, p, (x, Graph(A, mask), gt))
        pools = tuple((r.alpha, r.gt, r.mask_before, r.graph.mask) for r in o.pools)
        return o.out, pools

    per_seed: list[list[tuple[DenseBatch, NetOutput]]] = [[] for _ in alive]
    idx = torch.tensor(alive, device=next(iter(stack.params.values())).device)
    base.eval()
    width = max([b.x.shape[-1] for _, b in batches[:1]] + list(cfg.filters) + [cfg.hidden or 0])
    with torch.no_grad():
        for _, b in batches:
            per = b.x.shape[0] * b.x.shape[1] * width * cfg.K
            chunk = max(1, EVAL_ENTRIES // max(per, 1))
            for s0 in range(0, len(alive), chunk):
                sel = idx[s0:s0 + chunk]
                p = {k: v[sel] for k, v in stack.params.items()}
                out, pools = vmap(fwd, in_dims=(0, None, None, None, None))(
                    p, b.x, b.A, b.mask, b.gt)
                for j in range(len(sel)):
                    res = [PoolResult(None, Graph(b.A, pools[ly][3][j]), pools[ly][0][j],
                                      pools[ly][2][j], pools[ly][1][j], None)
                           for ly in range(n_pools)]
                    per_seed[s0 + j].append((b, NetOutput(out[j], res)))
    return per_seed


def evaluate_seeds(stack: SeedStack, alive: list[int], batches, cfg: TrialConfig,
                   loo: bool = False) -> list[dict]:
    """`train.evaluate` records of the seeds `alive` (indices into the stack) on `batches`."""
    if loo:  # leave-one-out attention needs the model itself: materialise each seed
        return [evaluate(stack.materialise(i), batches, cfg, loo=True) for i in alive]
    outs = _eval_forward(stack, alive, batches, cfg)
    return [summarize(o, cfg, stack.regression) for o in outs]


def run_seeds_batched(cfg: TrialConfig, splits: dict[str, GraphSet],
                      device: torch.device) -> list[tuple[list[dict], list[dict]] | str]:
    """Train and evaluate every seed of `cfg` (resolved, `eligible`) as one batched model.

    Returns per seed of cfg.seeds (in order) either (records, curves) as `run_seed`
    builds them (`train_s` is the batched training wall time / S, validation curves
    included as in `fit`) or, for a seed whose training loss became non-finite, the error.
    """
    seeds = list(cfg.seeds)
    S = len(seeds)
    in_ch = splits["train"].num_features
    regression = cfg.task == "regression"
    out_ch = 1 if regression else int(max(int(g.y.max()) for g in splits.values()) + 1)
    train = TrainBatches(splits["train"], device)
    stack = SeedStack(cfg, seeds, in_ch, out_ch, device)
    p_opt = optimal_projection(cfg.dataset, in_ch)
    cos_p = []
    for m in stack.models:
        p_init = m.first_projection()
        cos_p.append(cosine(p_init, p_opt) if p_init is not None and p_opt is not None
                     and p_init.numel() == p_opt.numel() else math.nan)
    val = eval_batches(splits["val"], cfg.test_batch_size, device)
    every = cfg.eval_every or max(1, cfg.epochs // 50)

    t0 = time.perf_counter()
    names = _trainable(stack, train, cfg)
    train_p = {k: stack.params[k].requires_grad_() for k in names}
    fixed_p = {k: v for k, v in stack.params.items() if k not in train_p}
    opt, sched = make_optimizer(list(train_p.values()), cfg)
    step = _make_step(stack, cfg)
    gens = [torch.Generator().manual_seed(seed) for seed in seeds]
    failed: dict[int, str] = {}  # stack index -> error
    curves: list[list[dict]] = [[] for _ in seeds]
    eval_s = 0.0
    for epoch in range(1, cfg.epochs + 1):
        stack.base.train()
        perms = torch.stack([torch.randperm(len(train), generator=g) for g in gens])  # (S, G)
        total = torch.zeros(S, device=device)
        n = 0
        for s in range(0, perms.shape[1], cfg.batch_size):
            idx = perms[:, s:s + cfg.batch_size]
            b = _gather(train, idx.to(device) if train.dense is not None else idx)
            loss = step(train_p, fixed_p, b.x, b.A, b.mask, b.gt, b.y)  # (S,)
            opt.zero_grad(set_to_none=True)
            loss.sum().backward()
            opt.step()
            total += loss.detach() * idx.shape[1]
            n += idx.shape[1]
        sched.step()
        means = [float(t) / max(n, 1) for t in total]
        for i, mean in enumerate(means):
            if i not in failed and not math.isfinite(mean):
                failed[i] = f"non-finite training loss at epoch {epoch}"
        alive = [i for i in range(S) if i not in failed]
        if not alive:
            break
        if epoch % every == 0 or epoch == cfg.epochs:
            te = time.perf_counter()
            for i, v in zip(alive, evaluate_seeds(stack, alive, val, cfg)):
                curves[i].append({"seed": seeds[i], "epoch": epoch, "train_loss": means[i],
                                  "val_accuracy": v["accuracy"], "val_loss": v["loss"],
                                  "val_auc": v["attn_auc_l0"]})
            eval_s += time.perf_counter() - te
    for p in train_p.values():
        p.grad = None
    train_s = (time.perf_counter() - t0) / S  # validation curves included, as in `fit`

    alive = [i for i in range(S) if i not in failed]
    records: list[list[dict]] = [[] for _ in seeds]
    for split, gs in splits.items():
        if split == "train" or not alive:
            continue
        te = time.perf_counter()
        batches = val if split == "val" else eval_batches(gs, cfg.test_batch_size, device)
        recs = evaluate_seeds(stack, alive, batches, cfg,
                              loo=cfg.loo_auc and not cfg.pool_layers and split != "val")
        eval_s = (time.perf_counter() - te) / len(alive)
        for i, rec in zip(alive, recs):
            rec.update(seed=seeds[i], split=split, status="ok", error="", cos_p_init=cos_p[i],
                       train_s=train_s, eval_s=eval_s, device=str(device))
            records[i].append(rec)
    out: list[tuple[list[dict], list[dict]] | str] = []
    for i in range(S):
        for r in records[i]:
            r["peak_rss_mb"] = _peak_rss_mb()
        out.append(failed[i] if i in failed else (records[i], curves[i]))
    return out
