"""MNIST-75SP: the authors' own training code beside ours, on the same prepared graphs.

    python benchmarks/mnist_train_reference.py --authors /path/to/graph_attention_pool \\
        --row sup --seeds 0,1,2 --side both                    # 30 epochs, both sides at once
    python benchmarks/mnist_train_reference.py --authors ... --row sup --seeds 0 --epochs 5 \\
        --n-train 10000 --side ours --set stats=padded          # a short bisection run
    python benchmarks/mnist_train_reference.py --summary --out FILE.jsonl [--markdown]

Issue 34. The data: the real MNIST IDX files (`--mnist`, default the shared fixtures) through
`ablate.data.mnist` with the `mnist` study's recipe (`final: true`: all 60,000 training
images; today's SLIC rule), i.e. exactly the graphs `study=mnist` trains on.

- the authors' side: their unmodified `main.py` / `train_test.py` / `chebygin.py` /
  `attention_pooling.py` (a checkout of bknyaz/graph_attention_pool, passed as --authors and
  fetched by the user; nothing of it is copied into this project) as a subprocess with the
  flags of `scripts/mnist_75sp.sh` (`-D mnist-75sp --epochs 30 --lr_decay_step 20,25
  --test_batch_size 100 -K 4 -f 4,64,512 --aggregation mean --n_hidden 0 --readout max
  --dropout 0.5 --img_features mean,coord --img_noise_levels 0.4,0.6 --pool_arch fc_prev
  --kl_weight 100`, plus `--pool attn_sup_threshold_skip_skip_0.01` for the supervised row),
  `--seed s`, `--device cpu`; their code tests at epochs 1 and the last, and after every epoch
  with `--every-epoch` (their `--debug`, read from their log; it changes nothing in training,
  and costs three passes over the 10,000 test graphs an epoch).
  Adapters, nothing else: a stand-in `torchvision` module (imported for MNIST-28x28 only;
  PyPI's torchvision does not load beside this torch build), and our graphs written in the
  format their `MNIST75sp` reads (`mnist_75sp_{train,test}.pkl`: labels, then per image the
  superpixel intensities (N, 1) and centres (N, 2) in pixels, which they divide by 28) with
  OUR noise draws in their `mnist_75sp_noise.pt` / `_color_noise.pt` (theirs are N(0, 1)
  per padded slot, multiplied by 0.4 / 0.6 in their standardised units; ours are N(0, 1) per
  node x 0.4 / 0.6 x the padded std in raw units (`ablate.data.mnist`): the same noise once
  both are in raw units, so both sides are tested on the same noisy graphs).
- our side: `ablate.trial` (the `mnist` study's ChebyGIN row: `backbone=chebygin_ref`,
  `supervision=sup` or the global pool) on the same graphs, trained by `fit` with the test
  splits evaluated at the --checkpoints epochs. `--set KEY=VALUE` changes one TrialConfig
  field for a bisection run, `--stats padded` standardises our graphs with the authors'
  statistics (over training graphs zero-padded to 75 nodes); the record names the change.
- `--check-forward`: our model, KL term, loss and gradients against the authors' `ChebyGIN`
  on one batch of our graphs with the same weights (`check_forward.json`).
- `--n-train N`: both sides train on the first N training graphs only (a short bisection run;
  rounded down to a multiple of 32: their `compute_feature_stats` concatenates whole batches).

Both sides run in resumable chunks of --chunk epochs (state under --state, default --out's
folder/runs). Their `main.py` reseeds at every start, so restarted as is (`--resume-mode
replay`) each chunk replays the first chunk's data order and dropout masks; `--resume-mode
exact` (the default) puts `authors_resume.py` on their PYTHONPATH, which carries torch's
generator state across the chunks: the run trains as one uninterrupted run. Each chunk's entry
in progress.json and the record names the commit and tree state of the process that ran it.

Each (side, row, seed) is a JSON line in --out: per checkpoint epoch the TEST / NOISY /
NOISY-C accuracy (%), seconds, peak RSS, the flags, the resume mode (`resume`, theirs).
`--summary` prints the table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_spec = importlib.util.spec_from_file_location("mnist_authors",
                                               Path(__file__).with_name("mnist_authors.py"))
_authors = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_authors)
# the authors' side (their data files, command, chunked runs, logs): mnist_authors.py
N_PAD, ROWS = _authors.N_PAD, _authors.ROWS
authors_steps, read_authors_log = _authors.authors_steps, _authors.read_authors_log
run_authors_chunked, write_authors_data = _authors.run_authors_chunked, _authors.write_authors_data
_tu = _authors._tu  # benchmarks/tu_fidelity.py (its stand-in torchvision), loaded there

MNIST = ROOT.parent / "shared" / "fixtures" / "mnist"
SPLITS = ("test_orig", "test_noisy", "test_noisyc")


def recipe(mnist: Path):
    """The `mnist` study's data recipe on the real files (resolved TrialConfig of its sup row)."""
    from ablate.config import TrialConfig, resolve

    return resolve(TrialConfig(dataset="mnist_sp", backbone="chebygin_ref", supervision="sup",
                               data_params={"path": str(mnist), "final": True}))


def our_splits(mnist: Path) -> dict:
    from ablate.data import load_graphsets

    cfg = recipe(mnist)
    return load_graphsets(cfg.dataset, **cfg.data_kwargs)


def raw_graphs(mnist: Path) -> dict:
    """The recipe's graphs with UNSTANDARDISED features, built as `ablate.data.mnist.generate_mnist`
    builds them (same image order), and the noise draws of its noisy tests in N(0, 1) units."""
    from ablate.data import mnist as m
    from ablate.data import resolve_params

    p = resolve_params("mnist_sp", recipe(mnist).data_params)
    train_x, train_y, test_x, test_y = m.load_mnist_arrays(p["path"])
    rng = np.random.default_rng(p["split_seed"])
    perm = rng.permutation(len(train_x))
    tr = perm[:p["n_train"] + p["n_val"]] if p["final"] else perm[:p["n_train"]]
    te = rng.permutation(len(test_x))[:p["n_test"]]
    images = {"train": train_x[tr].astype(np.float32) / 255.0, "val": train_x[:0].astype(np.float32),
              "test": test_x[te].astype(np.float32) / 255.0}
    labels = {"train": train_y[tr], "val": train_y[:0], "test": test_y[te]}
    raw = m.raw_splits(images, labels, gt=p["gt"], slic=p["slic"])
    n = raw["test"].total_nodes
    z = np.random.default_rng([p["noise_seed"], 0]).standard_normal((n, 1))
    zc = np.random.default_rng([p["noise_seed"], 1]).standard_normal((n, m.N_INTENSITY))
    return {"train": raw["train"], "test": raw["test"], "noise": z, "noise_c": zc}


def recipe_tag(mnist: Path) -> str:
    """The data hash of the recipe (`ablate.data.dataset_recipe_hash`): names every prepared
    file here, so graphs of another recipe (another SLIC rule, code, noise) are never reused."""
    from ablate.data import dataset_recipe_hash

    cfg = recipe(mnist)
    return dataset_recipe_hash(cfg.dataset, dict(cfg.data_params))[:12]


def cached_raw(mnist: Path, work: Path) -> dict:
    """`raw_graphs`, kept in `work` under the recipe's hash (SLIC over 70,000 images takes
    minutes)."""
    from ablate.data.graphs import GraphSet

    path = work / f"raw_graphs_{recipe_tag(mnist)}.npz"
    if not path.exists():
        raw = raw_graphs(mnist)
        arrays = {f"{s}.{k}": v for s in ("train", "test") for k, v in raw[s].arrays().items()}
        np.savez(path.with_suffix(".tmp.npz"), noise=raw["noise"], noise_c=raw["noise_c"], **arrays)
        os.replace(path.with_suffix(".tmp.npz"), path)
    with np.load(path) as z:
        out = {s: GraphSet.from_fields({k.split(".", 1)[1]: z[k] for k in z.files
                                        if k.startswith(s + ".")}) for s in ("train", "test")}
        out.update(noise=z["noise"], noise_c=z["noise_c"])
    return out


def check_same(raw: dict, ours: dict) -> None:
    """Our standardised splits are the raw graphs standardised: same graphs, same order, same
    noise (the noisy test minus the clean one, in N(0, 1) units)."""
    from ablate.data import mnist as m

    mean, std = m.feature_stats(raw["train"].x)
    for split in ("train", "test"):
        a, b = raw[split], ours["test_orig" if split == "test" else "train"]
        assert len(a) == len(b) and np.array_equal(a.y, b.y), f"{split}: other graphs"
        assert np.allclose((a.x - mean) / std, b.x, atol=1e-5), f"{split}: other features"
    factor = m.noise_factor(raw["train"], std[0])
    d = ours["test_noisy"].x[:, 0] - ours["test_orig"].x[:, 0]
    assert np.allclose(d, raw["noise"][:, 0] * m.NOISE_STD * factor, atol=1e-4), "other noise"


def restandardise(data: dict, raw_stats: tuple, train) -> dict:
    """Our splits standardised as the authors standardise: with the mean and std of the
    training graphs' features zero-padded to 75 nodes (coordinates too), instead of over the
    real nodes. The noise of the noisy tests stays the same in raw units."""
    mean, std = raw_stats  # over the real nodes of the full training split (ours)
    raw_train = train.x * std + mean
    slots = N_PAD * len(train)
    pmean = raw_train.sum(0, dtype=np.float64) / slots
    pstd = np.sqrt((raw_train.astype(np.float64) ** 2).sum(0) / slots - pmean ** 2)
    return {k: gs.replace(x=((gs.x * std + mean - pmean) / pstd).astype(np.float32))
            for k, gs in data.items()}


def run_ours(row: str, seed: int, epochs: int, decay: list[int], checkpoints: list[int],
             splits: dict, n_train: int | None, sets: dict, stats: str = "nodes",
             timing: str = "published", chunk: int | None = None, state: Path | None = None,
             provenance: dict | None = None) -> dict:
    """Our side of one seed. With `state` (a folder), training runs in chunks of `chunk`
    epochs and saves the model and `FitState` (optimiser, batch-order generator, dropout step)
    after each, so a stopped run resumes at its last chunk and continues exactly as the
    uninterrupted run would."""
    import dataclasses

    import torch

    from ablate.trial.batches import TrainBatches, eval_batches
    from ablate.trial.evaluate import evaluate
    from ablate.trial.fit import fit, fit_state
    from ablate.trial.provenance import peak_rss_mb, reset_peak_rss
    from ablate.trial.setup import model_sizes, prepare_process, seeded_model

    torch.set_num_threads(1)
    prepare_process()  # as every trial: denormals flushed, the allocator tuned
    reset_peak_rss()  # this seed's own peak, not the largest of the seeds before it
    cfg = recipe(Path(splits["_path"]))
    change = dict(epochs=epochs, lr_decay_epochs=tuple(e for e in decay if e < epochs),
                  lr_timing=timing, seeds=(seed,), device="cpu", loo_auc=False, **sets)
    if row == "global":
        change.update(pool_layers=(), supervision="unsup")
    cfg = dataclasses.replace(cfg, **change)
    train = splits["train"]
    if n_train:
        train = train.subset(np.arange(min(n_train, len(train))))
    data = {"train": train, **{s: splits[s] for s in SPLITS}}
    if stats == "padded":  # the authors' statistics: over the training graphs zero-padded to 75
        data = restandardise(data, splits["_raw_stats"], train)
    in_ch, out_ch = model_sizes(cfg, data)
    t0 = time.perf_counter()
    batches = TrainBatches(data["train"], torch.device("cpu"))
    model = seeded_model(cfg, seed, in_ch, out_ch, torch.device("cpu"))
    fs = fit_state(model, cfg, seed)
    prog = {"done": 0, "curve": {}, "seconds": 0.0, "peak_rss_mb": 0, "losses": {}}
    ckpt = state / "checkpoint.pt" if state is not None else None
    if ckpt is not None and ckpt.exists():
        saved = torch.load(ckpt, weights_only=False)
        model.load_state_dict(saved["model"])
        fs.load_state_dict(saved["fit"])
        prog = saved["progress"]
        print(f"  ours {row} seed {seed}: resumed after epoch {prog['done']}", flush=True)
    tests = {s: eval_batches(data[s], cfg.test_batch_size, "cpu") for s in SPLITS}

    def on_epoch(epoch: int, loss: float) -> None:
        prog["losses"][str(epoch)] = round(loss, 5)
        if epoch in checkpoints or epoch == epochs:
            accs = [round(100 * evaluate(model, tests[s], cfg)["accuracy"], 2) for s in SPLITS]
            prog["curve"][str(epoch)] = accs
            print(f"  ours {row} seed {seed} epoch {epoch}: loss {loss:.4f} "
                  + " / ".join(f"{v:.2f}" for v in accs)
                  + f" ({time.perf_counter() - t0:.0f} s)", flush=True)

    while fs.epoch < epochs:
        t1 = time.perf_counter()
        first = fs.epoch + 1
        fit(model, cfg, batches, seed, on_epoch, state=fs,
            until=fs.epoch + chunk if chunk and ckpt is not None else None)
        prog.setdefault("chunks", []).append({"epochs": [first, fs.epoch],
                                              "seconds": round(time.perf_counter() - t1, 1),
                                              **(provenance or {})})
        prog["done"] = fs.epoch
        prog["seconds"] = round(prog["seconds"] + time.perf_counter() - t1, 1)
        prog["peak_rss_mb"] = max(prog["peak_rss_mb"], round(peak_rss_mb()))
        if ckpt is not None:
            state.mkdir(parents=True, exist_ok=True)
            torch.save({"model": model.state_dict(), "fit": fs.state_dict(), "progress": prog},
                       ckpt.with_suffix(".tmp"))
            os.replace(ckpt.with_suffix(".tmp"), ckpt)
            (state / "progress.tmp").write_text(json.dumps(prog, indent=1) + "\n")  # for people
            os.replace(state / "progress.tmp", state / "progress.json")  # and tables.py
    return {"curve": prog["curve"], "seconds": prog["seconds"], "peak_rss_mb": prog["peak_rss_mb"],
            "train_loss": prog["losses"], "lr_decay_epochs": list(cfg.lr_decay_epochs),
            "chunks": prog.get("chunks", [])}


def check_forward(authors: Path, mnist: Path, work: Path, seed: int = 0, graphs: int = 32) -> dict:
    """Our GraphNet of the sup row against the authors' own `ChebyGIN` (imported from the
    checkout) with our initial weights copied in, on one training batch of our graphs: logits,
    KL term, loss and every gradient (dropout off on both sides, training mode so the KL term
    is computed). What this holds equal is the model and its loss; what it cannot see is
    the loop (data order, statistics, schedule), which the training runs compare."""
    import dataclasses

    import torch
    import torch.nn.functional as F

    from ablate.models.layers import Graph
    from ablate.trial.batches import collate
    from ablate.trial.setup import model_sizes, seeded_model

    sys.path.insert(0, str(authors))
    sys.path.insert(0, str(_tu.standin_path(work)))
    import chebygin  # the authors' module

    torch.manual_seed(seed)
    splits = our_splits(mnist)
    cfg = dataclasses.replace(recipe(mnist), seeds=(seed,), device="cpu")
    in_ch, out_ch = model_sizes(cfg, splits)
    ours = seeded_model(cfg, seed, in_ch, out_ch, torch.device("cpu"))
    theirs = chebygin.ChebyGIN(in_features=in_ch, out_features=out_ch, filters=list(cfg.filters),
                               K=cfg.K, n_hidden=0, aggregation="mean", dropout=0.5, readout="max",
                               pool="attn_sup_threshold_skip_skip_0.01".split("_"),
                               pool_arch=["fc", "prev"], large_graph=False, kl_weight=100.0,
                               init="normal", scale=1.0)
    layers = [m for m in theirs.graph_layers if isinstance(m, chebygin.ChebyGINLayer)]
    pool = [m for m in theirs.graph_layers if isinstance(m, chebygin.AttentionPooling)][0]
    with torch.no_grad():
        for mine, their in zip(ours.layers, layers):
            their.fc[0].weight.copy_(mine.mlp[0].weight)
            their.fc[0].bias.copy_(mine.mlp[0].bias)
        pool.proj.weight.copy_(ours.pools[str(cfg.pool_layers[0])].p.reshape(1, -1))
        theirs.fc[-1].weight.copy_(ours.head.weight)
        theirs.fc[-1].bias.copy_(ours.head.bias)
    theirs.fc[0].p = 0.0
    ours.head_dropout.p = 0.0
    b = collate(splits["train"], np.arange(graphs)).with_adjacency()
    ours.train()
    theirs.train()
    o = ours(b.x, Graph(b.A, b.mask), b.gt)
    loss_o = F.cross_entropy(o.out, b.y) + o.reg
    params = {"N_nodes": b.mask.sum(1), "node_attn": b.gt, "node_attn_eval": b.gt}
    out_t, other = theirs([b.x, b.A, b.mask, b.y, params])
    kl_t = sum(other["reg"])
    loss_t = F.cross_entropy(out_t, b.y) + kl_t
    loss_o.backward()
    loss_t.backward()
    grads = {f"layer{i}.weight": (mine.mlp[0].weight.grad, their.fc[0].weight.grad)
             for i, (mine, their) in enumerate(zip(ours.layers, layers))}
    grads.update({f"layer{i}.bias": (mine.mlp[0].bias.grad, their.fc[0].bias.grad)
                  for i, (mine, their) in enumerate(zip(ours.layers, layers))})
    grads["p"] = (ours.pools[str(cfg.pool_layers[0])].p.grad.reshape(1, -1), pool.proj.weight.grad)
    grads["head.weight"] = (ours.head.weight.grad, theirs.fc[-1].weight.grad)
    rel = {k: float((a - c).abs().max() / c.abs().max().clamp_min(1e-12)) for k, (a, c) in grads.items()}
    out = {"graphs": graphs, "logits_max_abs_diff": float((o.out - out_t).abs().max()),
           "kl_ours": float(o.reg.detach()), "kl_theirs": float(kl_t.detach()),
           "loss_ours": float(loss_o.detach()), "loss_theirs": float(loss_t.detach()),
           "grad_max_rel_diff": rel}
    out["statistics"] = feature_statistics(mnist, work)
    print(json.dumps(out, indent=1))
    return out


def feature_statistics(mnist: Path, work: Path) -> dict:
    """Per channel [I, I, I, row, col]: mean and std of the raw training features over the real
    nodes (how we standardise) and over the graphs zero-padded to 75 nodes (how they do)."""
    from ablate.data import mnist as m

    x = cached_raw(mnist, work)["train"]
    mean, std = m.feature_stats(x.x)
    slots = N_PAD * len(x)
    pmean = x.x.sum(0, dtype=np.float64) / slots
    pstd = np.sqrt((x.x.astype(np.float64) ** 2).sum(0) / slots - pmean ** 2)
    r = lambda v: [round(float(a), 4) for a in v]  # noqa: E731
    return {"nodes_mean": r(mean), "nodes_std": r(std), "padded_mean": r(pmean),
            "padded_std": r(pstd), "mean_nodes_per_graph": round(float(x.num_nodes.mean()), 2)}


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def summary(path: Path, as_markdown: bool = False) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    groups: dict[tuple, dict[tuple, dict]] = {}
    for r in rows:  # one record per seed, LR timing and resume mode: the newest
        replayed = r["side"] == "authors" and r.get("resume", "replay") == "replay"
        side = r["side"] + (" (replayed chunks)" if replayed and r.get("chunk") else "")
        key = (side, r["row"], r["epochs_total"], r.get("n_train"), json.dumps(r.get("set", {})))
        groups.setdefault(key, {})[(r["seed"], r.get("lr_timing"))] = r
    groups = {k: sorted(v.values(), key=lambda r: r["seed"]) for k, v in groups.items()}
    sep = " | " if as_markdown else "  "
    if as_markdown:
        print("| side | row | epochs | train graphs | change | seeds | epoch | TEST | NOISY | NOISY-C |")
        print("|---|---|---|---|---|---|---|---|---|---|")
    for (side, row, total, n_train, change), rs in sorted(groups.items()):
        epochs = sorted({int(e) for r in rs for e in r["curve"]})
        for e in epochs:
            vals = np.array([r["curve"][str(e)] for r in rs if str(e) in r["curve"]])
            cells = [f"{m:.2f} ± {s:.2f}" if len(vals) > 1 else f"{m:.2f}"
                     for m, s in zip(vals.mean(0), vals.std(0, ddof=1) if len(vals) > 1 else vals[0])]
            head = [side, row, str(total), str(n_train or "all"), change if change != "{}" else "",
                    ",".join(str(r["seed"]) for r in rs), str(e)]
            line = sep.join(head + cells)
            print(f"| {line} |" if as_markdown else line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--authors", type=Path, help="a checkout of bknyaz/graph_attention_pool")
    ap.add_argument("--mnist", type=Path, default=MNIST, help="folder with the four MNIST IDX files")
    ap.add_argument("--work", type=Path, default=Path("/tmp/mnist_train_reference"),
                    help="scratch: the authors' data files and logs")
    ap.add_argument("--side", choices=("authors", "ours", "both"), default="both")
    ap.add_argument("--row", choices=tuple(ROWS), default="sup")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--decay", default="20,25", help="the recipe's listed LR drops (x0.1)")
    ap.add_argument("--timing", choices=("published", "early"), default="published",
                    help="published: a drop listed at m applies from epoch m + 1 (their published "
                         "runs; their code gets m + 1); early: from epoch m")
    ap.add_argument("--chunk", type=int, default=5,
                    help="epochs per resumable chunk (state saved after each; rerun to resume)")
    ap.add_argument("--state", type=Path, default=None,
                    help="folder of per-run progress and checkpoints (default: --out's folder/runs)")
    ap.add_argument("--checkpoints", default="1,2,3,5,10,15,20,25,30")
    ap.add_argument("--n-train", type=int, default=None)
    ap.add_argument("--resume-mode", choices=("exact", "replay"), default="exact",
                    help="the authors' chunks: exact (torch's generator carried across chunks by "
                         "authors_resume.py: one uninterrupted run) or replay (their code as is: "
                         "every chunk replays the first chunk's data order and dropout masks)")
    ap.add_argument("--every-epoch", action="store_true",
                    help="the authors' side tests after every epoch (their --debug; slower)")
    ap.add_argument("--set", nargs="*", default=[], help="KEY=VALUE TrialConfig changes (ours)")
    ap.add_argument("--stats", choices=("nodes", "padded"), default="nodes",
                    help="ours standardised over real nodes (ours) or zero-padded graphs (theirs)")
    ap.add_argument("--out", type=Path,
                    default=ROOT / "benchmarks" / "results" / "mnist_train_reference.jsonl")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--record-authors", type=Path, default=None,
                    help="record a finished run of their main.py from its log (--seeds: its seed)")
    ap.add_argument("--check-forward", action="store_true",
                    help="our model, loss and gradients against the authors' ChebyGIN on one batch")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.every_epoch and args.resume_mode == "exact" and args.side != "ours":
        ap.error("--every-epoch needs --resume-mode replay: their --debug tests between epochs, "
                 "drawing from the generator where a chunk's end does not")
    if args.n_train:  # their feature statistics need whole batches of 32 (`compute_feature_stats`)
        args.n_train -= args.n_train % 32
    if args.summary:
        summary(args.out, args.markdown)
        return
    if args.record_authors:
        got = read_authors_log(args.record_authors)
        _write(args.out, {"side": "authors", "seed": int(args.seeds), "row": args.row,
                          "epochs_total": args.epochs, "n_train": args.n_train,
                          "machine": _machine(), "git_sha": _git("rev-parse", "--short", "HEAD"),
                          "git_dirty": tree_state(),
                          "curve": {str(k): v for k, v in got.pop("epochs").items()}, **got})
        return
    if args.check_forward:
        args.work.mkdir(parents=True, exist_ok=True)
        got = check_forward(args.authors, args.mnist, args.work)
        got.update(git_sha=_git("rev-parse", "--short", "HEAD"),
                   git_dirty=tree_state(), command=" ".join(sys.argv))
        (args.out.parent / "check_forward.json").write_text(json.dumps(got, indent=1) + "\n")
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    decay = [int(e) for e in args.decay.split(",") if e]
    checkpoints = [int(e) for e in args.checkpoints.split(",")]
    sets = dict(kv.split("=", 1) for kv in args.set)
    sets = {k: _value(v) for k, v in sets.items()}
    if not args.mnist.is_dir():
        sys.exit(f"error: --mnist {args.mnist} is not a folder")
    if args.side in ("authors", "both") and (args.authors is None
                                             or not (args.authors / "main.py").is_file()):
        sys.exit("error: --authors must name a checkout of bknyaz/graph_attention_pool")
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    state_root = args.state or args.out.parent / "runs"
    here = {"git_sha": _git("rev-parse", "--short", "HEAD"), "git_dirty": tree_state()}
    common = {"row": args.row, "epochs_total": args.epochs, "n_train": args.n_train,
              "lr_timing": args.timing, "chunk": args.chunk, "machine": _machine(), **here}
    key = run_key(args.row, args.epochs, args.n_train, args.timing, args.chunk)
    theirs_key = run_key(args.row, args.epochs, args.n_train, args.timing, args.chunk,
                         args.resume_mode)
    done = _recorded(args.out)
    threads = []
    if args.side in ("authors", "both"):
        # named by the recipe's data hash: their files are always our graphs of this recipe
        folder = args.work / f"data_{recipe_tag(args.mnist)}_{args.n_train or 'all'}"
        if not (folder / "READY").exists():
            raw = cached_raw(args.mnist, args.work)
            check_same(raw, our_splits(args.mnist))  # ours standardised = the raw graphs
            write_authors_data(raw, folder, args.n_train)
            del raw
        steps = authors_steps(decay, args.timing)
        commit = _git_in(args.authors, "rev-parse", "HEAD")

        def authors_seed(seed: int) -> None:
            exact = args.resume_mode == "exact"
            got = run_authors_chunked(args.row, seed, args.epochs, steps, args.chunk, args.authors,
                                      folder, args.work,
                                      state_root / f"authors_{theirs_key}_seed{seed}",
                                      args.every_epoch, exact, here)
            _write(args.out, {"side": "authors", "seed": seed, **common, "lr_decay_step": steps,
                              "authors_commit": commit, "resumed_every": args.chunk,
                              "resume": args.resume_mode, "data_order": DATA_ORDER[args.resume_mode],
                              **got})

        for seed in seeds:  # one process per seed, all at once: give it the cores
            if ("authors", args.row, seed, theirs_key) in done:
                print(f"authors seed {seed}: recorded already in {args.out}")
                continue
            t = threading.Thread(target=authors_seed, args=(seed,))
            t.start()
            threads.append(t)
    if args.side in ("ours", "both"):
        splits = our_splits(args.mnist)
        splits["_path"] = str(args.mnist)
        if args.stats == "padded":
            from ablate.data import mnist as m

            splits["_raw_stats"] = m.feature_stats(cached_raw(args.mnist, args.work)["train"].x)
        change = {**sets, **({"stats": "padded"} if args.stats == "padded" else {})}
        for seed in seeds:
            if ("ours", args.row, seed, key) in done and not change:
                print(f"ours seed {seed}: recorded already in {args.out}")
                continue
            state = state_root / f"ours_{key}_seed{seed}" if not change else None
            got = run_ours(args.row, seed, args.epochs, decay, checkpoints, splits, args.n_train,
                           sets, args.stats, args.timing, args.chunk, state, here)
            _write(args.out, {"side": "ours", "seed": seed, "set": change, **common, **got})
    for t in threads:
        t.join()


def _recorded(out: Path) -> set[tuple]:
    """(side, row, seed, run key) of the finished records in `out`."""
    if not out.exists():
        return set()
    got = set()
    for line in out.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            if "lr_timing" in r:
                key = run_key(r["row"], r["epochs_total"], r.get("n_train"), r["lr_timing"],
                              r.get("chunk"), r.get("resume", "replay") if r["side"] == "authors"
                              else "replay")
                got.add((r["side"], r["row"], r["seed"], key))
    return got


DATA_ORDER = {
    "replay": "their code reseeds at each chunk's start: every chunk replays the first chunk's "
              "data order and dropout masks (not one uninterrupted run)",
    "exact": "torch's generator state saved at each chunk's last epoch and restored after their "
             "feature statistics at the next start (authors_resume.py): the data order and "
             "dropout masks of one uninterrupted run"}


def run_key(row: str, epochs: int, n_train: int | None, timing: str, chunk: int | None,
            resume: str = "replay") -> str:
    """The run's name in its state folder and in `_recorded`: the replaying chunks keep the
    name they had before exact resume existed; exact ones end in `_exact`."""
    key = f"{row}_e{epochs}_n{n_train or 'all'}_{timing}_c{chunk}"
    return key + "_exact" if resume == "exact" else key


def tree_state() -> str:
    """'' for a clean checkout, else 'dirty:<hash of the diff>' (ablate's one rule)."""
    from ablate.trial.provenance import tree_state as state

    return state(str(ROOT))


def _git_in(folder: Path, *cmd: str) -> str | None:
    out = subprocess.run(["git", "-C", str(folder), *cmd], capture_output=True, text=True)
    return out.stdout.strip() or None


def _machine() -> str:
    return f"{platform.node()} {platform.processor() or platform.machine()} {os.cpu_count()} cores"


def _git(*cmd: str) -> str:
    out = subprocess.run(["git", *cmd], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip()


def _write(path: Path, rec: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")
    print(json.dumps({k: v for k, v in rec.items() if k != "machine"}), flush=True)


if __name__ == "__main__":
    main()
