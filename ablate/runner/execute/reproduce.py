"""`reproduce=TRIAL_ID`: rerun one stored trial alone, here, and compare with the store.

The trial is found in the study as composed (study file plus the same overrides as the run:
its id hashes its config), rerun in this process with only its own seeds (no Ray, no pack,
as many torch threads as `cpus_per_trial`, as a worker runs it), and every stored metric of
every (seed, split) row and every curve point is compared with the rerun. A trial stored from a pack
(`batched_seeds` > 1) is rerun as a pack of its own seeds, a lone seed as two copies of
itself (`run_pack_full(..., twin_lone=True)`): on a CPU any pack of two or more gives a
member the same numbers, bit for bit, and a one-member model would take unbatched kernels
that round differently. A trial stored alone reruns as it ran (a lone seed on a CPU takes
the sequential path). The verdict uses the documented tolerance: CPU records rerun on a CPU
of the same vector unit (the records' `cpu_capability`: torch's vectorised kernels round by
it), and CUDA records rerun on a GPU of the same model, must be identical; across devices (a
GPU run checked on a CPU, or the reverse, a CPU run checked on another vector unit, or CPU
records that do not name theirs: written before schema v5) accuracy may move by two graphs
of the split and other metrics by 1e-2 relative, as the CUDA-vs-CPU tests allow (float
rounding moves a node across an attention threshold now and then).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ablate.errors import ConfigError

REPRODUCE_DIFFERS = 5  # exit code: the rerun does not match the store within tolerance
# what a rerun is not expected to repeat: costs, places, times, bookkeeping
NOT_COMPARED = {"train_s", "eval_s", "peak_rss_mb", "peak_gpu_mb", "trial_s", "started_at",
                "finished_at", "attempt", "batched_seeds", "epochs_run", "seed"}
GRAPHS = 2  # accuracy tolerance across devices, in graphs of the split
RELATIVE = 1e-2  # other metrics across devices


@dataclass
class Comparison:
    """Largest difference per metric over every row, and whether each stays in tolerance."""

    worst: dict[str, float] = field(default_factory=dict)
    allowed: dict[str, float] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)

    def add(self, metric: str, diff: float, allowed: float) -> None:
        if diff > self.worst.get(metric, -1.0):
            self.worst[metric] = diff
        self.allowed[metric] = min(self.allowed.get(metric, math.inf), allowed)

    @property
    def holds(self) -> bool:
        return not self.missing and all(self.worst[m] <= self.allowed[m] for m in self.worst)


def same_device(stored: list[dict], fresh: list[dict]) -> bool:
    """Whether the rerun ran where the records were made: both on CPUs of one vector unit
    (`cpu_capability`), or both on CUDA devices of one model (`gpu_name`). There a rerun must
    be identical, bit for bit (the README's promise: on a CPU of one vector unit, and on a GPU,
    run after run); elsewhere the rule across devices (`device_rule`)."""
    return device_rule(stored, fresh)[0]


def device_rule(stored: list[dict], fresh: list[dict]) -> tuple[bool, str]:
    """(whether the rerun must be identical, the rule in words as the verdict prints it).
    CPU records that do not name their vector unit (written before `cpu_capability`) get the
    rule across devices: whether the rerun's CPU rounds as theirs did is not known, and a
    rerun on another one would be told it does not hold for the rounding alone."""
    here = {_device_kind(r.get("device")) for r in fresh} or {"cpu"}
    there = {_device_kind(r.get("device")) for r in stored}
    across = (f"accuracy within {GRAPHS} graphs of the split, other metrics within "
              f"{RELATIVE:g} relative")
    if here != there or len(here) != 1:
        return False, f"{across} (stored on {_names(there)}, rerun on {_names(here)})"
    if here != {"cpu"}:
        theirs = {r.get("gpu_name") or "" for r in stored}
        ours = {r.get("gpu_name") or "" for r in fresh}
        if theirs == ours:
            return True, "CUDA records rerun on the same GPU model: identical"
        return False, f"{across} (stored on {_names(theirs)}, rerun on {_names(ours)})"
    ours = _capabilities(fresh)
    if not ours:  # a kind whose rows do not say: this process ran it
        from ablate.trial.provenance import cpu_capability

        ours = {cpu_capability()}
    theirs = _capabilities(stored)
    if "" in theirs or not theirs:
        return False, (f"{across}: the stored records do not name their CPU's vector unit "
                       f"(no cpu_capability, as in stores before schema v5), rerun on "
                       f"{_names(ours)}")
    if theirs == ours and len(ours) == 1:  # theirs holds no "" (above)
        return True, f"CPU records rerun on a CPU of the same vector unit ({_names(ours)}): " \
            "identical"
    return False, (f"{across}: stored on a CPU with {_names(theirs)}, rerun on "
                   f"{_names(ours)} (another vector unit rounds differently)")


def _capabilities(rows: list[dict]) -> set[str]:
    """The vector units `rows` name ('' for a row that names none); empty for no rows."""
    return {str(r.get("cpu_capability") or "") for r in rows}


def _names(values: set[str]) -> str:
    return "/".join(sorted(v or "unknown" for v in values))


def _device_kind(value) -> str:
    return str(value or "cpu").split(":")[0]


def _difference(a, b) -> float:
    """|a - b| for numbers (NaN = NaN), elementwise max for lists of records; inf when one
    side is missing or the values are not comparable."""
    if isinstance(a, list | tuple) or isinstance(b, list | tuple):
        if not isinstance(a, list | tuple) or not isinstance(b, list | tuple) or len(a) != len(b):
            return math.inf
        return max([_difference(x, y) for x, y in zip(a, b)], default=0.0)
    if isinstance(a, dict) or isinstance(b, dict):
        if not isinstance(a, dict) or not isinstance(b, dict) or set(a) != set(b):
            return math.inf
        return max([_difference(a[k], b[k]) for k in a], default=0.0)
    if a is None or b is None:
        return 0.0 if a is None and b is None else math.inf
    if isinstance(a, str) or isinstance(b, str):
        return 0.0 if a == b else math.inf
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
    return abs(a - b)


def _comparable(key: str, value) -> bool:
    if key in NOT_COMPARED:
        return False
    if isinstance(value, bool):
        return False
    return isinstance(value, int | float | list) or value is None


def _allowed(key: str, value, n: int, cpu: bool) -> float:
    scale = max(1.0, abs(float(value))) if isinstance(value, int | float) and \
        not math.isnan(float(value)) else 1.0
    if cpu:
        return 0.0
    if key == "accuracy" or key.startswith("acc_"):
        return GRAPHS / n + 1e-12
    if key == "n_graphs":
        return 0.0
    return RELATIVE * scale


def compare(stored: list[dict], fresh: list[dict], stored_curves: list[dict],
            fresh_curves: list[dict], cpu: bool) -> Comparison:
    """Every metric of every stored ok row against the fresh row of the same (seed, split);
    curve points by (seed, epoch). `cpu`: the CPU-on-CPU rule (module docstring), else the
    rule across devices."""
    out = Comparison()
    new = {(r["seed"], r["split"]): r for r in fresh}
    for r in stored:
        if r.get("status") != "ok":
            continue
        got = new.get((r["seed"], r["split"]))
        if got is None or got.get("status") != "ok":
            out.missing.append(f"seed {r['seed']} {r['split']}: "
                               f"{'no row' if got is None else got.get('status')} in the rerun")
            continue
        n = max(1, int(r.get("n_graphs") or 1))
        for k, v in r.items():
            if k in got and _comparable(k, v) and _comparable(k, got[k]):
                out.add(k, _difference(got[k], v), _allowed(k, v, n, cpu))
    points = {(c["seed"], c["epoch"]): c for c in fresh_curves}
    for c in stored_curves:
        got = points.get((c["seed"], c["epoch"]))
        if got is None:
            out.missing.append(f"seed {c['seed']} epoch {c['epoch']}: no curve point")
            continue
        for k, v in c.items():
            if k in ("seed", "epoch") or not (_comparable(k, v) and k in got):
                continue
            allowed = _allowed(k, v, 100, cpu)
            out.add(f"curve {k}", _difference(got[k], v), allowed)
    return out


def _stored(store, trial_id: str) -> tuple[list[dict], list[dict]]:
    from result_store import reader

    path = store.trials_dir / f"{trial_id}.parquet"
    if not path.is_file():
        raise ConfigError(f"reproduce={trial_id}: no such trial in {store.trials_dir} (run the "
                          "study first, or check the id with verify=true)")
    scan = reader.read([path], "trials", file_column=False)
    if scan.problems:
        raise ConfigError(f"reproduce={trial_id}: {scan.problems[0]}")
    rows = scan.table.to_pylist()
    curves_path = store.curves_dir / f"{trial_id}.parquet"
    curves = reader.read([curves_path], "curves", file_column=False).table.to_pylist() \
        if curves_path.is_file() else []
    return rows, curves


def reproduce(study, options: dict) -> int:
    """Rerun `options["reproduce"]` alone and print per metric the largest difference from
    the store and the verdict; 0 when it holds, `REPRODUCE_DIFFERS` when it does not."""
    import torch

    from ablate.runner.execute.store import Store
    from ablate.runner.study.kinds import trial_kind

    tid = options["reproduce"]
    store = Store(options["results_dir"], study.name)
    trial = next((t for t in study.trials if t.trial_id == tid), None)
    if trial is None:
        raise ConfigError(f"reproduce={tid}: not a trial of study {study.name} as composed here "
                          "(pass the overrides of the run that stored it; dry_run=true lists "
                          "the ids)")
    stored, stored_curves = _stored(store, tid)
    ok = [r for r in stored if r.get("status") == "ok"]
    if not ok:
        raise ConfigError(f"reproduce={tid}: the stored trial has no ok rows to compare "
                          f"(status {stored[0].get('status') if stored else 'none'})")
    torch.set_num_threads(max(1, int(study.spec.cpus_per_trial)))  # as a worker runs it
    seeds = sorted({r["seed"] for r in ok})
    print(f"reproducing {tid} ({study.name}, seeds {', '.join(map(str, seeds))}) on this "
          f"machine...", flush=True)
    packed = max(int(r.get("batched_seeds") or 1) for r in ok) > 1
    if trial.kind == "graph" and packed:  # as it trained: in a pack (of two or more)
        from ablate.trial.graph import run_pack_full

        res = run_pack_full([trial.config], twin_lone=True)[0]
    else:
        res = trial_kind(trial.kind).run(trial.config)
    identical, rule = device_rule(ok, res.records)
    got = compare(ok, res.records, [c for c in stored_curves if c["seed"] in seeds],
                  res.curves, identical)
    if not identical and got.holds and all(v == 0 for v in got.worst.values()):
        rule += "; every number identical, bit for bit"
    print(f"{'metric':<28} {'largest difference':>20} {'allowed':>12}")
    for m in sorted(got.worst):
        mark = "" if got.worst[m] <= got.allowed[m] else "  <- differs"
        print(f"{m:<28} {got.worst[m]:>20.3g} {got.allowed[m]:>12.3g}{mark}")
    for line in got.missing:
        print(f"missing: {line}")
    verdict = "holds" if got.holds else "does NOT hold"
    print(f"reproduce {tid}: {verdict} ({rule}; {len(ok)} rows, "
          f"{len([c for c in stored_curves if c['seed'] in seeds])} curve points)")
    return 0 if got.holds else REPRODUCE_DIFFERS
