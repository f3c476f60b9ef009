"""Packed training steps, eager vs replayed, and whole recipes / studies on one device.

    python benchmarks/bench_gpu.py                         # step table on CUDA (or the CPU)
    python benchmarks/bench_gpu.py --seeds 1,8,32,64,128 --recipes --studies paper,init

Rows (medians over --repeats timings of --steps steps each, after warm-up and, for
replay on CUDA, graph capture):

- ms per step of the TRIANGLES ChebyGIN K=7 supervised pack (two GNN-scored pooling
  layers, batch 32, graphs padded to 25 nodes) and of the COLORS ChebyGIN supervised
  pack, for each pack size S, with `step=eager` and `step=replay`; seconds per
  seed-epoch = ms per step x steps per epoch / S; replay's speed-up over eager.
- kernels and host launch calls per step (torch profiler, CUDA only), peak GPU memory, and
  one validation of every member (`evaluate_members(..., fields="curve")` on the val
  split): seconds per seed-epoch with validation at the recipe's rate and its share.
- `--vs-sequential DATASET[:key=value,...] [--epochs E]`: 10 seeds as one pack vs the same
  seeds one by one, seconds per seed, in one run (e.g. `digits_sp:supervision=sup`, the
  MNIST-75SP recipe with dropout 0.5 on the offline digits stand-in).
- `--recipes`: the full 10-seed TRIANGLES and COLORS sup recipes as one pack
  (`run_trial_full`, validation curves and evaluation included), seconds per seed.
- `--studies`: wall time of `python -m ablate.run study=NAME` through the runner
  (needs Ray), printed with the runner's own phase timings.

On a CPU a CUDA graph does not exist: `replay` there is the fixed-shape step run
eagerly; the CUDA rows need a GPU.
"""

from __future__ import annotations

import argparse
import math
import statistics
import subprocess
import sys
import tempfile
import time

import torch

from ablate.config import TrialConfig, resolve
from ablate.data import load_graphsets
from ablate.trial import packed as batched
from ablate.trial.batches import TrainBatches, eval_batches
from ablate.trial.graph import run_trial_full
from ablate.trial.pack_step import WARMUP_STEPS
from ablate.trial.setup import tune_allocator


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _kernels(run, k: int, device: torch.device) -> tuple[float, float]:
    """(device kernels, host launch calls) per step over k steps (torch profiler)."""
    from torch.profiler import ProfilerActivity, profile

    if device.type != "cuda":
        return math.nan, math.nan
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    evs = prof.events()
    dev = sum(1 for e in evs if e.device_type == torch.autograd.DeviceType.CUDA)
    host = sum(1 for e in evs if e.name in ("cudaLaunchKernel", "cudaGraphLaunch",
                                            "cudaLaunchKernelExC", "cuLaunchKernel",
                                            "cuLaunchKernelEx", "cudaMemcpyAsync",
                                            "cudaMemsetAsync"))
    return dev / k, host / k


def measure(dataset: str, S: int, step: str, device: torch.device, steps: int,
            repeats: int, validate: bool, data_params: tuple = ()) -> dict:
    """One (dataset, pack size, step) row: seconds per step (`repeats` timings of `steps`
    steps), kernels per step, peak GPU memory and, with `validate`, one validation of
    every member (`evaluate_members` on the val split, as the curves run it).
    `data_params`: a smaller dataset recipe (tests)."""
    cfg = resolve(TrialConfig(dataset=dataset, backbone="chebygin_ref", supervision="sup",
                              step=step, device=device.type, data_params=data_params))
    splits = load_graphsets(dataset, **cfg.data_kwargs)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    train = TrainBatches(splits["train"], device)
    stack = batched.MemberStack([batched.Member(cfg, s) for s in range(S)],
                                splits["train"].num_features, 1, device)
    ps = batched.PackStep(stack, train, cfg, device, batched.replays(cfg, device))
    gens = [torch.Generator().manual_seed(s) for s in range(S)]
    perms = torch.stack([torch.randperm(len(train), generator=g) for g in gens]).to(device)
    B = cfg.batch_size
    n_batches = len(train) // B

    def run(k: int, offset: int) -> None:
        for i in range(k):
            j = (offset + i) % n_batches
            ps.run(perms[:, j * B:(j + 1) * B])

    run(WARMUP_STEPS + 3, 0)  # warm-up, graph capture
    _sync(device)
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        run(steps, 10 + r * steps)
        _sync(device)
        times.append((time.perf_counter() - t0) / steps)
    kern, host = _kernels(lambda: run(5, 3), 5, device)
    out = {"s": statistics.median(times), "kernels": kern, "host_launches": host}
    if validate:
        val = eval_batches(splits["val"], cfg.test_batch_size, device)
        alive = list(range(S))
        batched.evaluate_members(stack, alive, val, cfg, fields="curve")  # warm-up
        _sync(device)
        vt = []
        for _ in range(max(1, min(repeats, 3))):
            t0 = time.perf_counter()
            batched.evaluate_members(stack, alive, val, cfg, fields="curve")
            _sync(device)
            vt.append(time.perf_counter() - t0)
        out["val_s"] = statistics.median(vt)
        out["every"] = cfg.eval_every or max(1, cfg.epochs // 50)
    out["peak_mb"] = (torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda"
                      else math.nan)
    ps.release()
    return out


def steps_per_epoch(dataset: str, data_params: tuple = ()) -> int:
    n = len(load_graphsets(dataset, **dict(data_params))["train"])
    return -(-n // 32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--seeds", default=None, help="pack sizes (default 1,8,32,64,128 on CUDA, "
                                                  "1,8 on a CPU)")
    ap.add_argument("--datasets", default="triangles,colors")
    ap.add_argument("--steps", type=int, default=None, help="steps per timing (default 50 CUDA, "
                                                            "10 CPU)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--recipes", action="store_true", help="the 10-seed full recipes")
    ap.add_argument("--no-steps", action="store_true", help="skip the step table")
    ap.add_argument("--vs-sequential", default="", help="dataset[:key=value,...]: 10 seeds as one "
                    "pack vs seed by seed, seconds per seed, in one run")
    ap.add_argument("--epochs", type=int, default=None, help="epochs for --vs-sequential")
    ap.add_argument("--studies", default="", help="comma list of studies to time via the runner")
    ap.add_argument("--study-args", default="", help="extra key=value overrides for --studies "
                                                     "(space-separated)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)
    tune_allocator()
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if cuda else "cpu")
    if cuda:  # as every trial on CUDA runs
        from ablate.trial.setup import deterministic_cuda

        deterministic_cuda()
    sizes = [int(s) for s in (args.seeds or ("1,8,32,64,128" if cuda else "1,8")).split(",")]
    steps = args.steps or (50 if cuda else 10)
    name = torch.cuda.get_device_name() if cuda else f"CPU, {args.threads} thread(s)"
    print(f"device: {name}; torch {torch.__version__}; medians of {args.repeats} x {steps} steps")
    print(f"{'dataset':10s} {'S':>4s} {'eager ms/step':>14s} {'replay ms/step':>15s} "
          f"{'speed-up':>9s} {'kernels/step e|r':>17s} {'launches/step e|r':>18s} "
          f"{'s/seed-epoch':>13s} {'+val':>8s} {'val share':>9s} {'peak MB':>8s}")
    for ds in [] if args.no_steps else args.datasets.split(","):
        per_epoch = steps_per_epoch(ds)
        for S in sizes:
            e = measure(ds, S, "eager", device, steps, args.repeats, validate=False)
            r = measure(ds, S, "replay", device, steps, args.repeats, validate=True)
            train_epoch = r["s"] * per_epoch  # one replayed epoch of the whole pack
            val_epoch = r["val_s"] / r["every"]  # validation at the recipe's rate, per epoch
            print(f"{ds:10s} {S:4d} {e['s'] * 1e3:14.2f} {r['s'] * 1e3:15.2f} "
                  f"{e['s'] / r['s']:8.2f}x {e['kernels']:8.0f}|{r['kernels']:<8.0f} "
                  f"{e['host_launches']:8.0f}|{r['host_launches']:<9.0f} "
                  f"{train_epoch / S:13.4f} {(train_epoch + val_epoch) / S:8.4f} "
                  f"{val_epoch / (train_epoch + val_epoch):9.1%} "
                  f"{max(e['peak_mb'], r['peak_mb']):8.0f}", flush=True)

    if args.recipes:
        print("\nfull recipes, 10 seeds as one pack (curves and evaluation included)")
        for ds in args.datasets.split(","):
            cfg = TrialConfig(dataset=ds, backbone="chebygin_ref", supervision="sup",
                              seeds=tuple(range(10)), device=device.type)
            t0 = time.perf_counter()
            res = run_trial_full(cfg)
            wall = time.perf_counter() - t0
            acc: dict[str, list[float]] = {}
            for r in res.records:
                acc.setdefault(r["split"], []).append(r["accuracy"])
            accs = ", ".join(f"{k} {100 * statistics.mean(v):.1f}" for k, v in acc.items())
            aucs = [r.get("attn_auc_pooled_l0", math.nan) for r in res.records
                    if r["split"] == "test_orig"]
            accs += f"; pooled AUC l0 {100 * statistics.mean(aucs):.1f}"
            accs += f"; train_s/seed {statistics.mean(r['train_s'] for r in res.records):.1f}"
            print(f"{ds:10s} 10 seeds: {wall:8.1f} s ({wall / 10:.1f} s per seed); {accs}",
                  flush=True)

    if args.vs_sequential:
        ds, _, extra = args.vs_sequential.partition(":")
        kw = dict(kv.split("=", 1) for kv in filter(None, extra.split(",")))
        cfg = TrialConfig(dataset=ds, seeds=tuple(range(10)), device=device.type,
                          epochs=args.epochs, **kw)
        r = resolve(cfg)
        print(f"\n{ds} {kw or ''} ({r.backbone}, {r.supervision}, dropout {r.dropout}, "
              f"{r.epochs} epochs), 10 seeds")
        t0 = time.perf_counter()
        run_trial_full(cfg)
        pack = (time.perf_counter() - t0) / 10
        t0 = time.perf_counter()
        for s in range(10):
            run_trial_full(cfg.replace(seeds=(s,)))
        seq = (time.perf_counter() - t0) / 10
        print(f"  one pack: {pack:.2f} s per seed; seed by seed: {seq:.2f} s per seed; "
              f"packed {seq / pack:.2f}x faster per seed", flush=True)

    for study in filter(None, args.studies.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "ablate.run", f"study={study}",
                                   f"results_dir={tmp}", "progress=lines",
                                   *args.study_args.split()],
                                  capture_output=True, text=True)
            wall = time.perf_counter() - t0
            tail = "\n  ".join(proc.stdout.strip().splitlines()[-8:])
            print(f"\nstudy {study} {args.study_args}: {wall:.1f} s wall "
                  f"(exit {proc.returncode})\n  {tail}", flush=True)
            if proc.returncode:
                print(proc.stderr[-3000:])


if __name__ == "__main__":
    main()
