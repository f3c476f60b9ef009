"""What a study will cost before it runs: seconds and memory per trial, then the wall time on
the resources the run will have.

Per trial, the first of:

1. **records**: trials already stored anywhere under the results root with the same cost
   shape: the trial's axes without the values that only change a member's numbers (seeds,
   init of p, threshold, ratio, kl_weight), plus the device kind. Each stored trial gives
   seconds per seed (`trial_s`, the worker's time for the attempt, over the seeds trained
   with it: its pack, or its own seeds) and its peak memory; the estimate is the median.
   Records were made with as many trials at once as their run had.
2. **calibration** (`estimate=calibrate`): the trial path run here on one seed, for one
   epoch and for three epochs validated once: the difference is the cost of an epoch, the
   rest the fixed part (data, final evaluation, leave-one-out, weak supervision's model B
   scales with the epochs too); scaled to the recipe's epochs and validations. With several
   trial slots on a CPU, the same one-epoch run in as many processes at once measures how
   much trials at once slow each other, and calibrated costs are scaled by it. A shape that
   cannot be calibrated (out of memory, data that cannot be prepared) has no estimate.
3. **none**.

The wall time places the packs the runner would make (`ablate.runner.plan.packing`), longest
first, on the trial slots: this machine's CPUs / `cpus_per_trial` (its GPUs /
`gpus_per_trial` when trials get GPUs), fewer where the estimated memory per trial does not
fit this machine's memory. Ray's start-up and the runner's per-trial overhead are not in it.
A cluster's resources are not known to a dry run: the wall time is for this machine.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

# not part of a cost shape: values that change only a member's numbers, and the device (its
# config value is "auto"; the kind it ran on is added to the shape instead)
PER_MEMBER = {"study", "seeds", "init_dist", "init_scale", "threshold", "ratio", "kl_weight",
              "device"}
MODES = ("records", "calibrate", "off")
SOURCES = ("records", "calibration", "none")


@dataclass
class TrialCost:
    seconds: float | None  # all of the trial's seeds, alone on its slot
    memory_mb: float | None
    source: str  # records, calibration or none


@dataclass
class StudyCost:
    trials: dict[str, TrialCost]  # trial id -> cost
    wall_s: float | None
    slots: int
    slot_kind: str  # "CPU" or "GPU"
    packs: int
    contention: float = 1.0  # calibrated slow-down of trials at once (1: none measured)
    notes: list[str] = field(default_factory=list)
    unpriced_shapes: int = 0  # distinct trial shapes without an estimate that calibrate would run

    def share(self, source: str) -> float:
        return sum(c.source == source for c in self.trials.values()) / max(1, len(self.trials))

    def line(self) -> str:
        parts = ", ".join(f"{self.share(s):.0%} {s}" for s in SOURCES)
        wall = duration(self.wall_s) if self.wall_s is not None else "unknown"
        if self.wall_s is not None and self.share("none"):
            wall += " for the trials with an estimate"
        mem = [c.memory_mb for c in self.trials.values() if c.memory_mb is not None]
        peak = f", up to {max(mem):.0f} MB per trial" if mem else ""
        return (f"estimate: {wall} wall on {self.slots} {self.slot_kind} trial slot(s) here "
                f"({self.packs} packs; Ray's start-up and per-trial overhead not included)"
                f"{peak}; from {parts}{self.how_to_price()}")

    def how_to_price(self) -> str:
        """What gives the trials without an estimate one (said on the estimate's line)."""
        if not self.unpriced_shapes:
            return ""
        n = self.unpriced_shapes
        return (f"; to get one, add estimate=calibrate: it trains each of the {n} trial "
                f"shape(s) without one here for 2 epochs, validated once (preparing, or "
                f"downloading, a data set first where needed), and times trials at once when "
                f"several fit, before it prints the table")


def duration(s: float) -> str:
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


def device_kind(config, gpus: float) -> str:
    return "cuda" if gpus > 0 and getattr(config, "device", "auto") in ("auto", "cuda") else "cpu"


def _norm(v) -> str:
    """One text for a value however it was typed (a stored int column with nulls reads as
    float, numpy scalars, a null as None, NaN or pandas' NA)."""
    import numbers

    import numpy as np

    if v is None or type(v).__name__ in ("NAType", "NaTType"):
        return ""
    if isinstance(v, bool | np.bool_):
        return str(bool(v))
    if isinstance(v, numbers.Number):
        f = float(v)
        return "" if math.isnan(f) else repr(f)
    return str(v)


def shape_key(columns: dict, device: str) -> tuple:
    """What a trial's cost depends on: its axes without the per-member values, its device."""
    return tuple(sorted((k, _norm(v)) for k, v in columns.items() if k not in PER_MEMBER)) + (
        ("device", device),)


def _trial_columns(trial) -> dict:
    from ablate.runner.study.kinds import trial_kind

    return trial_kind(trial.kind).columns(trial.config)


# ------------------------------------------------------------------------------ records


def record_costs(results_root: str | os.PathLike, axes: set[str]) -> dict[tuple, TrialCost]:
    """Median seconds per seed and peak memory per cost shape, from every trial file under
    `results_root` (any study); unreadable files are skipped."""
    import pandas as pd

    from result_store import reader

    root = Path(results_root).expanduser()
    files = [f for d in sorted(root.glob("*/trials")) for f in reader.result_files(d)]
    if not files:
        return {}
    want = axes | {"trial_id", "seed", "status", "trial_s", "train_s", "eval_s",
                   "batched_seeds", "peak_rss_mb", "device"}
    try:
        table = reader.read(files, "trials", columns=want, file_column=False).table
    except Exception:  # noqa: BLE001 - a store newer than this code: no records
        return {}
    if not table.num_rows:
        return {}
    df = table.to_pandas()
    df = df[df["status"] == "ok"]
    per_seed: dict[tuple, list[float]] = {}
    memory: dict[tuple, list[float]] = {}
    for _, g in df.groupby("trial_id", sort=False):
        first = g.iloc[0]
        seeds = g["seed"].nunique()
        batched = first.get("batched_seeds")
        together = max(1 if batched is None or pd.isna(batched) else int(batched), seeds)
        spent = first.get("trial_s")
        if spent is None or pd.isna(spent):  # older records: training plus evaluation
            runs = g.groupby("seed")
            spent = float((runs["train_s"].first() + runs["eval_s"].sum()).sum()) * together \
                / seeds
        dev = "cuda" if str(first.get("device") or "cpu").startswith("cuda") else "cpu"
        key = shape_key({k: first[k] for k in axes if k in g.columns}, dev)
        per_seed.setdefault(key, []).append(float(spent) / together)
        if "peak_rss_mb" in g.columns and g["peak_rss_mb"].notna().any():
            memory.setdefault(key, []).append(float(g["peak_rss_mb"].max()))
    return {k: TrialCost(statistics.median(v), statistics.median(memory[k]) if memory.get(k)
                         else None, "records") for k, v in per_seed.items()}


# --------------------------------------------------------------------------- calibration


def _run_timed(trial, epochs: int, eval_every: int | None) -> tuple[float, list[dict]]:
    from ablate.runner.study.kinds import trial_kind

    cfg = dataclasses.replace(trial.config, epochs=epochs,
                              **({"eval_every": eval_every} if eval_every else {}))
    t0 = time.perf_counter()
    res = trial_kind(trial.kind).run(cfg)
    return time.perf_counter() - t0, res.records


def calibrate(trial) -> tuple[TrialCost, float]:
    """(cost of `trial` at its recipe, seconds the calibration took): the trial path run here
    with the trial's own seeds for 2 epochs, validated once. Its records split the time into
    training (per epoch, `train_s`), one validation and the final evaluation with
    leave-one-out (`eval_s` per split); what is left (data, set-up, weak supervision's model
    B and its targets) is fixed, or grows with the epochs under weak supervision. Any
    failure (out of memory, data that cannot be prepared): no estimate."""
    from ablate.trial.provenance import peak_rss_mb, reset_peak_rss

    cfg = trial.config
    epochs = getattr(cfg, "epochs", None)
    if not epochs or not hasattr(cfg, "eval_every"):
        return TrialCost(None, None, "none"), 0.0
    reset_peak_rss()  # this calibration's own peak, not the driver's before it
    try:
        wall, recs = _run_timed(trial, 2, 2)
    except Exception:  # noqa: BLE001 - out of memory, data that cannot be prepared, ...
        return TrialCost(None, None, "none"), 0.0
    if not recs or any(r.get("status") != "ok" for r in recs):
        return TrialCost(None, None, "none"), wall
    n = len(cfg.seeds)
    first = [r for r in recs if r["seed"] == recs[0]["seed"]]
    fit = float(first[0]["train_s"]) * n  # 2 epochs and one validation, all seeds
    evals = sum(float(r["eval_s"]) for r in first) * n  # the final evaluation, all splits
    val = next((float(r["eval_s"]) for r in first if r["split"] == "val"), 0.0) * n
    rest = max(0.0, wall - fit - evals)
    every = cfg.eval_every or max(1, epochs // 50)
    validations = len(range(every, epochs + 1, every)) + (1 if epochs % every else 0)
    grows = getattr(cfg, "supervision", "") == "weak"  # model B trains the recipe's epochs
    total = (evals + epochs * max(0.0, fit - val) / 2 + validations * val
             + (rest * epochs / 2 if grows else rest))
    return TrialCost(total, peak_rss_mb(), "calibration"), wall


def _contention_child(trial, threads: int, queue) -> None:
    import torch

    torch.set_num_threads(threads)  # as a worker runs it
    try:
        queue.put(_run_timed(trial, 1, None)[0])
    except Exception:  # noqa: BLE001
        queue.put(math.nan)


def contention(trial, k: int, threads: int = 1) -> float:
    """How much slower one trial runs with `k` running at once on this machine: the same
    one-epoch calibration run in `k` processes at once against one alone (>= 1)."""
    import multiprocessing as mp

    if k < 2:
        return 1.0
    ctx = mp.get_context("spawn")
    alone = []
    for n in (1, k):
        q = ctx.Queue()
        procs = [ctx.Process(target=_contention_child, args=(trial, threads, q))
                 for _ in range(n)]
        for p in procs:
            p.start()
        times = [q.get(timeout=3600) for _ in procs]
        for p in procs:
            p.join()
        alone.append(statistics.median(times))
    if any(math.isnan(t) or t <= 0 for t in alone):
        return 1.0
    return max(1.0, alone[1] / alone[0])


# ------------------------------------------------------------------------------ schedule


def machine_memory_mb() -> float | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20
    except (ValueError, OSError, AttributeError):
        return None


def slots_here(spec, gpus: float, memory_mb: float | None) -> tuple[int, str]:
    """Trials at once on this machine (`resources.trials_at_once` on `resources_here`): its
    CPUs / cpus_per_trial, its GPUs / gpus_per_trial when trials get GPUs, and Ray's memory
    resource / `memory_mb` each."""
    from ablate.runner.plan.resources import resources_here, trials_at_once

    request = {"CPU": spec.cpus_per_trial, "GPU": gpus,
               "memory": (memory_mb or 0) * 2**20}
    return trials_at_once(request, resources_here(gpus > 0)), "GPU" if gpus > 0 else "CPU"


def makespan(costs: list[float], slots: int) -> float:
    """Longest first onto the least loaded slot (list scheduling)."""
    load = [0.0] * max(1, slots)
    for c in sorted(costs, reverse=True):
        i = load.index(min(load))
        load[i] += c
    return max(load)


def estimate(study, results_root: str | os.PathLike, mode: str = "records",
             gpus: float | None = None) -> StudyCost:
    """Per-trial costs (records, then calibration with mode="calibrate") and the wall time of
    the study's packs on this machine's trial slots."""
    from ablate.runner.plan.packing import make_packs, pack_seeds

    spec = study.spec
    if gpus is None:
        if spec.gpus_per_trial == "auto":
            import torch

            gpus = 0.25 if torch.cuda.is_available() else 0.0
        else:
            gpus = float(spec.gpus_per_trial)
    cols = {t.trial_id: _trial_columns(t) for t in study.trials}
    keys = {t.trial_id: shape_key(cols[t.trial_id], device_kind(t.config, gpus))
            for t in study.trials}
    axes = set().union(*cols.values()) - PER_MEMBER if cols else set()
    known = record_costs(results_root, axes) if mode != "off" else {}
    out: dict[str, TrialCost] = {}
    threads = max(1, int(spec.cpus_per_trial))
    if mode == "calibrate":
        import torch

        torch.set_num_threads(threads)  # calibrate as a worker runs a trial
    calibrated: dict[tuple, TrialCost] = {}
    cheapest: tuple[float, object] = (math.inf, None)  # the quickest calibrated trial
    spent = 0.0
    unpriced: set[tuple] = set()  # shapes calibrate would run (mode records)
    for t in study.trials:
        key = keys[t.trial_id]
        seeds = len(getattr(t.config, "seeds", (0,)))
        if key in known:
            c = known[key]
            out[t.trial_id] = TrialCost(c.seconds * seeds, c.memory_mb, "records")
        elif mode == "calibrate":
            ckey = key + (("seeds", seeds),)  # packing on a CPU pays: calibrate as it runs
            if ckey not in calibrated:
                calibrated[ckey], took = calibrate(t)
                spent += took
                if calibrated[ckey].source == "calibration" and took < cheapest[0]:
                    cheapest = (took, t)
            c = calibrated[ckey]
            out[t.trial_id] = TrialCost(c.seconds, c.memory_mb, c.source)
        else:
            out[t.trial_id] = TrialCost(None, None, "none")
            unpriced.add(key + (("seeds", seeds),))
    mem = [c.memory_mb for c in out.values() if c.memory_mb]
    slots, kind = slots_here(spec, gpus, max(mem) if mem else None)
    factor = 1.0
    if cheapest[1] is not None and kind == "CPU" and slots > 1:
        t0 = time.perf_counter()
        factor = contention(cheapest[1], min(slots, len(study.trials)), threads)
        spent += time.perf_counter() - t0
        for c in out.values():
            if c.source == "calibration" and c.seconds is not None:
                c.seconds *= factor
    packs = make_packs(study.trials, pack_seeds(spec.pack_size, gpus))
    costs = []
    for p in packs:
        known_costs = [out[t.trial_id].seconds for t in p.trials]
        known_costs = [c for c in known_costs if c is not None]
        if known_costs:
            costs.append(sum(known_costs))
    wall = makespan(costs, slots) if costs else None
    notes = [f"calibration took {duration(spent)} here; trials at once ran {factor:.2f}x "
             f"slower each than alone"] if mode == "calibrate" and calibrated else []
    return StudyCost(out, wall, slots, kind, len(packs), factor, notes,
                     len(unpriced) if mode == "records" else 0)
