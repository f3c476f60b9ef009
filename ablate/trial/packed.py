"""A pack of members (configuration, seed) trained as one batched model (`torch.func`).

The models are tiny, so a step costs kernel launches and per-op overhead rather
than arithmetic. Stacking the S members of a pack along a leading dimension and
running one `vmap`-ed forward and one backward per batch makes S members cost
little more than one. A *member* is one seed of one resolved configuration; the
members of a pack share every shape and differ only in values that stack
(`PACKABLE`): the seed, the initialisation of p (`init_dist`, `init_scale`) and
the per-member tensors `threshold`, `ratio`, `kl_weight` fed to the forward.
Each member keeps everything `ablate.trial.graph.run_seed` gives it:

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
`vmap`-ed forward for all members over the shared evaluation batches and score every
member on the device (`ablate.trial.pack_eval`: the fields of `ablate.trial.evaluate.summarize`,
one transfer per evaluation; the pooled test AUC from device-side attention, one more).
On CUDA a pack that does not fit in memory is split in halves and run in turn.

Weak supervision packs in three stages (`_weak_member_targets`): the model B of every
member (`ablate.config.model_b_config`, seed + `MODEL_B_SEED`) trains as one pack, the
leave-one-out alpha_WS of all of them is computed together, and each member's row becomes its
own targets (`TrainBatches.set_member_gt`, gathered per member by the step); then model A
trains as a pack. The seeds, initialisations, batch orders and losses are those of
`run_seed`, so each member gets its seed-by-seed numbers (`tests/test_weak_pack.py`).

Dropout packs too: its masks are counter-based (`ablate.models.dropout`), a pure function of
(member seed, optimisation step, layer, element) hashed on the device, so each member draws
the masks `run_seed` draws for that seed, in any pack, eager, replayed or captured.

Not packed (`ablate.trial.graph.run_seed` trains seed by seed):
Gao & Ji selection (PyG TopKPooling has data-dependent shapes), and a user's dense layer
whose forward does not run under vmap (`ablate.models.backbones.unpackable` says why).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import numpy as np
import torch
from torch.func import functional_call, vmap

from ablate.config import TrialConfig, axes
from ablate.data import GraphSet
from ablate.errors import ConfigError, DeviceMemoryExhausted
from ablate.models.backbones import unpackable
from ablate.models.layers import Graph
from ablate.trial.batches import DenseBatch, TrainBatches, each_batch, eval_batches, release_free_heap
from ablate.trial.epochs import report_epoch
from ablate.trial.evaluate import loo_batch, loo_plan
from ablate.trial.fit import lr_at
from ablate.trial.kind import stable_hash
from ablate.trial.local_loo import member_budget
from ablate.trial.members import STACKED, Member, MemberStack
from ablate.trial.memory import REMEDY, in_smaller_pieces, is_out_of_memory, release_cached
from ablate.trial.pack_eval import (
    LooAlpha,
    PackPool,
    PackResult,
    pool_test_auc_pack,
    pooled_splits,
    summarize_pack,
)
from ablate.trial.pack_loo import (
    CHUNK_ENTRIES,
    leave_one_out_attention_members,
    leave_one_out_members,
)
from ablate.trial.pack_step import PackStep
from ablate.trial.provenance import peak_rss_mb
from ablate.trial.setup import init_cosines, model_sizes, shuffler
from ablate.trial.weak import MODEL_B_SEED, model_b_config, weak_attention, weak_floor

EVAL_ENTRIES = 50_000_000  # feature entries (members x graphs x nodes x channels) per vmapped eval
CPU_EVAL_ENTRIES = 1 << 18  # feature entries of one member per eval forward on a CPU (cache-sized)
CPU_EVAL_GRAPHS = 128  # but at least these graphs per eval forward (per-op overhead)


PACKABLE = ("seeds", "init_dist", "init_scale", *STACKED)  # axes members of one pack may differ in


def eligible(cfg: TrialConfig) -> bool:
    """Whether `cfg` (resolved) can train in a pack (fixed shapes; a user's layer whose forward
    runs under vmap, `ablate.models.backbones.unpackable`)."""
    return (cfg.supervision in ("unsup", "sup", "gt", "weak") and cfg.selection != "gao"
            and unpackable(cfg.backbone) is None)


def pack_key(cfg: TrialConfig) -> str | None:
    """Configurations with equal keys can share a pack: they differ only in `PACKABLE` axes;
    None for a configuration that trains seed by seed (not `eligible`)."""
    if not eligible(cfg):
        return None
    a = axes(cfg)
    for k in (*PACKABLE, "study"):
        a.pop(k, None)
    return stable_hash(a)


def check_pack(cfgs: list[TrialConfig]) -> None:
    """Refuse, in one line naming the first differing axis, configurations that cannot share
    a pack (an axis outside `PACKABLE` differs, or one cannot pack at all)."""
    for c in cfgs:
        if unpackable(c.backbone):
            raise ConfigError(f"backbone {c.backbone} cannot train in a pack: "
                              f"{unpackable(c.backbone)}; it runs seed by seed")
        if not eligible(c):
            raise ConfigError(f"selection={c.selection} cannot train in a pack (data-dependent "
                              "shapes); run it seed by seed")
    first = axes(cfgs[0])
    for c in cfgs[1:]:
        other = axes(c)
        for k in first:
            if k not in (*PACKABLE, "study", "step", "device") and first[k] != other[k]:
                raise ConfigError(f"members of a pack must share every shape; they differ in "
                                  f"{k} ({first[k]!r} vs {other[k]!r})")


def replays(cfg: TrialConfig, device: torch.device) -> bool:
    """Whether the fixed-shape step is used: step=replay, or step=auto on CUDA."""
    return cfg.step == "replay" or (cfg.step == "auto" and device.type == "cuda")


def _eval_forward(stack: MemberStack, alive: list[int], batches, cfg: TrialConfig,
                  shrink: int = 1) -> Iterator[tuple[DenseBatch, torch.Tensor, list[PackPool]]]:
    """Per eval batch (batch, out (S, B, ...), pools): one vmapped forward of the members
    `alive` (in that order; in chunks of members bounded by `EVAL_ENTRIES`), on the device.
    `pools` holds per pooling layer (alpha, gt, mask_before, mask_after), each (S, B, N).

    On a CPU each batch runs in slices of graphs (`eval_graphs`), so that a forward's
    features stay in cache; every graph is computed alone, so the outputs are those of
    the whole batch. `shrink` > 1 (a retry after running out of memory) divides the
    member chunks' budget and the graphs per forward by it."""
    base = stack.base

    def fwd(p: dict, hyper: dict, x, A, mask, gt):
        o = functional_call(base, p, (x, Graph(A, mask), gt), {"hyper": hyper})
        pools = tuple((r.alpha, r.gt, r.mask_before, r.graph.mask) for r in o.pools)
        return o.out, pools

    # no blocking host-to-device copy (it would synchronise the stream)
    idx = torch.tensor(alive, device="cpu").to(next(iter(stack.params.values())).device,
                                               non_blocking=True)
    base.eval()
    width = max([stack.in_ch, *cfg.filters, cfg.hidden or 0])  # no batch read for it
    for b in each_batch(batches):
        B, N = b.x.shape[0], b.x.shape[1]
        # members per forward from the whole batch (how members group changes rounding)
        chunk = max(1, EVAL_ENTRIES // shrink // max(B * N * width * cfg.K, 1))
        step = max(1, eval_graphs(N * width, B, b.x.device) // shrink)
        chunks = [idx[s0:s0 + chunk] for s0 in range(0, len(alive), chunk)]
        # A lone member where a chunk could hold two runs as two copies of itself: vmap over
        # one member takes the unbatched kernels, which round differently from the batched
        # ones the same member gets beside others, and its numbers must not depend on its pack.
        lone = [chunk >= 2 and len(sel) == 1 for sel in chunks]
        members = [({k: v[sel] for k, v in stack.params.items()},
                    {k: v[sel] for k, v in stack.hyper.items()})
                   for sel in (c.repeat(2) if one else c for c, one in zip(chunks, lone))]
        rows = []  # per slice of graphs: the member chunks joined along members (dim 0)
        for g0 in range(0, B, step):
            g = slice(g0, g0 + step)
            parts = [vmap(fwd, in_dims=(0, 0, None, None, None, None))(
                p, h, b.x[g], b.A[g], b.mask[g], b.gt[g]) for p, h in members]
            rows.append(_cat([_first_member(part) if one else part
                              for part, one in zip(parts, lone)], 0))
        out, pools = _cat(rows, 1)  # slices joined along graphs (dim 1)
        yield b, out, list(pools)
        del b, out, pools, rows, parts  # before the next batch is read


def eval_graphs(per_graph: int, B: int, device: torch.device) -> int:
    """Graphs per vmapped eval forward: all B on CUDA (fewest launches); on a CPU as many as
    keep one member's features within `CPU_EVAL_ENTRIES` (a pure function of the graph
    shape, never of the members, so a member's numbers do not depend on its pack)."""
    if device.type == "cuda":
        return B
    return min(B, max(CPU_EVAL_GRAPHS, CPU_EVAL_ENTRIES // max(per_graph, 1)))


def _first_member(part: tuple) -> tuple:
    """(out, pools) of a forward's first member only."""
    out, pools = part
    return out[:1], tuple(tuple(t[:1] for t in layer) for layer in pools)


def _cat(parts: list, dim: int) -> tuple[torch.Tensor, list]:
    """(out, pools) forward results joined along `dim` (the one part itself when alone)."""
    if len(parts) == 1:
        return parts[0]
    out = torch.cat([o for o, _ in parts], dim)
    pools = [tuple(torch.cat(t, dim) for t in zip(*layer)) for layer in zip(*(q for _, q in parts))]
    return out, pools


def _loo_alpha(stack: MemberStack, alive: list[int], cfg: TrialConfig, shrink: int = 1
               ) -> LooAlpha:
    """Leave-one-out attention alpha_WS (S_alive, B, N) of the global-pool members `alive`, all
    together (`ablate.trial.pack_loo`), as `evaluate(..., loo=True)` scores one model; its
    chunk budgets divided by `shrink` (a retry after running out of memory)."""
    target, floor = cfg.weak_target, weak_floor(cfg)
    device = next(iter(stack.params.values())).device
    chunks, members = CHUNK_ENTRIES // shrink, member_budget(device) // shrink
    return lambda b: (weak_attention(leave_one_out_members(stack, alive, b, target, chunks,
                                                           members), b.mask, floor)
                      if loo_batch(b) else None)  # None: a batch of graphs it leaves out


@torch.no_grad()
def evaluate_members(stack: MemberStack, alive: list[int], batches, cfg: TrialConfig,
                     loo: bool = False, fields: str = "all") -> PackResult:
    """`evaluate` of the members `alive` (indices into the stack) on `batches`, all at once on
    the device (`ablate.trial.pack_eval.summarize_pack`): host records in `alive` order, one
    transfer, and the device-side attention for `pool_test_auc_pack`. `loo`: leave-one-out
    attention of global-pool models; fields="curve": only what a validation curve reads.
    Out of device memory, the evaluation is retried in smaller chunks (`in_smaller_pieces`);
    the members' parameters are untouched, so nothing is retrained."""
    def run(shrink: int) -> PackResult:
        return summarize_pack(_eval_forward(stack, alive, batches, cfg, shrink),
                              len(cfg.pool_layers), stack.regression,
                              _loo_alpha(stack, alive, cfg, shrink) if loo else None, fields)

    return in_smaller_pieces(run, "evaluation", next(iter(stack.params.values())).device)


Outcome = tuple[list[dict], list[dict]] | str  # (records, curves) of a member, or its error


def run_members(members: list[Member], splits: dict[str, GraphSet],
                device: torch.device) -> list[Outcome]:
    """Train and evaluate every member as one batched model; one outcome per member, in order.

    An outcome is (records, curves) as `run_seed` builds them (`train_s` is the pack's
    training wall time / S, validation curves included as in `fit`) or, for a member whose
    training loss became non-finite, the error. A pack whose training runs out of device
    memory (evaluation and leave-one-out retry in smaller chunks themselves, and never reach
    here as out-of-memory) is split in halves, each trained in turn; one member that does not
    fit raises `DeviceMemoryExhausted`.
    """
    check_pack(list({id(m.cfg): m.cfg for m in members}.values()))
    try:
        return _run_members(members, splits, device)
    except Exception as e:  # noqa: BLE001 - only out-of-memory splits the pack
        if not is_out_of_memory(e):
            raise
        if len(members) == 1:
            raise DeviceMemoryExhausted(f"training one member ran out of device memory "
                                        f"({type(e).__name__}): {REMEDY}") from e
    release_cached(device)
    half = len(members) // 2
    return (run_members(members[:half], splits, device)
            + run_members(members[half:], splits, device))


def fit_members(stack: MemberStack, train: TrainBatches, cfg: TrialConfig, device: torch.device,
                replay: bool, val=None, every: int = 0, failed: dict[int, str] | None = None
                ) -> tuple[dict[int, str], list[list[dict]]]:
    """Train the stack for cfg.epochs (in place): (failed member -> error, curves per member).

    Validation curves on `val` (eval batches) every `every` epochs and at the last one.
    `failed` names members failed before (weak supervision: their model B): they train
    along, unrecorded, and keep their error.
    """
    members, S = stack.members, len(stack)
    step = PackStep(stack, train, cfg, device, replay)
    gens = [shuffler(m.seed) for m in members]
    failed = dict(failed or {})  # stack index -> error
    curves: list[list[dict]] = [[] for _ in members]
    G = len(train)
    report_epoch(0, cfg.epochs)
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
        report_epoch(epoch, cfg.epochs)
        if val is not None and (epoch % every == 0 or epoch == cfg.epochs):
            # one transfer per validation: accuracy, loss and layer-0 AUC of every member
            for i, v in zip(alive, evaluate_members(stack, alive, val, cfg, fields="curve").records):
                curves[i].append({"seed": members[i].seed, "epoch": epoch,
                                  "train_loss": means[i], "val_accuracy": v["accuracy"],
                                  "val_loss": v["loss"], "val_auc": v["attn_auc_l0"]})
    step.release()
    return failed, curves


def _weak_member_targets(members: list[Member], splits: dict[str, GraphSet],
                         train: TrainBatches, device: torch.device, in_ch: int,
                         out_ch: int) -> dict[int, str]:
    """Weak supervision for a pack: every member's model B (`config.model_b_config`, seed +
    `weak.MODEL_B_SEED`) trained as one pack without validation curves, the alpha_WS of all
    of them computed together and set as each member's own targets
    (`TrainBatches.set_member_gt`), as `weak.weak_targets` does seed by seed. Returns the
    members whose model B diverged (index -> error): recorded as `nan`, as `run_seed` does."""
    cfg = members[0].cfg
    b_members = [Member(model_b_config(m.cfg), m.seed + MODEL_B_SEED) for m in members]
    cfg_b = b_members[0].cfg  # epochs, schedule, batch size: equal across the pack
    stack = MemberStack(b_members, in_ch, out_ch, device)
    failed, _ = fit_members(stack, train, cfg_b, device, replays(cfg_b, device))
    alive = [i for i in range(len(members)) if i not in failed]
    gt = np.zeros((len(members), len(splits["train"].x)), np.float32)  # failed rows: unused
    if alive:
        gt[alive] = in_smaller_pieces(lambda shrink: leave_one_out_attention_members(
            stack, alive, splits["train"], device, cfg.test_batch_size, cfg.weak_target,
            weak_floor(cfg), CHUNK_ENTRIES // shrink, member_budget(device) // shrink),
            "leave-one-out targets of weak supervision", device)
    train.set_member_gt(gt)
    return failed


def _run_members(members: list[Member], splits: dict[str, GraphSet],
                 device: torch.device) -> list[Outcome]:
    cfg = members[0].cfg  # shapes, recipe and schedule: equal across the pack
    S = len(members)
    in_ch, out_ch = model_sizes(cfg, splits)
    train = TrainBatches(splits["train"], device)
    weak_failed = (_weak_member_targets(members, splits, train, device, in_ch, out_ch)
                   if cfg.supervision == "weak" else {})  # model B first: per-member targets
    if cfg.supervision == "weak":
        release_free_heap()  # every model B and its leave-one-out chunks are gone: their pages too
    stack = MemberStack(members, in_ch, out_ch, device)
    cos_p = init_cosines(stack.models, cfg.dataset, in_ch)  # one transfer for the pack
    val = eval_batches(splits["val"], cfg.test_batch_size, device)
    every = cfg.eval_every or max(1, cfg.epochs // 50)

    t0 = time.perf_counter()
    failed, curves = fit_members(stack, train, cfg, device, replays(cfg, device), val, every,
                                 failed=weak_failed)
    train_s = (time.perf_counter() - t0) / S  # validation curves included, as in `fit`
    del train  # the test splits' evaluation does not need the collated training split

    alive = [i for i in range(S) if i not in failed]
    records: list[list[dict]] = [[] for _ in members]
    pooled: dict[str, PackResult] = {}  # device-side attention of the splits pooled for the AUC
    for split, gs in splits.items():
        if split == "train" or not alive:
            continue
        te = time.perf_counter()
        batches = val if split == "val" else eval_batches(gs, cfg.test_batch_size, device)
        loo, note = loo_plan(cfg, split, gs)
        res = evaluate_members(stack, alive, batches, cfg, loo=loo)
        eval_s = (time.perf_counter() - te) / len(alive)
        if split in pooled_splits(cfg.dataset):
            pooled[split] = res
        for i, rec in zip(alive, res.records):
            rec.update(seed=members[i].seed, split=split, status="ok", error="",
                       cos_p_init=cos_p[i], train_s=train_s, eval_s=eval_s, device=str(device),
                       note=note)
            records[i].append(rec)
    for i, auc in zip(alive, pool_test_auc_pack(pooled, cfg.dataset)):  # one transfer
        for r in records[i]:
            r.update(auc)
    out: list[Outcome] = []
    for i in range(S):
        for r in records[i]:
            r["peak_rss_mb"] = peak_rss_mb()
        out.append(failed[i] if i in failed else (records[i], curves[i]))
    return out


def run_seeds_batched(cfg: TrialConfig, splits: dict[str, GraphSet],
                      device: torch.device) -> list[Outcome]:
    """Every seed of one resolved, `eligible` config as one pack (outcomes in seed order)."""
    return run_members([Member(cfg, s) for s in cfg.seeds], splits, device)
