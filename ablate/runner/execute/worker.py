"""What runs inside a Ray worker: the Tune function trainable that runs one pack of trials.

Ray pickles `trainable` by reference, so it stays at ``ablate.runner.execute.worker.trainable``.
A worker loads the dataset from the on-disk cache (on a node without the cache
file it first writes the driver's copy, shipped through the object store in pieces,
once per node; it never downloads raw files), runs
the trial kind's function on the pack's trials and reports each attempt as one
Tune result. A trial that raises or returns NaN is retried here, in the same
warm worker, unless its error is one a retry cannot fix (`_retryable`).
"""

from __future__ import annotations

import os
import pickle
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from ablate.errors import retryable as _retryable  # the one rule: a retry may fix it
from ablate.runner.execute.ray_env import worker_env
from ablate.runner.execute.ship import ensure_dataset
from ablate.runner.study.kinds import load_attr
from ablate.trial import epochs

_WORKER_STATE: dict[str, Any] = {}  # per actor process: imported trial functions


def _trial_kind(path: str):
    """The trial kind at 'module:attr' `path`, imported once per worker process."""
    kind = _WORKER_STATE.get(path)
    if kind is None:
        kind = _WORKER_STATE[path] = load_attr(path)
    return kind


def _error_text(e: BaseException) -> str:
    """One line: the exception and where it was raised."""
    tb = traceback.extract_tb(e.__traceback__)
    where = f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}{where}"[:500]


def _member_outcome(trial_id: str, res) -> dict:
    """A trial's outcome from its kind's result (records and curves), with the first bad status."""
    out = {"trial_id": trial_id, "status": "ok", "error": "", "retry": True,
           "records": list(res.records), "curves": list(res.curves)}
    bad = [r for r in out["records"] if r.get("status", "ok") != "ok"]
    if bad:
        out["status"], out["error"] = bad[0]["status"], bad[0].get("error", "")
    elif not out["records"]:
        out["status"], out["error"] = "error", "the trial returned no records"
    return out


def _attempt(p: dict, blobs: dict, members: list[dict]) -> dict:
    """Run the pack's `members` once; never raises: each member's outcome has its status."""
    out = {"members": [], "trial_s": float("nan")}
    try:
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(max(1, int(p["cpus"])))
        ensure_dataset(p["dataset"], p["data_params"], p["data_hash"], blobs)
        cfgs = [pickle.loads(m["config"]) for m in members]
        t0 = time.perf_counter()
        kind = _trial_kind(p["kind_path"])
        if len(cfgs) > 1:  # several trials trained together (the kind's pack)
            results = kind.run_pack(cfgs)
        else:
            results = [kind.run(cfgs[0])]
        out["trial_s"] = time.perf_counter() - t0
        out["members"] = [_member_outcome(m["trial_id"], r) for m, r in zip(members, results)]
    except Exception as e:
        error, retry = _error_text(e), _retryable(e)
        out["members"] = [{"trial_id": m["trial_id"], "status": "error", "error": error,
                           "retry": retry, "records": [], "curves": []} for m in members]
    return out


class EpochReporter:
    """Forwards a training loop's epochs to the driver's live line (`ablate.trial.epochs`):
    at most one intermediate Tune result every `every_s` seconds (and the last epoch of a
    training run), holding the epoch, the run's epochs and the seconds per epoch so far. A
    trial may train more than one model in turn (weak supervision: model B, then A); each
    training run starts with epoch 0, where the pace restarts."""

    def __init__(self, report, every_s: float = 5.0):
        self.report, self.every_s = report, every_s
        self.t0 = self.last = time.monotonic()

    def __call__(self, epoch: int, total: int) -> None:
        now = time.monotonic()
        if epoch == 0:  # a training run starts (the trial's next model)
            self.t0 = now
            return
        if now - self.last < self.every_s and epoch < total:
            return
        self.last = now
        self.report({"epoch_progress": {"epoch": epoch, "epochs": total,
                                        "s_per_epoch": (now - self.t0) / epoch}})


def trainable(config: dict, blobs: dict | None = None, payloads=None) -> None:
    """Tune function trainable: run one pack (one or more trials), report each attempt.

    Tune's config names the pack by its index in `payloads` (`ablate.runner.execute.handover`:
    the payloads, sent through the object store once); a config that holds the payload
    itself is run as it is.

    A trial that raises or returns NaN is retried here, in the same warm actor, up
    to `max_failures` times, unless its error is one a retry cannot fix (a bad config
    value: `_retryable`); a retry reruns only the pack's trials that failed. Each
    attempt is reported as one result, so the driver records it. A dead worker or
    node is retried by Tune's FailureConfig.
    """
    import ray
    from ray import tune

    p = config["trial"]
    if "index" in p and payloads is not None:
        p = payloads.get(p["index"])
    worker_env(p.get("cache_dir"), p.get("import_paths", ()))  # its cache, its user code
    gpu_ids = ray.get_gpu_ids()
    if not gpu_ids:  # no GPU assigned: never touch one another trial may hold (device=auto)
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    meta = {"node": ray.util.get_node_ip_address(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "gpu_ids": ",".join(str(g) for g in gpu_ids)}
    last = p["max_failures"] + 1
    pending = list(p["members"])
    for attempt in range(1, last + 1):
        started = time.time()
        with epochs.listening(EpochReporter(tune.report, p.get("epoch_report_s", 5.0))):
            out = _attempt(p, blobs or {}, pending)
        out["meta"] = {**meta, "started_at": started, "finished_at": time.time(),
                       "trial_s": out.pop("trial_s")}
        failed = {m["trial_id"] for m in out["members"] if m["status"] != "ok"}
        retry = {m["trial_id"] for m in out["members"]
                 if m["status"] != "ok" and m["retry"] and attempt < last}
        for m in out["members"]:
            m["final"] = m["trial_id"] not in retry
        out["final"] = not retry
        out["status"] = "ok" if not failed else "failed"
        tune.report({"payload": pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL),
                     "trial_status": out["status"]})
        if not retry:
            return
        pending = [m for m in pending if m["trial_id"] in retry]
