"""Core benchmark: dataset generation, training epochs, evaluation, leave-one-out attention.

    python benchmarks/bench_core.py              # full sizes, medians over 3 runs
    python benchmarks/bench_core.py --repeats 5 --threads 2

Prints one table row per measurement: median seconds over --repeats runs, the
runs themselves, and the target of issue 2 (reference code on a 2-core CPU in
brackets). Generation is timed with a fresh cache; training and evaluation
follow the reference recipes (SPEC §3).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from ablate.config import TrialConfig, resolve
from ablate.data import colors, load_graphsets, triangles
from ablate.models.network import GraphNet
from ablate.trial.batches import TrainBatches, eval_batches
from ablate.trial.evaluate import evaluate
from ablate.trial.fit import fit
from ablate.trial.graph import run_trial_full
from ablate.trial.setup import tune_allocator
from ablate.trial.weak import leave_one_out_attention

_CPU: dict[int, list[float]] = {}  # id(wall list) -> CPU seconds of the same runs


def _time(fn, repeats: int) -> list[float]:
    """Wall seconds of `repeats` calls (CPU seconds of this process kept in _CPU)."""
    out, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        out.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    _CPU[id(out)] = cpu
    return out


def _model(dataset: str, **kw) -> tuple[GraphNet, TrialConfig, dict]:
    cfg = resolve(TrialConfig(dataset=dataset, backbone="chebygin_ref", **kw))
    splits = load_graphsets(dataset)
    torch.manual_seed(0)
    out = 1
    return GraphNet(cfg, splits["train"].num_features, out), cfg, splits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--loo-repeats", type=int, default=1, help="runs of the (slow) leave-one-out row")
    ap.add_argument("--batched-repeats", type=int, default=1,
                    help="runs of the (slow) batched 10-seed trial row")
    ap.add_argument("--skip", default="",
                    help="comma list of rows to skip: gen,colors,triangles,batched,loo")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    tune_allocator()
    skip = set(args.skip.split(","))
    rows: list[tuple[str, list[float], str]] = []
    dev = torch.device("cpu")

    if "gen" not in skip:
        rows.append(("COLORS generation (10,500 graphs)",
                     _time(lambda: colors.generate(), args.repeats), "<= 5 s (50 s)"))
        rows.append(("TRIANGLES generation (45,000 graphs)",
                     _time(lambda: triangles.generate(), args.repeats), "<= 120 s (~18 min)"))

    if "colors" not in skip:
        model, cfg, splits = _model("colors", supervision="sup")
        train = TrainBatches(splits["train"], dev)
        one = cfg.replace(epochs=1, lr_decay_epochs=())
        fit(model, one, train, 0)  # warm-up
        epoch = _time(lambda: fit(model, cfg.replace(epochs=10, lr_decay_epochs=()), train, 0),
                      args.repeats)
        per = [t / 10 for t in epoch]
        _CPU[id(per)] = [t / 10 for t in _CPU[id(epoch)]]
        rows.append(("COLORS ChebyGIN sup: train epoch (500 graphs)", per, ""))
        tests = {k: eval_batches(v, device=dev) for k, v in splits.items() if k != "train"}
        ev = _time(lambda: [evaluate(model, b, cfg) for b in tests.values()], args.repeats)
        rows.append(("COLORS full evaluation (val + 3 tests, 10,000 graphs)", ev, ""))
        e_med, v_med = statistics.median(t / 10 for t in epoch), statistics.median(ev)
        n_curve = 50  # validation points per trial for the curves (eval_every = epochs // 50)
        v_one = statistics.median(_time(lambda: evaluate(model, tests["val"], cfg), args.repeats))
        trial = cfg.epochs * e_med + n_curve * v_one + v_med
        rows.append(("COLORS sup trial estimate (300 epochs + 50 val + eval)", [trial],
                     "<= 10 s (34 s)"))
        _CPU[id(rows[-1][1])] = [cfg.epochs * statistics.median(_CPU[id(per)]) + n_curve * v_one
                                 + statistics.median(_CPU[id(ev)])]

    if "triangles" not in skip:
        model, cfg, splits = _model("triangles", supervision="sup")
        train = TrainBatches(splits["train"], dev)
        sub = TrainBatches(splits["train"].subset(np.arange(3200)), dev)
        fit(model, cfg.replace(epochs=1, lr_decay_epochs=()), sub, 0)  # warm-up
        ep = _time(lambda: fit(model, cfg.replace(epochs=1, lr_decay_epochs=()), train, 0),
                   args.repeats)
        rows.append(("TRIANGLES ChebyGIN K=7 sup: train epoch (30,000 graphs)", ep,
                     "<= 3.5 s (7-15 s)"))
        tests = {k: eval_batches(v, device=dev) for k, v in splits.items() if k != "train"}
        ev = _time(lambda: [evaluate(model, b, cfg) for b in tests.values()], args.repeats)
        rows.append(("TRIANGLES full evaluation (val + 2 tests, 15,000 graphs)", ev, ""))

    if "batched" not in skip:  # a whole trial: 10 seeds trained as one vmapped model
        trial = TrialConfig(dataset="colors", backbone="chebygin_ref", supervision="sup",
                            seeds=tuple(range(10)))
        run_trial_full(trial.replace(epochs=1, lr_decay_epochs=(), seeds=(0, 1)))  # warm-up
        whole = _time(lambda: run_trial_full(trial), args.batched_repeats)
        per = [t / 10 for t in whole]
        _CPU[id(per)] = [t / 10 for t in _CPU[id(whole)]]
        rows.append(("COLORS sup trial, 10 seeds batched, per seed", per, "<= 10 s (34 s)"))

    if "loo" not in skip:
        model, cfg, splits = _model("colors", pool_layers=())
        model.eval()
        test = [splits[s] for s in ("test_orig", "test_large", "test_largec")]
        loo = _time(lambda: [leave_one_out_attention(model, g, dev) for g in test], args.loo_repeats)
        rows.append(("Leave-one-out attention, COLORS tests (7,500 graphs)", loo,
                     "<= 15 s (397 s)"))

    print(f"\ntorch {torch.__version__}, threads {torch.get_num_threads()}, repeats {args.repeats}")
    print("wall = elapsed seconds; cpu = this process's CPU seconds (less sensitive to a busy machine)")
    print(f"{'measurement':58s} {'wall med':>9s} {'cpu med':>8s}  {'wall runs':24s} target (reference)")
    for name, runs, target in rows:
        r = ", ".join(f"{t:.2f}" for t in runs)
        cpu = _CPU.get(id(runs))
        c = f"{statistics.median(cpu):8.3f}" if cpu else f"{'':8s}"
        print(f"{name:58s} {statistics.median(runs):9.3f} {c}  {r:24s} {target}")


if __name__ == "__main__":
    main()
