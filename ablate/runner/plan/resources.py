"""Memory as a resource of Ray trials: what each pack needs and what the nodes have.

Each pack (one Ray trial) declares the host memory its trials need (`pack_memory`: the
trial kind's `host_memory`, computed from the prepared dataset's sizes in its cache file)
as Ray's ``memory`` resource beside its CPUs and GPUs, so Ray starts no more trials on a
node than its memory holds. `check_memory` refuses, in one line, a study with a pack that
fits no node; `memory_plan` is what a dry run prints: memory per trial and how many
trials run at once here.

What a node has is Ray's ``memory`` resource: the node's available memory less the object
store (by default 30% of it), as `node_memory_estimate` predicts it before Ray starts.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.errors import ConfigError

if TYPE_CHECKING:
    from ablate.runner.plan.packing import Pack
    from ablate.runner.study.expand import Study, Trial

GB = 1 << 30
ROUND = 256 << 20  # needs are rounded up to this, so packs of one recipe ask alike (actor reuse)


def dataset_footprint(t: Trial) -> dict | None:
    """The prepared dataset's footprint (`ablate.data.cache.footprint`) of trial `t`, or None
    when it has no dataset or it is not prepared (yet) in this process's cache."""
    if not t.data_hash:
        return None
    from ablate.data import dataset_cache_path
    from ablate.data.cache import StaleCache, footprint

    where = (t.data_hash, os.environ.get("ABLATE_CACHE"))  # the recipe's file, found once
    path = _PATHS.get(where)
    if path is None:
        path = _PATHS[where] = dataset_cache_path(t.dataset, dict(t.data_params))
    try:
        st = path.stat()
    except OSError:
        return None
    key = (str(path), st.st_mtime_ns, st.st_size)  # the file as it is now: read once
    if key not in _FOOTPRINTS:
        try:
            _FOOTPRINTS[key] = footprint(path)
        except StaleCache:
            _FOOTPRINTS[key] = None
    return _FOOTPRINTS[key]


_PATHS: dict[tuple, Path] = {}  # (data hash, $ABLATE_CACHE) -> the recipe's cache file
_FOOTPRINTS: dict[tuple, dict | None] = {}  # (path, mtime, size) -> footprint of that file


def trials_memory(trials: list[Trial]) -> int | None:
    """Bytes of host memory the trials need when they run as one pack, rounded up to `ROUND`;
    None if their kind does not say."""
    from ablate.runner.study.kinds import trial_kind

    t = trials[0]
    need = trial_kind(t.kind).host_memory([x.config for x in trials], dataset_footprint(t))
    return None if need is None else int(math.ceil(need / ROUND) * ROUND)


def pack_memory(pack: Pack) -> int | None:
    """Bytes of host memory one pack needs (`trials_memory` of its trials)."""
    return trials_memory(list(pack.trials))


def trials_at_once(request: dict[str, float], available: dict[str, float]) -> int:
    """How many trials asking for `request` (Ray resources: CPU, GPU, memory in bytes) fit in
    `available` at once, at least 1. The one rule for "how many trials fit here": the dry run's
    memory line (`memory_plan`), the study's time estimate (`estimate.slots_here`) and the
    hand-over's limit on trials in flight (`driver`) all ask it. A resource the trial does not
    ask for does not limit it; Ray's fractional amounts are compared with a tolerance."""
    fits = [available.get(k, 0.0) / v for k, v in request.items() if v]
    return max(1, int(min(fits) + 1e-9)) if fits else 1


def resources_here(gpus: bool = False) -> dict[str, float]:
    """What an embedded Ray started now on this machine offers trials: its CPUs, Ray's
    ``memory`` resource (`node_memory_estimate`) and, with `gpus`, its CUDA devices."""
    out = {"CPU": float(os.cpu_count() or 1), "memory": float(node_memory_estimate())}
    if gpus:
        import torch

        out["GPU"] = float(torch.cuda.device_count())
    return out


def node_memory_estimate() -> int:
    """Ray's ``memory`` resource of an embedded Ray started now on this machine: available
    memory less the object store, as Ray computes them (Ray's private helpers, through
    `ablate.compat`)."""
    from ablate.compat import ray_node_memory

    return ray_node_memory()


def cluster_node_memory() -> list[int]:
    """Ray's ``memory`` resource of every live node of the Ray this process joined."""
    import ray

    return [int(n["Resources"].get("memory", 0)) for n in ray.nodes() if n.get("Alive")]


def check_memory(needs: dict[str, int | None], nodes: list[int], embedded: bool) -> str:
    """`needs`: pack or trial id -> bytes. A need no node has: `ConfigError` (exit 2) on an
    embedded Ray; on a cluster, which may still add nodes, the warning to print (else "")."""
    known = {k: v for k, v in needs.items() if v}
    if not known or not nodes:
        return ""
    worst = max(known, key=known.get)
    if known[worst] <= max(nodes):
        return ""
    text = (f"a trial needs {_gb(known[worst])} of memory (its prepared dataset and model) but "
            f"{'this machine gives' if embedded else 'the largest node gives'} trials "
            f"{_gb(max(nodes))}")
    if embedded:
        raise ConfigError(f"{text}; run it on a machine or cluster with more memory")
    return f"warning: {text} now; such trials wait until a larger node joins"


def memory_plan(study: Study, embedded: bool = True, cpus: int | None = None) -> str:
    """The dry run's line: memory per trial and how many trials run at once on this machine.
    `embedded` (no cluster to join): a trial this machine cannot hold is a `ConfigError`, as
    in a run."""
    from ablate.runner.plan.packing import make_packs, pack_seeds

    spec = study.spec
    cpus = cpus or os.cpu_count() or 1
    slots = trials_at_once({"CPU": spec.cpus_per_trial}, {"CPU": cpus})
    gpus = 0.0 if spec.gpus_per_trial == "auto" else float(spec.gpus_per_trial)
    needs = [pack_memory(p) for p in make_packs(study.trials, pack_seeds(spec.pack_size, gpus))]
    known = [n for n in needs if n]
    if not known:
        unknown = any(t.data_hash for t in study.trials)
        why = ("not known until the datasets are prepared (a run prepares them first)"
               if unknown else "not declared by its trial kind")
        return f"memory per trial: {why}; up to {slots} trials at once here ({cpus} CPUs)"
    have = node_memory_estimate()
    if embedded:
        check_memory(dict(enumerate(known)), [have], embedded=True)
    at_once = trials_at_once({"CPU": spec.cpus_per_trial, "memory": max(known)},
                             {"CPU": cpus, "memory": have})
    spread = _gb(max(known)) if min(known) == max(known) else \
        f"{_gb(min(known))} to {_gb(max(known))}"
    part = "" if len(known) == len(needs) else \
        f" ({len(needs) - len(known)} packs not known until their data are prepared)"
    return (f"memory per trial: {spread}{part}; {at_once} trials at once here ({cpus} CPUs / "
            f"cpus_per_trial={spec.cpus_per_trial:g}, {_gb(have)} of memory for trials)")


def _gb(n: int) -> str:
    return f"{n / GB:.1f} GB"
