"""The driver's Tune hooks: write each reported attempt to the store, stop on a failed write.

`StoreCallback` receives every result a worker reports (`ablate.runner.execute.worker`),
writes each member trial's rows atomically to the store, logs failed attempts to
failures.jsonl, records trials whose worker or node died, and drives the
progress display. `StorageStop` ends the study once a result could not be
written (disk full, read-only). `worker_deaths_as_trial_failures` makes a worker killed by
Ray's memory monitor a failed trial of Tune rather than an error of its controller.

This module imports Ray Tune when it is imported (its classes subclass Tune's):
the driver imports it only after `start_ray` has set Ray's environment.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray import tune
from ray.exceptions import RayError

from ablate.runner.study.kinds import trial_kind

if TYPE_CHECKING:
    from ray.tune.experiment import Trial as TuneTrial

    from ablate.runner.execute.progress import Progress
    from ablate.runner.execute.store import Store
    from ablate.runner.study.expand import Trial


class StoreCallback(tune.Callback):
    """Driver-side: write each reported attempt to the store, record failures, drive progress.

    A Tune trial runs a pack (`ablate.runner.plan.packing`): every member trial's rows go to its own
    file, tagged with the pack's id. A member stored `ok` is never written again: when Tune
    reruns a pack whose worker died (every member trains again, the pack being one model), the
    rerun's rows of the members already stored ok are dropped.
    """

    def __init__(self, store: Store, trials: dict[str, Trial], splits: dict,
                 display: Progress, packs: dict[str, list[str]], max_failures: int | None = None):
        import ray

        self.store, self.trials, self.splits, self.display = store, trials, splits, display
        self.packs = packs  # pack id -> member trial ids
        # attempts a trial may have in all: the worker's own retries and Tune's restarts after
        # a worker death count against one budget (None: the worker's word alone)
        self.budget = None if max_failures is None else max_failures + 1
        self.ray_version = ray.__version__
        self.final: dict[str, str] = {}  # trial id -> final status (ok / error / nan)
        self.errors: dict[str, str] = {}  # trial id -> final error text
        self.attempts: dict[str, int] = {}  # trial id -> attempts recorded so far
        self.created_at: dict[str, str] = {}  # trial id -> its last stored attempt's created_at
        self.retries = 0
        self.storage_error = ""  # first failed result write: the study stops (`StorageStop`)

    def on_trial_start(self, iteration: int, trials: list[TuneTrial], trial: TuneTrial,
                       **info: Any) -> None:
        for tid in self.packs[_tid(trial)]:
            self.display.start(tid)

    def on_trial_result(self, iteration: int, trials: list[TuneTrial], trial: TuneTrial,
                        result: dict, **info: Any) -> None:
        blob = result.pop("payload", None)  # do not keep it in Tune's experiment state
        if blob is None:
            prog = result.get("epoch_progress")  # a running pack's epoch (`worker.EpochReporter`)
            if prog:
                tids = [t for t in self.packs.get(_tid(trial), ()) if t not in self.final]
                if tids:
                    self.display.epoch(tids, self.label(tids), prog["epoch"], prog["epochs"],
                                       prog["s_per_epoch"])
            return
        pack_id, out = _tid(trial), pickle.loads(blob)
        for m in out["members"]:
            tid = m["trial_id"]
            if tid in self.final:  # stored as final before Tune reran its pack: never rewritten
                continue
            records = m["records"] if m["status"] != "error" else []
            rows = records or self.error_rows(tid, m["status"], m["error"])
            status, error, final = m["status"], m["error"], m.get("final", out["final"])
            final = final or self._spent(tid)
            attempt, misfit = self._write(tid, rows, m["curves"] if records else [],
                                          out["meta"], pack_id)
            if misfit:  # rows outside the declared schema: stored as failed, not retried
                status, error, final = "error", misfit, True
            if attempt is None:  # not stored: the trial stays to do, the study stops
                self.display.unstored(tid)
                continue
            if status == "ok":
                self.final[tid] = "ok"
                self.display.finish(tid, "ok")
                continue
            self._log(tid, attempt, status, error, out["meta"])
            if final:
                self.final[tid] = status
                self.errors[tid] = error or status
                self.display.finish(tid, "failed")
            else:
                self.retries += 1
                self.display.retry(tid)

    def on_trial_recover(self, iteration: int, trials: list[TuneTrial], trial: TuneTrial,
                         **info: Any) -> None:
        self._lost(trial, final=False)

    def on_trial_error(self, iteration: int, trials: list[TuneTrial], trial: TuneTrial,
                       **info: Any) -> None:
        self._lost(trial, final=True)

    def on_step_end(self, iteration: int, trials: list[TuneTrial], **info: Any) -> None:
        self.display.refresh()

    # ------------------------------------------------------------------ helpers
    def label(self, tids: list[str]) -> str:
        """A running pack in a few words: its first trial's backbone, attention, seeds."""
        cfg = self.trials[tids[0]].config if tids[0] in self.trials else None
        parts = []
        keys = ("dataset", "backbone") if hasattr(cfg, "backbone") else ("dataset", "normalizer")
        parts = [str(getattr(cfg, k)) for k in keys if getattr(cfg, k, None)]
        if getattr(cfg, "pool_layers", None) is not None:
            parts.append(getattr(cfg, "supervision", "") if cfg.pool_layers else "global")
        seeds = list(getattr(cfg, "seeds", ()) or ())
        if seeds:
            parts.append(f"s{seeds[0]}" + (f"-{seeds[-1]}" if len(seeds) > 1 else ""))
        more = f" (+{len(tids) - 1} trials)" if len(tids) > 1 else ""
        return (" ".join(parts) or tids[0]) + more

    def _spent(self, tid: str) -> bool:
        """Whether the attempt just written was the trial's last of its budget."""
        return self.budget is not None and self.attempts.get(tid, 0) + 1 >= self.budget

    def pack_done(self, pack_id: str) -> bool:
        """Every member of the pack has its final record: nothing left to run (`RetryStop`)."""
        return all(tid in self.final for tid in self.packs.get(pack_id, ()))

    def _lost(self, trial, final: bool) -> None:
        """The worker (actor or node) died mid-pack: record it; Tune retries it or gives up."""
        pack_id = _tid(trial)
        error = _tune_error(trial)
        for tid in self.packs[pack_id]:
            if tid in self.final:  # already recorded as finished
                continue
            final = final or self._spent(tid)
            attempt, _ = self._write(tid, self.error_rows(tid, "error", error), [], {}, pack_id)
            if attempt is None:  # not stored: the trial stays to do, the study stops
                self.display.unstored(tid)
                continue
            self._log(tid, attempt, "error", error, {})
            if final:
                self.final[tid] = "error"
                self.errors[tid] = error
                self.display.finish(tid, "failed")
            else:
                self.retries += 1
                self.display.retry(tid)

    def error_rows(self, tid: str, status: str, error: str) -> list[dict]:
        from ablate.trial.provenance import code_provenance

        t = self.trials[tid]
        base = trial_kind(t.kind).columns(t.config)  # every axis, 'dataset' included
        # the driver's provenance (the code that planned and recorded the failure), as every
        # trial row carries its worker's: one rule for "modified tree" (issue 42 item 8)
        base.update(code_provenance())
        if t.data_hash:
            base["dataset_hash"] = t.data_hash
        splits = self.splits.get(t.data_hash) or list(getattr(t.config, "eval_splits", [""]))
        return [{**base, "seed": s, "split": sp, "status": status, "error": error}
                for s in getattr(t.config, "seeds", (0,)) for sp in splits]

    def _write(self, tid: str, rows: list[dict], curves: list[dict], meta: dict,
               pack_id: str) -> tuple[int | None, str]:
        """Store one attempt's rows: (its attempt number, or None if the write failed; '' or
        the error of rows that do not fit the declared schema, stored as failed rows)."""
        from ablate.runner.execute.store import now_iso, write_error
        from result_store.schema import SchemaError

        if self.storage_error:
            return None, ""
        attempt = self.attempts.get(tid, 0) + 1
        extra = {"attempt": attempt, "created_at": now_iso(), "ray_version": self.ray_version,
                 "trial_s": meta.get("trial_s", float("nan")), "node": meta.get("node", ""),
                 "node_id": meta.get("node_id", ""), "gpu_ids": meta.get("gpu_ids", ""),
                 "started_at": meta.get("started_at", float("nan")),
                 "finished_at": meta.get("finished_at", float("nan")), "pack_id": pack_id,
                 "pack_trials": len(self.packs[pack_id])}
        kind, misfit = self.trials[tid].kind, ""
        try:
            try:
                self.store.write(tid, rows, curves, extra, kind=kind)
            except SchemaError as e:  # nothing was written: the trial fails, naming the column
                misfit = f"SchemaError: {e}"
                self.store.write(tid, self.error_rows(tid, "error", misfit), [], extra, kind=kind)
        except OSError as e:  # disk full, read-only, gone: stop the study cleanly
            self.storage_error = write_error(e, self.store.dir)
            return None, misfit
        self.attempts[tid] = attempt
        self.created_at[tid] = extra["created_at"]
        return attempt, misfit

    def _log(self, tid: str, attempt: int, status: str, error: str, meta: dict) -> None:
        """The failed attempt's line in failures.jsonl: its node and its rows' created_at."""
        try:
            self.store.log_failure(tid, attempt, status, error, meta.get("node", ""),
                                   self.created_at.get(tid, ""))
        except OSError as e:
            from ablate.runner.execute.store import write_error

            self.storage_error = self.storage_error or write_error(e, self.store.dir)


def _tid(trial) -> str:
    return trial.config["trial"]["trial_id"]


# why a trial whose worker Ray's memory monitor killed failed, and what to do
MEMORY_KILLED = ("its worker was killed by Ray's memory monitor (the node ran low on memory): "
                 "run fewer trials at once (cpus_per_trial=2), or use a node with more memory")
_MEMORY_SIGNS = ("running low on memory", "OutOfMemoryError", "memory monitor")


# What a trial's Ray call raises when the trial failed rather than the driver: every Ray error
# (the trial's own exception as `RayTaskError`, its worker's or node's death, a kill by Ray's
# memory monitor, which in Ray 2.60 derives from `RayError` alone, no node able to run it).
# A search's final evaluation stores such a trial as failed rows, `error_line` its one line.
TRIAL_FAILURES: tuple[type[BaseException], ...] = (RayError,)


def killed_for_memory(text: str) -> bool:
    """Whether an error text is Ray's report of a worker killed for the node's memory."""
    return any(sign in text for sign in _MEMORY_SIGNS)


def error_line(e: BaseException) -> str:
    """An exception as one line: Ray's memory-monitor kill as `MEMORY_KILLED`; else the type
    and first message line of the trial's own exception (a Ray task error's `cause`; Ray's
    own text carries a traceback or a memory report after it)."""
    if killed_for_memory(str(e)):
        return MEMORY_KILLED
    cause = getattr(e, "cause", None) or e
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[0] if lines else ''}".strip().rstrip(":")[:300]


def trial_error(trial: TuneTrial) -> str:
    """Why a failed Tune trial failed, in one line: `error_line` of the exception Tune recorded
    (its pickled error: the trainable's own exception inside a Ray task error, or its worker's
    death), else the text of Tune's error file (`_tune_error`)."""
    import ray.cloudpickle

    path = getattr(trial, "pickled_error_file", None)
    if path:
        try:
            with open(path, "rb") as f:
                error = ray.cloudpickle.load(f)
        except Exception:  # noqa: BLE001 - unreadable, or a class this driver cannot import
            error = None
        if isinstance(error, BaseException):
            return error_line(error)
    return _tune_error(trial)


def _tune_error(trial: TuneTrial) -> str:
    """One line describing why the trial's last attempt failed (from Tune's error file)."""
    try:
        path = getattr(trial, "error_file", None)
        text = Path(path).read_text() if path else ""
    except OSError:
        text = ""
    if killed_for_memory(text):
        return MEMORY_KILLED
    sections = text.split("Failure # ")
    lines = [ln.strip() for ln in sections[-1].splitlines()[1:] if ln.strip()]
    for ln in lines:
        if "died" in ln or "Error" in ln or "error" in ln:
            return ln[:500]
    return (lines[0] if lines else "the trial's worker failed")[:500]


def worker_losses() -> tuple[type[BaseException], ...]:
    """The Ray errors that mean a trial's worker was lost rather than that the trial failed:
    a kill by the memory monitor (`OutOfMemoryError`), its node's death, its process's crash,
    a full disk, a lost object. In Ray 2.60 each derives from `RayError` alone, so Tune's
    actor manager (which knows actor and task errors only) would end the study on them."""
    from ray.exceptions import (
        NodeDiedError,
        ObjectLostError,
        OutOfDiskError,
        OutOfMemoryError,
        WorkerCrashedError,
    )

    return (OutOfMemoryError, NodeDiedError, WorkerCrashedError, OutOfDiskError, ObjectLostError)


def worker_deaths_as_trial_failures() -> None:
    """Make a worker that Ray's memory monitor killed an ordinary trial failure of Tune
    (idempotent).

    When Ray's memory monitor kills a trial's worker, the trial's pending call fails with
    `ray.exceptions.OutOfMemoryError`, which is neither an actor error nor a task error; Tune's
    actor manager then raises "Caught unexpected exception" out of `tuner.fit()`, ending the
    whole study. Handed over as the actor's death instead, Tune records the trial as failed
    (`StoreCallback` writes its rows with `MEMORY_KILLED`), retries it per `max_failures` and
    goes on with the others. The other losses of a worker that reach the same place as neither
    an actor nor a task error are handed over alike (`WORKER_LOSSES`: its node died, its
    process crashed, its disk filled, an object it needed was lost); every other error (e.g.
    a runtime environment that cannot be set up, the same for every trial) reaches Tune as it
    is. The wrapped method is private to Tune: `ablate.compat` wraps it, once, after checking
    Ray's version and that the method is there."""
    from ray.exceptions import RayActorError

    from ablate.compat import wrap_actor_task_failed

    def hand_over(original):
        def failed(self, tracked_actor_task, exception):
            if isinstance(exception, worker_losses()):
                text = " ".join(str(exception).split())[:300]
                exception = RayActorError(error_msg=f"{type(exception).__name__}: {text}")
            return original(self, tracked_actor_task, exception)

        return failed

    wrap_actor_task_failed(hand_over)


def retry_only_what_may_pass() -> None:
    """Make Tune retry a trial that raised only when a retry may fix its error (idempotent).

    Tune's `FailureConfig(max_failures)` retries a failed trial whatever failed it. A search
    trial (`ablate.runner.search.tuning`) raises its own exception out of its trainable: one that
    the runner's retry rule refuses (`ablate.errors.retryable`: a config error, a device this
    process cannot use, device memory that ran out for the smallest piece) would fail the same
    way every time, so its trial's budget is spent at once and Tune records it failed. A worker
    or node that died (no exception of the trial's own) and a runtime fault are retried up to
    `max_failures` times, as a grid trial is. Grid trials never raise out of their trainable
    (their worker retries them itself), so this changes nothing for them. Tune's `Trial.handle_error`,
    which its controller calls on a failure before it asks `should_recover`, is wrapped through
    `ablate.compat`, once."""
    from ablate.compat import wrap_trial_handle_error
    from ablate.errors import retryable

    def hand_over(original):
        def handle_error(self, exc=None):
            original(self, exc)
            cause = getattr(exc, "cause", None)  # the trainable's own exception (RayTaskError)
            if isinstance(cause, BaseException) and not retryable(cause):
                self.max_failures = 0  # should_recover: failures (>= 1 now) <= 0: no retry

        return handle_error

    wrap_trial_handle_error(hand_over)


class StorageStop(tune.Stopper):
    """Stops the whole study once a result could not be written (disk full, read-only), and a
    pack whose members all have their final record (their retry budget spent: a worker that
    Tune restarted after a death must not retry them afresh)."""

    def __init__(self, callback: StoreCallback):
        self.callback = callback

    def __call__(self, trial_id: str, result: dict) -> bool:
        if self.callback.storage_error:
            return True
        pack = (result.get("config") or {}).get("trial", {}).get("trial_id")
        return bool(pack) and self.callback.pack_done(pack)

    def stop_all(self) -> bool:
        return bool(self.callback.storage_error)


def trial_name(trial: TuneTrial) -> str:
    """Tune's name (and folder name) for a pack's Tune trial."""
    return f"{trial.config['trial']['trial_id']}_{trial.trial_id}"
