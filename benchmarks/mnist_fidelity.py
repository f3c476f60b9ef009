"""The MNIST-75SP recipe with the authors' semantics, on the digits stand-in: robustness to noise.

    python benchmarks/mnist_fidelity.py --rows sup,global --seeds 0-9          # authors' semantics
    python benchmarks/mnist_fidelity.py --rows sup --seeds 0-9 --stats nodes   # ... standardised as ours
    python benchmarks/mnist_fidelity.py --ours --rows sup,global --seeds 0-9   # our trial path
    python benchmarks/mnist_fidelity.py --ours --rows sup --data slic=v0.19 noise=nodes   # data of before

Issue 26 item 5 (docs/fidelity.md). `RefMnistNet` is the reference's MNIST-75SP model written
independently of `ablate.models` from the facts of bknyaz/graph_attention_pool
(`chebygin.py`, `attention_pooling.py`, `main.py`, `train_test.py`, `utils.py`; read for facts,
not copied), as `scripts/mnist_75sp.sh` runs it: ChebyNet layers K=4 (mean, no hidden) of 4,
64, 512 filters (`reference_semantics.RefLayer`); for attention, one pooling layer before the
third layer scoring the previous layer's input (fc_prev: p ~ N(0, 1), no bias), alpha =
exp(score) over the graph / (sum + 1e-7), x <- alpha x, keep alpha > 0.01, and for
supervision 100 x mean over graphs of KL(alpha_GT || alpha) / N; max readout; dropout 0.5
only before the final Linear; cross-entropy. Its loop: Adam (0.5, 0.999), L2 1e-4, LR x0.1
at epochs 20 and 25 (`MultiStepLR` stepped at each epoch's start), 30 epochs, batch 32 padded
to its largest graph, and the inputs standardised with the mean / std of the training
features over zero-padded graphs (`--stats padded`, the authors': their statistics come from
training batches zero-padded to the batch's largest graph, 75 nodes on MNIST-75SP; here 75 as
well) or over real nodes (`--stats nodes`, ours). The noisy tests add, after
standardisation, N(0, 1) draws (seed 111, one per node; one per node and intensity channel for
NOISY-C) times 0.4 / 0.6 times the padded intensity std in raw units, whichever `--stats`:
what `ablate.data.mnist` bakes into its noisy splits by default.

The data are those of the recipe (`dataset=digits_sp`, `final: true` as `study=mnist`,
`--data KEY=VALUE` overrides), rebuilt unstandardised by `ablate.data.mnist.raw_splits`.
`--ours` trains our `run_trial` on the same recipe instead (all seeds as one pack; the
global-pool row without leave-one-out attention, which changes no accuracy). Prints per seed
TEST-ORIG / NOISY / NOISY-C accuracy, then mean and sd.
`tests/test_mnist_reference_semantics.py` checks our GraphNet and fit() against `RefMnistNet`
and `ref_fit` with the same initial weights (dropout off).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ablate.data.graphs import GraphSet
from ablate.data.kernel import adjacency

_spec = importlib.util.spec_from_file_location(
    "reference_semantics", Path(__file__).resolve().with_name("reference_semantics.py"))
_ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ref)
RefLayer = _ref.RefLayer

FILTERS, K, POOL_LAYER, THRESHOLD, KL_WEIGHT, DROPOUT = (4, 64, 512), 4, 2, 0.01, 100.0, 0.5
EPOCHS, DECAY, BATCH, TEST_BATCH, N_PAD = 30, (20, 25), 32, 100, 75
NOISE, NOISE_C = 0.4, 0.6
SPLITS = ("test_orig", "test_noisy", "test_noisyc")


class RefMnistNet(nn.Module):
    """The reference's MNIST-75SP ChebyNet, global pool (`attention=None`) or one fc_prev
    attention pooling layer before layer `POOL_LAYER` ("unsup" or "sup")."""

    def __init__(self, c_in: int, attention: str | None, filters=FILTERS, k: int = K,
                 dropout: float = DROPOUT, n_classes: int = 10, threshold: float = THRESHOLD,
                 kl_weight: float = KL_WEIGHT):
        super().__init__()
        widths = [c_in, *filters]
        self.layers = nn.ModuleList(RefLayer(widths[i], widths[i + 1], k, False, 0)
                                    for i in range(len(filters)))
        self.attention, self.threshold, self.kl_weight = attention, threshold, kl_weight
        self.proj = None
        if attention is not None:
            self.proj = nn.Linear(widths[POOL_LAYER - 1], 1, bias=False)
            with torch.no_grad():
                self.proj.weight.copy_(torch.randn(self.proj.weight.shape))  # p ~ N(0, 1)
        self.fc = nn.Sequential(*([nn.Dropout(dropout)] if dropout > 0 else []),
                                nn.Linear(widths[-1], n_classes))

    def forward(self, x, A, mask, gt=None):
        """(logits (B, classes), KL term or None, alpha (B, N) or None)."""
        B, N, _ = x.shape
        prev, kl, alpha = x, None, None
        for i, layer in enumerate(self.layers):
            if i == POOL_LAYER and self.proj is not None:
                e = torch.exp(self.proj(prev).view(B, N).clamp(-60, 60)) * mask
                alpha = e / (e.sum(1, keepdim=True) + 1e-7)
                if gt is not None and self.training and self.attention == "sup":
                    per_node = (torch.xlogy(gt, gt) - gt * torch.log(alpha + 1e-14)) * mask
                    kl = self.kl_weight * (per_node.sum(1) / mask.sum(1)).mean()
                x = x * alpha.unsqueeze(-1)
                mask = mask * (alpha > self.threshold)
                A = A * mask.unsqueeze(2) * mask.unsqueeze(1)
            prev = x
            x = layer(x, A, mask)
        return self.fc(x.max(1)[0]), kl, alpha

    def copy_from(self, ours) -> RefMnistNet:
        """Take the weights of our `GraphNet` of the same recipe."""
        with torch.no_grad():
            for mine, theirs in zip(ours.layers, self.layers):
                theirs.fc[0].weight.copy_(mine.mlp[0].weight)
                theirs.fc[0].bias.copy_(mine.mlp[0].bias)
            head = self.fc[-1]
            head.weight.copy_(ours.head.weight)
            head.bias.copy_(ours.head.bias)
            if self.proj is not None:
                self.proj.weight.copy_(ours.pools[str(POOL_LAYER)].p)
        return self


def standardiser(train: GraphSet, stats: str) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(mean (C,), std (C,), padded intensity std in raw units) of the raw training features:
    over graphs zero-padded to `N_PAD` nodes ("padded", the authors') or real nodes ("nodes")."""
    x = np.asarray(train.x, np.float64)
    slots = N_PAD * len(train)
    pad_mean = x.sum(0) / slots
    pad_std = np.sqrt((x ** 2).sum(0) / slots - pad_mean ** 2)
    if stats == "padded":
        mean, std = pad_mean, pad_std
    else:
        mean, std = x.mean(0), x.std(0)
    return (torch.tensor(mean, dtype=torch.float32), torch.tensor(std, dtype=torch.float32),
            float(pad_std[0]))


def dense_batch(gs: GraphSet, idx: np.ndarray):
    """x (raw), A, mask, y, gt of graphs `idx` padded to their largest graph (the reference's
    collate; A from the centroids with the reference's plain-distance kernel)."""
    n = gs.num_nodes[idx]
    N, C = int(n.max()), gs.num_features
    x, A = torch.zeros(len(idx), N, C), torch.zeros(len(idx), N, N)
    m, gt = torch.zeros(len(idx), N), torch.zeros(len(idx), N)
    for b, i in enumerate(idx):
        n0, n1 = gs.node_ptr[i], gs.node_ptr[i + 1]
        x[b, : n1 - n0] = torch.from_numpy(np.asarray(gs.x[n0:n1]))
        A[b, : n1 - n0, : n1 - n0] = torch.from_numpy(adjacency(np.asarray(gs.coord[n0:n1])))
        m[b, : n1 - n0] = 1
        gt[b, : n1 - n0] = torch.from_numpy(np.asarray(gs.gt[n0:n1]))
    return x, A, m, torch.from_numpy(np.asarray(gs.y[idx])).long(), gt


def ref_fit(model: RefMnistNet, gs: GraphSet, seed: int, mean, std, epochs: int = EPOCHS,
            decay=DECAY, batch: int = BATCH, timing: str = "published") -> float:
    """The reference's loop; `gs` holds raw features, standardised per batch (padding too, as
    theirs). Returns the last epoch's mean batch loss. `decay` lists the drops; `timing` says
    when they apply (`ablate.config.LR_TIMINGS`: published = from the epoch after each)."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4, betas=(0.5, 0.999))
    shift = 1 if timing == "published" else 0
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, [m + shift for m in decay], gamma=0.1)
    gen = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    with warnings.catch_warnings():  # stepping the scheduler first is the reference's order
        warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
        for _ in range(epochs):
            sched.step()
            model.train()
            losses = []
            for idx in torch.randperm(len(gs), generator=gen).split(batch):
                x, A, m, y, gt = dense_batch(gs, idx.numpy())
                out, kl, _ = model((x - mean) / std, A, m, gt)
                loss = nn.functional.cross_entropy(out, y) + (kl if kl is not None else 0.0)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
    return statistics.fmean(losses)


def ref_accuracy(model: RefMnistNet, gs: GraphSet, mean, std, noise: torch.Tensor | None) -> float:
    """% correct in eval mode; `noise` (graphs, N_PAD, 3) in standardised units is added to the
    intensity channels after standardisation, as the reference's test()."""
    model.eval()
    right = 0
    with torch.no_grad():
        for s in range(0, len(gs), TEST_BATCH):
            idx = np.arange(s, min(s + TEST_BATCH, len(gs)))
            x, A, m, y, _ = dense_batch(gs, idx)
            x = (x - mean) / std
            if noise is not None:
                x[:, :, :3] += noise[idx, : x.shape[1]]
            right += int((model(x, A, m)[0].argmax(1) == y).sum())
    return 100.0 * right / len(gs)


def noises(n_graphs: int, pad_std: float, std0: float) -> dict[str, torch.Tensor | None]:
    """The noise of each test split in standardised units: raw size 0.4 / 0.6 x `pad_std`."""
    g = torch.Generator().manual_seed(111)
    one = torch.randn(n_graphs, N_PAD, 1, generator=g).expand(-1, -1, 3)
    per_channel = torch.randn(n_graphs, N_PAD, 3, generator=g)
    scale = pad_std / std0
    return {"test_orig": None, "test_noisy": one * NOISE * scale,
            "test_noisyc": per_channel * NOISE_C * scale}


def _recipe(data: dict) -> dict:
    from ablate.config import TrialConfig, resolve

    cfg = resolve(TrialConfig(dataset="digits_sp", backbone="chebygin_ref", supervision="sup",
                              data_params={"final": True, **data}))
    assert (cfg.K, cfg.filters, cfg.epochs, cfg.dropout, cfg.threshold) == (
        K, FILTERS, EPOCHS, DROPOUT, THRESHOLD), "the study's recipe moved: update this script"
    return dict(cfg.data_params)


def run_reference(rows: list[str], seeds: list[int], stats: str, data: dict,
                  timing: str = "published") -> dict:
    from ablate.data import mnist, resolve_params

    p = resolve_params("digits_sp", _recipe(data))
    images, labels = mnist.digits_images(p["n_train"], p["n_val"], p["n_test"], p["split_seed"],
                                         p["final"])
    raw = mnist.raw_splits(images, labels, gt=p["gt"], slic=p["slic"])
    mean, std, pad_std = standardiser(raw["train"], stats)
    noise = noises(len(raw["test"]), pad_std, float(std[0]))
    out = {}
    for row in rows:
        table = []
        for seed in seeds:
            t0 = time.perf_counter()
            torch.manual_seed(seed)
            model = RefMnistNet(raw["train"].num_features, None if row == "global" else row)
            ref_fit(model, raw["train"], seed, mean, std, timing=timing)
            table.append([ref_accuracy(model, raw["test"], mean, std, noise[s]) for s in SPLITS])
            print(f"  ref {row} seed {seed}: " + " / ".join(f"{v:.1f}" for v in table[-1])
                  + f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
        out[row] = np.array(table)
    return out


def run_ours(rows: list[str], seeds: list[int], data: dict, timing: str = "published") -> dict:
    from ablate.config import TrialConfig
    from ablate.trial.graph import run_trial

    out = {}
    for row in rows:
        kw = dict(dataset="digits_sp", backbone="chebygin_ref", data_params=_recipe(data),
                  seeds=tuple(seeds), lr_timing=timing)
        kw.update(pool_layers=(), loo_auc=False) if row == "global" else kw.update(supervision=row)
        t0 = time.perf_counter()
        recs = run_trial(TrialConfig(**kw))
        acc = {(r["seed"], r["split"]): 100 * r["accuracy"] for r in recs}
        out[row] = np.array([[acc[(s, split)] for split in SPLITS] for s in seeds])
        print(f"  ours {row}: {len(seeds)} seeds as one pack, {time.perf_counter() - t0:.0f} s",
              flush=True)
    return out


def _seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = map(int, text.split("-"))
        return list(range(lo, hi + 1))
    return [int(s) for s in text.split(",")]


def _value(v: str):
    return {"true": True, "false": False}.get(v.lower(), int(v) if v.isdigit() else v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="sup,global", help="sup, unsup, global (comma separated)")
    ap.add_argument("--seeds", default="0-9", help="'0-9' or '0,3,7'")
    ap.add_argument("--stats", default="padded", choices=("padded", "nodes"),
                    help="the reference model's input standardisation")
    ap.add_argument("--ours", action="store_true", help="our trial path instead")
    ap.add_argument("--data", nargs="*", default=[], help="recipe overrides KEY=VALUE")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--timing", choices=("published", "early"), default="published",
                    help="when the LR drops, on both sides: from the epoch after the listed one "
                         "(the authors' published runs, ablate's default) or from it (the runs "
                         "before issue 41)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    rows, seeds = args.rows.split(","), _seeds(args.seeds)
    data = {k: _value(v) for k, v in (kv.split("=", 1) for kv in args.data)}
    who = "ours" if args.ours else f"reference semantics, stats={args.stats}"
    who += f", LR timing {args.timing}"
    print(f"digits stand-in, recipe {_recipe(data)}; {who}; seeds {args.seeds}")
    result = (run_ours(rows, seeds, data, args.timing) if args.ours
              else run_reference(rows, seeds, args.stats, data, args.timing))
    print("row | seeds | ORIG | NOISY | NOISY-C (mean +- sd)")
    for row, arr in result.items():
        sd = arr.std(0, ddof=1) if len(arr) > 1 else np.zeros(3)
        print(f"{row} | {len(arr)} | " + " | ".join(f"{m:.1f} +- {s:.1f}"
                                                  for m, s in zip(arr.mean(0), sd)))


if __name__ == "__main__":
    main()
