"""Trial kinds for the Ray tests, imported by Ray workers through PYTHONPATH.

`faulty_trial` wraps the real graph trainer and injects the fault named by the
config's ``+fault`` axis: ``raise`` / ``raise_once`` (an exception),
``nan`` / ``nan_once`` (the training loss becomes NaN, so the trainer's own NaN
path records status 'nan'), ``exit_once`` (the worker process dies). ``*_once``
faults fire on the first attempt only (a marker file in ``+marker_dir``).
`barrier_trial` waits until ``+parties`` trials have started at the same time
(marker files in ``+marker_dir``), proving they run concurrently.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from types import SimpleNamespace


def _extra(cfg) -> dict:
    return dict(cfg.extra)


def _first_attempt(cfg, marker_dir: str) -> bool:
    key = hashlib.sha256(repr(cfg).encode()).hexdigest()[:16]
    marker = Path(marker_dir) / f"fault-{key}"
    if marker.exists():
        return False
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    return True


def faulty_trial(cfg):
    import ablate.trial.graph as train

    extra = _extra(cfg)
    fault = extra.get("fault", "")
    once = fault.endswith("_once")
    if fault and (not once or _first_attempt(cfg, extra["marker_dir"])):
        if fault.startswith("raise"):
            raise RuntimeError("injected fault")
        if fault.startswith("exit"):
            os._exit(3)
        if fault.startswith("nan"):  # every path's loss becomes NaN (sequential and batched)
            import ablate.trial.fit as fit
            import ablate.trial.pack_step as pack_step

            original = fit.task_loss
            poisoned = lambda out, y, reg: original(out, y, reg) * float("nan")  # noqa: E731
            fit.task_loss = pack_step.task_loss = poisoned
            try:
                return train.run_trial_full(cfg)
            finally:
                fit.task_loss = pack_step.task_loss = original
    return train.run_trial_full(cfg)


def barrier_trial(cfg):
    """Wait (up to 120 s) until `parties` trials are inside this function at once."""
    import ray

    extra = _extra(cfg)
    folder = Path(extra["marker_dir"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"started-{cfg.seeds[0]}").touch()
    deadline = time.time() + 120
    while len(list(folder.glob("started-*"))) < int(extra["parties"]):
        if time.time() > deadline:
            raise TimeoutError("the other trials never ran at the same time")
        time.sleep(0.05)
    gpu = ",".join(str(g) for g in ray.get_gpu_ids())
    rec = {"seed": cfg.seeds[0], "split": "val", "status": "ok", "error": "",
           "accuracy": 1.0, "visible_gpu": gpu,
           "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}
    return SimpleNamespace(records=[rec], curves=[])


def held_trial(cfg):
    """The graph trainer, but held (up to 300 s) on the node named in ``+marker_dir``/hold.

    Each trial first touches ``running-<node_id>-<seed>``, so a test knows when a trial is
    in progress on the node it is about to kill.
    """
    import ray

    import ablate.trial.graph as train

    folder = Path(_extra(cfg)["marker_dir"])
    folder.mkdir(parents=True, exist_ok=True)
    node = ray.get_runtime_context().get_node_id()
    (folder / f"running-{node}-{cfg.seeds[0]}").touch()
    hold = folder / "hold"
    deadline = time.time() + 300
    while hold.exists() and hold.read_text() == node:
        if time.time() > deadline:
            raise TimeoutError("the held node was never removed")
        time.sleep(0.05)
    return train.run_trial_full(cfg)


def _attempts(marker_dir: str) -> int:
    return len(list(Path(marker_dir).glob("fault-*")))


def faulty_pack(cfgs):
    """The graph trainer's pack function with faults: ``+fault=raise_once`` raises on the
    pack's first attempt; ``+nan_seed=S`` starts seed S of every pack from NaN parameters;
    ``+fault=nan_then_exit`` (with ``+nan_seed``): NaN members on the first call, the worker
    process dies on the second (the worker's retry of those members), all ok after;
    ``+fault=nan_exit_nan``: the same, but NaN again on every call after the death."""
    import math

    import ablate.trial.graph as train
    import ablate.trial.packed as batched

    extra = _extra(cfgs[0])
    if extra.get("fault") == "raise_once" and _first_attempt("pack", extra["marker_dir"]):
        raise RuntimeError("injected pack fault")
    if extra.get("fault") in ("nan_then_exit", "nan_exit_nan"):  # 1st: NaN; 2nd: worker dies
        if not _first_attempt("nan", extra["marker_dir"]) and _first_attempt("exit",
                                                                              extra["marker_dir"]):
            os._exit(3)
        if extra["fault"] == "nan_then_exit" and _attempts(extra["marker_dir"]) > 1:
            return train.run_pack_full(cfgs)  # Tune's restart of the whole pack: all ok
    if "nan_seed" not in extra:
        return train.run_pack_full(cfgs)
    init = batched.MemberStack.__init__

    def poisoned(self, *a, **kw):
        init(self, *a, **kw)
        for i, m in enumerate(self.members):
            if m.seed == int(extra["nan_seed"]):
                for v in self.params.values():
                    v[i].fill_(math.nan)

    batched.MemberStack.__init__ = poisoned
    try:
        return train.run_pack_full(cfgs)
    finally:
        batched.MemberStack.__init__ = init


def config_error_trial(cfg):
    """Fails the way a bad config does inside a worker: a ValueError, on every attempt."""
    extra = _extra(cfg)
    folder = Path(extra["marker_dir"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"attempt-{cfg.seeds[0]}-{time.time_ns()}").touch()
    raise ValueError("injected: kl_weight cannot be used with this scorer")


# ----------------------------------------------------------------------------- the kinds
# Graph trials run by the functions above; the tests register them by path
# (`TRIAL_KINDS["faulty"] = "_ray_kinds:FAULTY"`), so Ray workers import the same objects.


def _graph_kind():
    from ablate.trial.graph import GraphKind

    return GraphKind


class _FunctionKind(_graph_kind()):
    """The graph kind whose trials run `run` (and packs `pack`; none: every trial alone)."""

    def __init__(self, name: str, run, pack=None, datasets: bool = True, resolve: bool = True):
        self.name, self._run, self._pack = name, run, pack
        self.datasets, self._resolve = datasets, resolve

    def resolve(self, cfg):
        return super().resolve(cfg) if self._resolve else cfg

    def run(self, cfg):
        return self._run(cfg)

    def pack_key(self, cfg):
        return super().pack_key(cfg) if self._pack else None

    def run_pack(self, cfgs):
        return self._pack(cfgs)


FAULTY = _FunctionKind("faulty", faulty_trial)
HELD = _FunctionKind("held", held_trial)
BARRIER = _FunctionKind("barrier", barrier_trial, datasets=False, resolve=False)
BARRIER.store_columns = (("visible_gpu", "string"), ("cuda_visible_devices", "string"))
FAULTY_PACK = _FunctionKind("faultypack", faulty_trial, pack=faulty_pack)
CONFIG_ERROR = _FunctionKind("cfgerr", config_error_trial)
