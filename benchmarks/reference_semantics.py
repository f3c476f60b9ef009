"""The authors' model and training loop, written independently of `ablate.models`, on our graphs.

    python benchmarks/reference_semantics.py --seeds 0-29             # its own init per seed
    python benchmarks/reference_semantics.py --seeds 0-4 --matched    # and ours, same init

A dense model with the semantics of the reference (bknyaz/graph_attention_pool,
`chebygin.py` / `train_test.py`, read for facts, not copied): every layer rebuilds
its operator from the batch's adjacency (degrees = column sums of A, plus I for
K = 1; D^-1/2 with eps 1e-5; the Chebyshev operator negated for K > 1), stacks the
terms as [k, f] before one Linear (+ hidden MLP) and ReLU, scales orders >= 1 (or
the K = 1 term) by the degree for SUM aggregation, pads each batch to its own
largest graph and masks after every layer; sum readout; Linear head. Training:
Adam (0.5, 0.999) with L2 1e-4, `MultiStepLR` stepped at the start of every epoch,
MSE on the count, batch 32 in the order of `torch.randperm` with
`Generator().manual_seed(seed)` (what `ablate.trial.setup.shuffler` gives).

Prints, per seed, the accuracy on COLORS TEST-ORIG / LARGE / LARGE-C of this model
from its own initial draw (`torch.manual_seed(seed)`), and with `--matched` also our
`GraphNet` + `fit()` started from the very same weights; then mean, sd and median.
`tests/test_reference_equivalence.py` checks the two agree on small graphs.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import torch
from torch import nn

from ablate.config import TrialConfig, resolve
from ablate.data import GraphSet, load_graphsets
from ablate.models.network import GraphNet
from ablate.trial.fit import scheduler_milestones

TEST_SPLITS = ("test_orig", "test_large", "test_largec")


class RefLayer(nn.Module):
    """One ChebyGIN-family layer as the reference computes it (dense, per batch)."""

    def __init__(self, c_in: int, c_out: int, K: int, sum_agg: bool, hidden: int):
        super().__init__()
        self.K, self.sum_agg = K, sum_agg
        if hidden:
            self.fc = nn.Sequential(nn.Linear(c_in * K, hidden), nn.ReLU(),
                                    nn.Linear(hidden, c_out), nn.ReLU())
        else:
            self.fc = nn.Sequential(nn.Linear(c_in * K, c_out), nn.ReLU())

    def forward(self, x: torch.Tensor, A: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, N, _ = x.shape
        if self.K == 1:
            A = A + torch.eye(N).unsqueeze(0)
        D = A.sum(1)
        Dh = (D + 1e-5) ** -0.5
        L = Dh.view(B, N, 1) * A * Dh.view(B, 1, N)
        if self.K == 1:
            y = torch.bmm(L, x).unsqueeze(2)
            if self.sum_agg:
                y = y * D.view(B, N, 1, 1)
        else:
            L = -L
            terms = [x, torch.bmm(L, x)]
            for _ in range(2, self.K):
                terms.append(2 * torch.bmm(L, terms[-1]) - terms[-2])
            y = torch.stack(terms, 2)  # B, N, K, C
            if self.sum_agg:
                scale = torch.ones(B, N, self.K)
                scale[:, :, 1:] = D.view(B, N, 1)
                y = y * scale.view(B, N, self.K, 1)
        return self.fc(y.reshape(B, N, -1)) * mask.unsqueeze(2)


class RefNet(nn.Module):
    """Graph layers, sum readout, Linear head to one output (a count)."""

    def __init__(self, c_in: int, filters, K: int, sum_agg: bool, hidden: int):
        super().__init__()
        widths = [c_in, *filters]
        self.layers = nn.ModuleList(RefLayer(widths[i], widths[i + 1], K, sum_agg, hidden)
                                    for i in range(len(filters)))
        self.fc = nn.Linear(widths[-1], 1)

    def forward(self, x: torch.Tensor, A: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, A, mask)
        return self.fc(x.sum(1)).squeeze(-1)

    @classmethod
    def like(cls, cfg: TrialConfig, c_in: int) -> RefNet:
        return cls(c_in, cfg.filters, cfg.K, cfg.aggregation == "sum", cfg.hidden)

    def copy_from(self, ours: GraphNet) -> RefNet:
        """Take `ours`'s weights (a global-pool GraphNet of the same shape)."""
        with torch.no_grad():
            for mine, theirs in zip(ours.layers, self.layers):
                src = [m for m in mine.mlp if isinstance(m, nn.Linear)]
                dst = [m for m in theirs.fc if isinstance(m, nn.Linear)]
                for a, b in zip(src, dst):
                    b.weight.copy_(a.weight)
                    b.bias.copy_(a.bias)
            self.fc.weight.copy_(ours.head.weight)
            self.fc.bias.copy_(ours.head.bias)
        return self


class RefAttnNet(RefNet):
    """RefNet with the reference's attention pooling before layer `pool_layer` (>= 1): scores
    p^T x_prev on the previous layer's input (`fc_prev`) clamped to +-60, alpha = exp(score)
    over the graph's nodes / (sum + 1e-7), x <- alpha x, keep alpha > threshold (A masked to the kept nodes),
    and for supervision KL(alpha_GT || alpha) per node summed over nodes / N, mean over
    graphs, times kl_weight (`attention_pooling.py`)."""

    def __init__(self, c_in: int, filters, K: int, sum_agg: bool, hidden: int,
                 pool_layer: int, threshold: float, kl_weight: float):
        super().__init__(c_in, filters, K, sum_agg, hidden)
        if pool_layer < 1:
            raise ValueError("the fc_prev scorer needs a previous layer: pool_layer >= 1")
        widths = [c_in, *filters]
        self.pool_layer, self.threshold, self.kl_weight = pool_layer, threshold, kl_weight
        self.proj = nn.Linear(widths[pool_layer - 1], 1, bias=False)
        with torch.no_grad():
            self.proj.weight.copy_(torch.randn(self.proj.weight.shape))  # p ~ N(0, 1)

    def forward(self, x, A, mask, gt=None):
        """(output (B,), KL term or None, alpha (B, N) of the pooling layer)."""
        B, N, _ = x.shape
        prev, kl, alpha = x, None, None
        for i, layer in enumerate(self.layers):
            if i == self.pool_layer:
                e = torch.exp(self.proj(prev).view(B, N).clamp(-60, 60)) * mask
                alpha = e / (e.sum(1, keepdim=True) + 1e-7)
                if gt is not None and self.training:
                    per_node = (torch.xlogy(gt, gt) - gt * torch.log(alpha + 1e-14)) * mask
                    kl = self.kl_weight * (per_node.sum(1) / mask.sum(1)).mean()
                x = x * alpha.unsqueeze(-1)
                mask = mask * (alpha > self.threshold)
                A = A * mask.unsqueeze(2) * mask.unsqueeze(1)
            prev = x
            x = layer(x, A, mask)
        return self.fc(x.sum(1)).squeeze(-1), kl, alpha

    @classmethod
    def like(cls, cfg: TrialConfig, c_in: int) -> RefAttnNet:
        if cfg.scorer != "fc" or cfg.scorer_input != "prev" or len(cfg.pool_layers) != 1:
            raise ValueError("RefAttnNet covers one fc_prev pooling layer")
        return cls(c_in, cfg.filters, cfg.K, cfg.aggregation == "sum", cfg.hidden,
                   cfg.pool_layers[0], cfg.threshold, cfg.kl_weight)

    def copy_from(self, ours: GraphNet) -> RefAttnNet:
        super().copy_from(ours)
        with torch.no_grad():
            self.proj.weight.copy_(ours.pools[str(self.pool_layer)].p)
        return self


def ref_batch(gs: GraphSet, idx: np.ndarray):
    """The reference's collate: x, A, mask, y padded to the largest graph of this batch."""
    N = int(gs.num_nodes[idx].max())
    C = gs.num_features
    x, A, m = torch.zeros(len(idx), N, C), torch.zeros(len(idx), N, N), torch.zeros(len(idx), N)
    for b, i in enumerate(idx):
        n0, n1 = gs.node_ptr[i], gs.node_ptr[i + 1]
        e0, e1 = gs.edge_ptr[i], gs.edge_ptr[i + 1]
        x[b, : n1 - n0] = torch.from_numpy(gs.x[n0:n1])
        ei = gs.edge_index[:, e0:e1]
        A[b, ei[0], ei[1]] = 1
        m[b, : n1 - n0] = 1
    return x, A, m, torch.from_numpy(np.asarray(gs.y[idx])).float()


def ref_train(model: RefNet, gs: GraphSet, cfg: TrialConfig, seed: int) -> float:
    """The reference's loop for cfg.epochs; returns the last epoch's mean batch loss."""
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                           betas=(0.5, 0.999))
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, scheduler_milestones(cfg), gamma=0.1)
    gen = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    with warnings.catch_warnings():  # stepping the scheduler first is the reference's order
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
        for _ in range(cfg.epochs):
            sched.step()
            model.train()
            losses = []
            for idx in torch.randperm(len(gs), generator=gen).split(cfg.batch_size):
                x, A, m, y = ref_batch(gs, idx.numpy())
                opt.zero_grad()
                loss = ((model(x, A, m) - y) ** 2).mean()
                loss.backward()
                opt.step()
                losses.append(loss.item())
    return statistics.fmean(losses)


def ref_accuracy(model, gs: GraphSet, batch: int = 100) -> float:
    """% of graphs whose rounded output equals the count; `model(x, A, mask)` in eval mode."""
    right = 0
    with torch.no_grad():
        for s in range(0, len(gs), batch):
            x, A, m, y = ref_batch(gs, np.arange(s, min(s + batch, len(gs))))
            right += int((model(x, A, m).round() == y).sum())
    return 100.0 * right / len(gs)


def _ours(model: GraphNet):
    from ablate.models.layers import Graph

    model.eval()
    return lambda x, A, m: model(x, Graph(A, m.bool())).out


def _seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = map(int, text.split("-"))
        return list(range(lo, hi + 1))
    return [int(s) for s in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0-4", help="'0-29' or '0,3,7'")
    ap.add_argument("--matched", action="store_true",
                    help="also train our GraphNet from the same initial weights")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from ablate.trial.batches import TrainBatches
    from ablate.trial.fit import fit

    cfg = resolve(TrialConfig(dataset="colors", backbone="chebygin_ref", pool_layers=(),
                              device="cpu"))
    splits = load_graphsets("colors", **cfg.data_kwargs)
    c_in = splits["train"].num_features
    print(f"COLORS ChebyGIN (reference script) global pool: K={cfg.K} {cfg.aggregation} "
          f"hidden={cfg.hidden} {cfg.epochs} epochs, decay {cfg.lr_decay_epochs}")
    cols = ["seed", "ref ORIG", "ref LARGE", "ref LARGE-C", "s"]
    if args.matched:
        cols[4:4] = ["ours ORIG", "ours LARGE", "ours LARGE-C"]
    print(" | ".join(cols))
    table: list[list[float]] = []
    for seed in _seeds(args.seeds):
        t0 = time.perf_counter()
        torch.manual_seed(seed)
        ref = RefNet.like(cfg, c_in)
        ours = GraphNet(cfg, c_in, 1).eval() if args.matched else None
        if ours is not None:  # the reference model takes ours's initial weights
            ref.copy_from(ours)
        ref_train(ref, splits["train"], cfg, seed)
        ref.eval()
        row = [ref_accuracy(ref, splits[s]) for s in TEST_SPLITS]
        if ours is not None:
            fit(ours, cfg, TrainBatches(splits["train"], torch.device("cpu")), seed)
            row += [ref_accuracy(_ours(ours), splits[s]) for s in TEST_SPLITS]
        table.append(row)
        print(f"{seed} | " + " | ".join(f"{v:.1f}" for v in row)
              + f" | {time.perf_counter() - t0:.0f}")
    arr = np.array(table)
    for name, fn in (("mean", np.mean), ("sd", lambda a, axis: np.std(a, axis=axis, ddof=1)),
                     ("median", np.median)):
        if name == "sd" and len(arr) < 2:
            continue
        print(f"{name} | " + " | ".join(f"{v:.1f}" for v in fn(arr, axis=0)))


if __name__ == "__main__":
    main()
