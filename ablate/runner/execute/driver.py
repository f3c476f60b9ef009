"""Run a study's trials with Ray Tune; the driver writes each finished trial to the store.

Data flow (DESIGN.md): the driver skips trials already complete in the store,
builds every dataset recipe once into the on-disk cache, starts an embedded
local Ray sized to the machine (or joins `ray_address` / $RAY_ADDRESS), and
hands the packs to a Tune `Tuner` as small descriptions suggested one at a time,
their payloads in the object store once (`ablate.runner.execute.handover`; function trainable,
`reuse_actors=True`, declared `cpus_per_trial` / fractional `gpus_per_trial` and the host
memory of each pack from its prepared dataset (`ablate.runner.plan.resources`),
`FailureConfig(max_failures)`).
A worker only loads the cached dataset (on a node without the cache file it writes the
driver's copy, shipped once per node through the object store in pieces,
`ablate.runner.execute.ship`), runs the trial kind's function on the packed seeds and reports
its records and curves in one result. The driver-side `StoreCallback` writes them
atomically as each result arrives. A trial that raises or returns NaN reports rows with
its status and is retried in the same warm worker; a lost worker or node (a worker
killed for memory too) is recorded by the driver and retried elsewhere by Tune.

Here: `run_study` and the Tuner it builds (packs, payloads, shipped dataset
files), with the progress line naming each step on the way (`Progress.step`).
Elsewhere in `ablate.runner`: Ray start-up (`ray_env`), reaping an embedded Ray's
session (`reap`), the checks before Ray starts and the datasets (`ablate.runner.plan.checks`,
`ablate.runner.plan.datasets`), the worker
side (`worker`), the store callback (`tune_callback`), the progress display and the
run's summary (`progress`).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ablate.runner.execute.progress import Progress, Summary, epoch_report_s
from ablate.runner.execute.ray_env import (
    RayMode,
    RayStarter,
    check_resources,
    gpus_per_trial,
    quiet_ray_env,
    tune_storage,
)
from ablate.runner.execute.reap import shutdown_ray
from ablate.runner.execute.ship import dataset_pieces
from ablate.runner.execute.signals import handlers_kept_through_tune, raise_if_terminated, signal_name
from ablate.runner.execute.worker import trainable
from ablate.runner.plan.checks import (
    check_cluster_reachable,
    check_devices,
    check_resources_early,
    cluster_address,
)
from ablate.runner.plan.datasets import check_trial_files, prepare_datasets, reads_local_files
from ablate.runner.plan.packing import Pack, make_packs, pack_seeds
from ablate.runner.plan.resources import (
    check_memory,
    cluster_node_memory,
    node_memory_estimate,
    pack_memory,
    trials_at_once,
    trials_memory,
)
from ablate.runner.study.expand import Study, Trial
from ablate.runner.study.kinds import kind_path
from ablate.user_code import import_paths

if TYPE_CHECKING:
    from ablate.runner.execute.store import Store


class HeldRay:
    """The Ray one command keeps across several runs (an adaptive study's rounds): the first
    run that needs Ray starts (or joins) it, the later ones use it, and the command stops it
    once, at its end (`stop`)."""

    def __init__(self):
        self.starter: RayStarter | None = None

    def stop(self, summary: Summary, ray_address: str | None) -> None:
        """`_stop_ray` of the held Ray, if one was started; `summary` is the whole command's
        (its failures decide whether an embedded Ray's logs are kept)."""
        if self.starter is not None:
            _stop_ray(self.starter, summary, embedded=not cluster_address(ray_address))
            self.starter = None


def run_study(study: Study, results_dir: str | os.PathLike = "results", force: bool = False,
              ray_address: str | None = None, progress: str = "auto",
              stream: TextIO | None = None, display: Progress | None = None,
              held: HeldRay | None = None) -> Summary:
    """Run every trial of `study` not yet complete in the store; see the module docstring.
    `display` (a `Progress` that showed the planning step) goes on; else one is made. With
    `held`, Ray is started once for every run given the same `HeldRay` and left running."""
    from ablate.runner.execute.store import FAILURES, Store, StoreError, write_error

    t_start = display.t0 if display is not None else time.time()
    stream = stream or sys.stderr
    display = display or Progress(study.name, mode=progress, stream=stream, t0=t_start,
                                  epoch_every_s=6 * epoch_report_s())
    quiet_ray_env()  # here, in the main thread, before Ray starts in `RayStarter`'s thread
    check_devices(study, ray_address)
    check_resources_early(study, ray_address)
    store = Store(results_dir, study.name)
    summary = Summary(study.name, len(study.trials), results=str(store.dir),
                      failures_log=str(store.dir / FAILURES))
    with display.ticking():
        if not store.writable():  # a read-only archive: re-check it, run nothing
            display.step("reading the store", len(store.trial_files()), "files")
            status = store.scan()
            todo = [t for t in study.trials if force or status.get(t.trial_id) != "ok"]
            if todo:
                raise StoreError(f"the result store {store.dir} is read-only and {len(todo)} "
                                 f"of {len(study.trials)} trials are still to run; choose a "
                                 "writable results_dir=")
            summary.skipped = len(study.trials)
            summary.wall_s = time.time() - t_start
            return summary
        store.lock()
        try:
            store.clean_temp()
            display.step("reading the store", len(store.trial_files()), "files")
            status = store.scan()
            todo = [t for t in study.trials if force or status.get(t.trial_id) != "ok"]
            summary.skipped = len(study.trials) - len(todo)
            try:  # a disk still full (or a quota reached): the summary line and exit 3, before Ray
                if study.spec.path is not None:  # again, under the lock: a refused first run
                    store.keep_study_file(study.spec.path)  # of this study may have removed it
                if todo:
                    store.check_space()
                else:
                    store.write_plan(study.plan_ids)
            except OSError as e:
                summary.storage_error = write_error(e, store.dir)
                summary.remaining = [t.trial_id for t in todo]
                return summary
            if todo:
                _start_and_run(study, todo, store, summary, ray_address, display, stream,
                               t_start, held)
        finally:
            store.unlock()
            summary.wall_s = time.time() - t_start
    return summary


def _start_and_run(study: Study, todo: list[Trial], store: Store, summary: Summary,
                   ray_address: str | None, display: Progress, stream: TextIO,
                   t_start: float, held: HeldRay | None = None) -> None:
    """Datasets, Ray, Tune; the embedded Ray stopped and its session folder removed after
    (unless `held`: the Ray of its earlier runs is used, or the one started here kept).

    Ctrl-C or SIGTERM during start-up ends the run like one during Tune: what is not done
    stays to do (the summary's resume line, exit 130 / 143), and Ray is stopped."""
    address = cluster_address(ray_address)  # None: an embedded Ray (search studies: the same)
    check_cluster_reachable(address)  # before the data is prepared (minutes for MNIST)
    if not address:  # files the trials read themselves, here: refused before any trial fails
        check_trial_files(todo)
    t0 = time.time()
    ray_start = None
    started = reused = False
    try:
        local = [reads_local_files(t) for t in todo]
        first = [t for t, x in zip(todo, local) if x]
        try:
            bars = stream.isatty()
            splits = prepare_datasets(first, progress=bars, display=display)  # bad paths: before Ray
            raise_if_terminated()  # a SIGTERM some library swallowed: not worth starting Ray
            if not address:  # a trial this machine's memory cannot hold: refused before Ray
                check_memory({t.trial_id: trials_memory([t]) for t in first},
                             [node_memory_estimate()], embedded=True)
            reused = held is not None and held.starter is not None
            # Ray starts while the other datasets are built (or is the held one, running)
            ray_start = held.starter if reused else RayStarter(address)
            if held is not None and not reused:
                held.starter = ray_start
            rest = [t for t, x in zip(todo, local) if not x]
            splits.update(prepare_datasets(rest, progress=bars, display=display))
        except OSError as e:  # the data folder filled (or is read-only): exit 3, the usual line
            from ablate.data.cache import cache_dir
            from ablate.runner.execute.store import write_error

            summary.storage_error = write_error(e, Path(e.filename or cache_dir()))
            summary.remaining = [t.trial_id for t in todo]
            return
        summary.timings["datasets"] = time.time() - t0
        raise_if_terminated()
        if not reused:
            display.step("starting Ray" if not address else "joining Ray")
        started = ray_start.wait()
        summary.timings["ray_start"] = 0.0 if reused else ray_start.seconds
        raise_if_terminated()
        mode = RayMode(address, started)
        with _sigterm_as_interrupt(summary), handlers_kept_through_tune():
            _run_tune(study, todo, splits, store, summary, embedded=mode.embedded,
                      ship=mode.ship, display=display, stream=stream, t_start=t_start)
    except KeyboardInterrupt as e:  # during start-up (Tune handles its own)
        summary.signal = summary.signal or signal_name(e)
        if "tune" not in summary.timings:  # no trial's result was counted: all stay to do
            summary.remaining = [t.trial_id for t in todo]
    finally:
        if ray_start is not None and held is None:
            display.step("stopping Ray")
            _stop_ray(ray_start, summary, embedded=not address)


def _stop_ray(ray_start: RayStarter, summary: Summary, embedded: bool) -> None:
    """`ray.shutdown()` of the Ray this run started or joined; for an embedded Ray, what is
    left of its processes is stopped and its session folder removed (kept, with its logs,
    when trials failed: the console names it)."""
    if ray_start.wait(raise_errors=False):
        t0 = time.time()
        logs = shutdown_ray(embedded, lambda: bool(summary.failed))
        if logs is not None:
            summary.ray_logs = str(logs)
        summary.timings["ray_stop"] = time.time() - t0
    ray_start.release()


class _sigterm_as_interrupt:
    """While Tune runs, SIGTERM (timeout, docker stop, batch schedulers) stops the study the
    way Ctrl-C does: trials in flight end, what finished is kept, a rerun resumes."""

    def __init__(self, summary: Summary):
        self.summary, self.previous = summary, None

    def _handler(self, signum, frame) -> None:
        import signal

        self.summary.signal = "SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)  # Tune's graceful stop

    def __enter__(self):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, self._handler)
        return self

    def __exit__(self, *exc) -> None:
        import signal

        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)


def _run_tune(study: Study, todo: list[Trial], splits: dict, store: Store, summary: Summary,
              embedded: bool, ship: Callable[[int], bool], display: Progress, stream: TextIO,
              t_start: float | None = None) -> None:
    """Tune's run of `todo`; `ship(nodes)`: whether the prepared data go to the trials through
    the object store (`RayMode.ship`, the rule of search studies too)."""
    import ray
    from ray import tune

    from ablate.runner.execute.handover import (
        TUNE_ENV,
        InOrder,
        PayloadTable,
        concurrency,
        describe,
        feed,
    )
    from ablate.runner.execute.tune_callback import (
        StorageStop,
        StoreCallback,
        error_line,
        trial_name,
        worker_deaths_as_trial_failures,
    )

    with tune_storage(study.name) as storage:
        gpus = gpus_per_trial(study.spec.gpus_per_trial)
        check_resources(study, gpus, embedded=embedded, stream=stream)
        try:
            store.write_plan(study.plan_ids)  # the run is accepted now
        except OSError as e:  # the disk filled since `check_space`: exit 3, the same line
            from ablate.runner.execute.store import write_error

            summary.storage_error = write_error(e, store.dir)
            summary.remaining = [t.trial_id for t in todo]
            return
        shipped = ship(len(ray.nodes()))
        spec = study.spec
        cache = os.environ.get("ABLATE_CACHE")
        packs = make_packs(todo, pack_seeds(spec.pack_size, gpus))
        display.step("handing the packs to Tune", len(packs), "packs")
        memory = {}
        for pk in packs:
            memory[pk.pack_id] = pack_memory(pk)  # Ray's `memory` resource
            display.advance()
        warning = check_memory(memory, cluster_node_memory(), embedded=embedded)
        if warning:
            stream.write(warning + "\n")
        resources = {pk.pack_id: {"CPU": spec.cpus_per_trial, "GPU": gpus,
                                  "memory": memory[pk.pack_id] or 0} for pk in packs}
        # Tune gets each pack's small description; the payloads go to the object store once
        table = PayloadTable.put([_payload(pk, spec, cache) for pk in packs])
        descriptions = describe(packs, resources)
        smallest = min(resources.values(), key=lambda r: r["memory"])
        limit = concurrency(trials_at_once(smallest, ray.cluster_resources()), embedded)
        callback = StoreCallback(store, {t.trial_id: t for t in todo}, splits, display,
                                 {pk.pack_id: [t.trial_id for t in pk.trials] for pk in packs},
                                 max_failures=spec.max_failures)
        fn = tune.with_resources(
            tune.with_parameters(trainable, blobs=dataset_pieces(todo, shipped), payloads=table),
            _pack_resources)
        worker_deaths_as_trial_failures()
        tuner = tune.Tuner(
            fn,
            tune_config=tune.TuneConfig(num_samples=len(packs), reuse_actors=True,
                                        search_alg=feed(descriptions, limit),
                                        scheduler=InOrder(),
                                        trial_name_creator=trial_name,
                                        trial_dirname_creator=trial_name),
            run_config=tune.RunConfig(
                name=study.name, storage_path=storage, verbose=0, callbacks=[callback],
                stop=StorageStop(callback),
                failure_config=tune.FailureConfig(max_failures=spec.max_failures),
                checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=False),
                log_to_file=False),
        )
        display.trials(len(todo), summary.skipped)
        t0 = time.time()
        try:
            with _environ(TUNE_ENV):  # read when the Tuner runs; a value the user set wins
                tuner.fit()
        except KeyboardInterrupt:  # a second Ctrl-C: stop now, written files stay valid
            pass
        except Exception as e:  # Tune's controller failed: one line; finished trials are kept
            summary.tune_error = error_line(e)
        summary.timings["tune"] = time.time() - t0
        display.close()
        summary.ok = sum(1 for s in callback.final.values() if s == "ok")
        summary.failed = sorted(k for k, s in callback.final.items() if s != "ok")
        summary.remaining = sorted(t.trial_id for t in todo if t.trial_id not in callback.final)
        summary.retries = callback.retries
        summary.storage_error = callback.storage_error
        for tid, error in sorted(callback.errors.items()):
            summary.errors.setdefault(error, []).append(tid)


@contextlib.contextmanager
def _environ(values: dict[str, str]):
    """`values` in this process's environment while the block runs (a variable already set
    is kept), removed again after."""
    added = [k for k in values if k not in os.environ]
    os.environ.update({k: values[k] for k in added})
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


def _pack_resources(config: dict):
    """What the pack of this Tune trial asks of Ray: its CPUs, GPUs and host memory."""
    from ray import tune

    return tune.PlacementGroupFactory([dict(config["trial"]["resources"])])



def _payload(pack: Pack, spec, cache: str | None) -> dict:
    t = pack.trials[0]  # the trials of a pack share kind and dataset recipe
    return {"trial_id": pack.pack_id, "kind": t.kind, "kind_path": kind_path(t.kind),
            "members": [{"trial_id": m.trial_id, "config": pickle.dumps(m.config)}
                        for m in pack.trials],
            "dataset": t.dataset, "data_params": t.data_params, "data_hash": t.data_hash,
            "cpus": spec.cpus_per_trial, "max_failures": spec.max_failures, "cache_dir": cache,
            "epoch_report_s": epoch_report_s(), "import_paths": import_paths()}
