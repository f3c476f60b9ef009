"""The GPU check: everything a GPU must show, in one command of at most ~9 minutes.

    python benchmarks/gpu_check.py OUTDIR            # on a CUDA machine (exit 2 without one)
    python benchmarks/gpu_check.py OUTDIR --tiny     # the same sections, tiny, on the CPU

Writes OUTDIR/gpu_check.json (machine, versions, date, every section's figures) and
OUTDIR/gpu_check.log (everything printed, pytest's output included). Sections, in order,
each under its own time cap (a section that runs out says how far it got; one that cannot
start in the time left is marked skipped):

1. `tests`: the CUDA tests (`-k cuda` over the files that hold them) in a pytest subprocess.
2. `steps`: `bench_gpu.measure` for TRIANGLES and COLORS (ChebyGIN sup, reference recipe)
   at 1 / 8 / 64 members, eager vs replayed: ms per step, kernels and host launches per
   step, seconds per seed-epoch with one validation at the recipe's rate, its share, peak
   GPU memory.
3. `colors_recipe`, `triangles_recipe`: the 10-seed supervised recipes as one pack
   (`run_trial_full`; TRIANGLES at its full 100 epochs, stopped at the cap with the epochs
   it finished and their times).
4. `init`: the `init` study's 104 inits of p (COLORS GIN unsup, 8 rows x 13 seeds, trials
   of 5 / 5 / 3 seeds packed up to 64 seeds as the runner packs them on a GPU) through the
   trial path (`run_pack_full`), with r(accuracy, AUC) on the test split.
5. `authors`: skipped with its reason: no GPU side-by-side run of the authors' code is built
   (benchmarks/tu_fidelity.py runs their TU code beside ours on the CPU).

The GPU machine has torch, PyG, numpy, pandas, pyarrow, scikit-learn and scikit-image but
no Ray, Optuna or Hydra: this script blocks those imports in itself and in its pytest run, so
the tiny CPU mode (tests/test_gpu_check.py) proves the check does not need them.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.abc
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("ray", "optuna", "hydra", "omegaconf")  # absent on the GPU machine
CUDA_TEST_FILES = ("tests/test_cuda.py", "tests/test_capture.py", "tests/test_batched.py",
                   "tests/test_dropout.py")
CAPS = {"tests": 120, "steps": 80, "colors_recipe": 45, "triangles_recipe": 240, "init": 90}
TINY_CAPS = {"tests": 180, "steps": 120, "colors_recipe": 60, "triangles_recipe": 60, "init": 60}
TINY_COLORS = (("n_max_large", 40), ("n_test", 40), ("n_train", 64), ("n_val", 40))
TINY_TRI = (("n_max_large", 30), ("n_test", 20), ("n_train", 60), ("n_val", 20))


class _Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is not on the GPU machine (blocked by gpu_check)")
        return None


def block_cluster_stack() -> None:
    """Make `import ray` (optuna, hydra, omegaconf) fail, as on the GPU machine."""
    if not any(isinstance(f, _Blocker) for f in sys.meta_path):
        sys.meta_path.insert(0, _Blocker())


class _Tee:
    def __init__(self, *streams):
        self.streams = streams

    def write(self, s):
        for st in self.streams:
            st.write(s)
            st.flush()
        return len(s)

    def flush(self):
        for st in self.streams:
            st.flush()


class OutOfTime(Exception):
    """A recipe reached its section's time cap (raised at an epoch boundary)."""


@contextlib.contextmanager
def epoch_clock(deadline: float, log: list[float]):
    """Record the start time of every training epoch of the packed trainer (`lr_at` is asked
    once per epoch) and stop the run with `OutOfTime` at the first epoch past `deadline`."""
    from ablate.trial import packed

    original = packed.lr_at

    def timed(cfg, epoch):
        now = time.perf_counter()
        if now > deadline:
            raise OutOfTime(epoch - 1)
        log.append(now)
        return original(cfg, epoch)

    packed.lr_at = timed
    try:
        yield
    finally:
        packed.lr_at = original


def machine() -> dict:
    import torch

    info = {"date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "host": platform.node(), "cpus": os.cpu_count()}
    with contextlib.suppress(Exception):
        from importlib.metadata import version
        info["torch_geometric"] = version("torch_geometric")
        info["numpy"] = version("numpy")
    with contextlib.suppress(Exception):
        info["git_sha"] = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                                         capture_output=True, text=True,
                                         timeout=5).stdout.strip()
    with contextlib.suppress(Exception):  # '' = the commit; else the tree that ran differs from it
        from ablate.trial.provenance import tree_state

        info["git_dirty"] = tree_state(str(ROOT))
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, gpu_memory_mb=round(p.total_memory / 2**20),
                    capability=f"{p.major}.{p.minor}", multiprocessors=p.multi_processor_count,
                    cudnn=torch.backends.cudnn.version())
        with contextlib.suppress(Exception):
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20).stdout.strip()
    return info


# ------------------------------------------------------------------------------ sections


def run_tests(cap: float, tiny: bool) -> dict:
    """The CUDA tests in a subprocess that cannot import the cluster stack either."""
    code = ("import sys; sys.path.insert(0, 'benchmarks'); import gpu_check; "
            "gpu_check.block_cluster_stack(); import pytest; "
            "sys.exit(pytest.main(sys.argv[1:]))")
    args = [sys.executable, "-c", code, "-rfEs", "-p", "no:cacheprovider",
            "-k", "cuda", *CUDA_TEST_FILES]
    t0 = time.perf_counter()
    try:
        # no plugins by entry point: hydra's would import omegaconf (not on the GPU machine)
        env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=cap,
                              env=env)
        out, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        out, rc = out + f"\n[gpu_check] pytest stopped at its {cap:.0f} s cap", None
    print(out)
    counts = {k: 0 for k in ("passed", "failed", "skipped", "error")}
    tail = [line for line in out.splitlines()
            if re.search(r"\d+ (passed|failed|skipped|errors?)\b.* in [\d.]+s", line)]
    for n, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?)", tail[-1] if tail else ""):
        counts["error" if kind.startswith("error") else kind] = int(n)
    failures = [line for line in out.splitlines() if line.startswith(("FAILED", "ERROR"))]
    status = "ok" if rc == 0 and not failures else ("timeout" if rc is None else "failed")
    return {"status": status, "returncode": rc, **counts, "failures": failures,
            "wall_s": round(time.perf_counter() - t0, 1)}


def run_steps(deadline: float, tiny: bool) -> dict:
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_gpu

    device = torch.device("cuda" if torch.cuda.is_available() and not tiny else "cpu")
    sizes = (1, 2) if tiny else (1, 8, 64)
    steps, repeats = (2, 1) if tiny else (30, 3)
    rows, skipped = [], []
    for ds, params in (("triangles", TINY_TRI if tiny else ()),
                       ("colors", TINY_COLORS if tiny else ())):
        per_epoch = bench_gpu.steps_per_epoch(ds, params)
        for S in sizes:
            if time.perf_counter() > deadline:
                skipped.append(f"{ds} S={S}")
                continue
            e = bench_gpu.measure(ds, S, "eager", device, steps, repeats, False, params)
            r = bench_gpu.measure(ds, S, "replay", device, steps, repeats, True, params)
            train_epoch = r["s"] * per_epoch
            val_epoch = r["val_s"] / r["every"]
            row = {"dataset": ds, "S": S, "eager_ms": e["s"] * 1e3, "replay_ms": r["s"] * 1e3,
                   "speedup": e["s"] / r["s"], "kernels_eager": e["kernels"],
                   "kernels_replay": r["kernels"], "launches_eager": e["host_launches"],
                   "launches_replay": r["host_launches"], "steps_per_epoch": per_epoch,
                   "s_per_seed_epoch": train_epoch / S,
                   "s_per_seed_epoch_with_val": (train_epoch + val_epoch) / S,
                   "val_s": r["val_s"], "val_every": r["every"],
                   "val_share": val_epoch / (train_epoch + val_epoch),
                   "peak_mb": max(e["peak_mb"], r["peak_mb"])}
            rows.append(row)
            print(f"steps {ds:9s} S={S:3d} eager {row['eager_ms']:7.2f} ms  replay "
                  f"{row['replay_ms']:7.2f} ms  x{row['speedup']:.2f}  "
                  f"{row['s_per_seed_epoch_with_val']:.4f} s/seed-epoch (+val, share "
                  f"{row['val_share']:.1%})  peak {row['peak_mb']:.0f} MB", flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return {"status": "ok" if not skipped else "partial", "device": str(device),
            "steps_per_timing": steps, "repeats": repeats, "rows": rows, "skipped": skipped}


def _summary(records: list[dict]) -> dict:
    acc: dict[str, list[float]] = {}
    for r in records:
        if r.get("status") == "ok":
            acc.setdefault(r["split"], []).append(r["accuracy"])
    out = {f"acc_{k}": 100 * statistics.mean(v) for k, v in acc.items()}
    aucs = [r.get("attn_auc_pooled_l0", math.nan) for r in records
            if r.get("split") == "test_orig"]
    aucs = [a for a in aucs if not math.isnan(a)]
    if aucs:
        out["pooled_auc_l0"] = 100 * statistics.mean(aucs)
    out["statuses"] = sorted({r.get("status", "?") for r in records})
    return out


def run_recipe(dataset: str, deadline: float, tiny: bool) -> dict:
    import torch

    from ablate.config import TrialConfig, resolve
    from ablate.trial.graph import run_trial_full

    device = "cuda" if torch.cuda.is_available() and not tiny else "cpu"
    params = {"colors": TINY_COLORS, "triangles": TINY_TRI}[dataset] if tiny else ()
    n_seeds = 2 if tiny else 10
    cfg = TrialConfig(dataset=dataset, backbone="chebygin_ref", supervision="sup",
                      seeds=tuple(range(n_seeds)), device=device, data_params=params,
                      epochs=2 if tiny else None)
    epochs = resolve(cfg).epochs
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    starts: list[float] = []
    t0 = time.perf_counter()
    out: dict = {"seeds": n_seeds, "epochs": epochs, "device": device}
    try:
        with epoch_clock(deadline, starts):
            res = run_trial_full(cfg)
        wall = time.perf_counter() - t0
        out.update(status="ok", wall_s=wall, s_per_seed=wall / n_seeds, **_summary(res.records),
                   train_s_per_seed=statistics.mean(r["train_s"] for r in res.records
                                                    if "train_s" in r))
    except OutOfTime as e:
        done = int(e.args[0])
        wall = time.perf_counter() - t0
        out.update(status="capped", wall_s=wall, epochs_done=done)
    per_epoch = [b - a for a, b in zip(starts, starts[1:])]
    if per_epoch:
        # epoch k's time = start of k+1 - start of k (validation at the recipe's rate inside)
        out["epoch_s_median"] = statistics.median(per_epoch)
        out["first_epoch_s"] = per_epoch[0]
        out["s_per_seed_epoch"] = statistics.median(per_epoch) / n_seeds
        if out["status"] == "capped":
            out["projected_train_s_full_recipe"] = (per_epoch[0] + statistics.median(per_epoch)
                                                    * (epochs - 1))
    if device == "cuda":
        out["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
        torch.cuda.empty_cache()
    print(f"{dataset} recipe ({n_seeds} seeds, {epochs} epochs): " + json.dumps(
        {k: (round(v, 3) if isinstance(v, float) else v) for k, v in out.items()}), flush=True)
    return out


INIT_ROWS = [(d, s) for d in ("normal", "uniform") for s in (0.01, 0.1, 1.0, 10.0)]


def init_packs(tiny: bool) -> list[list]:
    """The `init` study's trials (rows of 13 seeds in chunks of 5, 5, 3) grouped as the
    runner packs them on a GPU: in order, up to 64 seeds a pack, a trial never split."""
    from ablate.config import TrialConfig

    seeds_per_row, chunk, limit = (2, 1, 2) if tiny else (13, 5, 64)
    rows = INIT_ROWS[:2] if tiny else INIT_ROWS
    trials = []
    for i, (dist, scale) in enumerate(rows):
        seeds = list(range(i * seeds_per_row, (i + 1) * seeds_per_row))
        for j in range(0, len(seeds), chunk):
            trials.append(TrialConfig(
                dataset="colors", backbone="gin", pool_layers=(1,), scorer="fc",
                scorer_input="prev", supervision="unsup", threshold=0.03, init_dist=dist,
                init_scale=scale, seeds=tuple(seeds[j:j + chunk]),
                device="cpu" if tiny else "cuda",
                data_params=TINY_COLORS if tiny else (), epochs=2 if tiny else None))
    packs: list[list] = [[]]
    for t in trials:
        if packs[-1] and sum(len(x.seeds) for x in packs[-1]) + len(t.seeds) > limit:
            packs.append([])
        packs[-1].append(t)
    return packs


def run_init(deadline: float, tiny: bool) -> dict:
    import numpy as np

    from ablate.trial.graph import run_pack_full

    packs = init_packs(tiny)
    t0 = time.perf_counter()
    walls, records, starts = [], [], []
    out: dict = {"inits": sum(len(c.seeds) for p in packs for c in p), "packs": len(packs),
                 "pack_seeds": [sum(len(c.seeds) for c in p) for p in packs]}
    try:
        with epoch_clock(deadline, starts):
            for p in packs:
                tp = time.perf_counter()
                for res in run_pack_full(p):
                    records.extend(res.records)
                walls.append(time.perf_counter() - tp)
        out["status"] = "ok"
    except OutOfTime as e:
        out.update(status="capped", epochs_done_in_last_pack=int(e.args[0]))
    out.update(wall_s=time.perf_counter() - t0, pack_wall_s=walls, packs_done=len(walls))
    test = [r for r in records if r.get("split") == "test_orig" and r.get("status") == "ok"]
    if test:
        acc = np.array([r["accuracy"] for r in test])
        auc = np.array([r.get("attn_auc_l0", math.nan) for r in test])
        ok = ~np.isnan(auc)
        out.update(test_acc_mean=100 * float(acc.mean()), test_auc_mean=100 * float(
            np.nanmean(auc)) if ok.any() else math.nan, n_test_records=len(test))
        if ok.sum() > 2 and acc[ok].std() > 0 and auc[ok].std() > 0:
            out["r_acc_auc"] = float(np.corrcoef(acc[ok], auc[ok])[0, 1])
    print("init: " + json.dumps({k: (round(v, 3) if isinstance(v, float) else v)
                                 for k, v in out.items()}), flush=True)
    return out


def run_authors(_path: str | None) -> dict:
    """The authors' code is run beside ours by benchmarks/tu_fidelity.py (TU, CPU); on a GPU no
    side-by-side run is built: say so rather than imply one."""
    return {"status": "skipped", "why": "no GPU side-by-side run of the authors' code exists; "
            "benchmarks/tu_fidelity.py runs it beside ours on the CPU (TU)"}


# ---------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", help="folder for gpu_check.json and gpu_check.log")
    ap.add_argument("--tiny", action="store_true", help="tiny data and packs, on the CPU "
                    "(proves the check runs; its numbers mean nothing)")
    ap.add_argument("--only", default="", help="comma list of sections to run (default all)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every time cap")
    args = ap.parse_args(argv)
    block_cluster_stack()
    sys.path.insert(0, str(ROOT))
    import torch

    if not args.tiny and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here (use --tiny for the CPU mode)", file=sys.stderr)
        return 2
    if not args.tiny:  # every section as a trial runs on CUDA: deterministic algorithms on
        from ablate.trial.setup import deterministic_cuda

        deterministic_cuda()
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    log = open(out / "gpu_check.log", "w")  # noqa: SIM115 - closed below
    stdout = sys.stdout
    sys.stdout = _Tee(stdout, log)
    torch.set_flush_denormal(True)
    caps = {k: v * args.scale for k, v in (TINY_CAPS if args.tiny else CAPS).items()}
    only = set(filter(None, args.only.split(",")))
    report = {"mode": "tiny" if args.tiny else "full", "machine": machine(), "caps_s": caps,
              "sections": {}}
    print(json.dumps(report["machine"]), flush=True)
    t_start = time.perf_counter()
    sections = {
        "tests": lambda cap: run_tests(cap, args.tiny),
        "steps": lambda cap: run_steps(time.perf_counter() + cap, args.tiny),
        "colors_recipe": lambda cap: run_recipe("colors", time.perf_counter() + cap, args.tiny),
        "triangles_recipe": lambda cap: run_recipe("triangles", time.perf_counter() + cap,
                                                   args.tiny),
        "init": lambda cap: run_init(time.perf_counter() + cap, args.tiny),
        "authors": lambda cap: run_authors(None),
    }
    for name, fn in sections.items():
        if only and name not in only:
            continue
        print(f"\n=== {name} (cap {caps.get(name, 0):.0f} s, "
              f"{time.perf_counter() - t_start:.0f} s in)", flush=True)
        t0 = time.perf_counter()
        try:
            res = fn(caps.get(name, 0))
        except Exception as e:  # noqa: BLE001 - one section's failure is a finding, not the end
            traceback.print_exc()
            res = {"status": "error", "error": f"{type(e).__name__}: {e}"[:2000]}
        res["section_wall_s"] = time.perf_counter() - t0
        report["sections"][name] = res
        (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    report["wall_s"] = time.perf_counter() - t_start
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    print(f"\ngpu_check: {report['wall_s']:.0f} s; " + ", ".join(
        f"{k} {v.get('status')}" for k, v in report["sections"].items()), flush=True)
    sys.stdout = stdout
    log.close()
    bad = [k for k, v in report["sections"].items() if v.get("status") in ("error", "failed")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
