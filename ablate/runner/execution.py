"""Run a study's trials with Ray Tune; the driver writes each finished trial to the store.

Data flow (DESIGN.md): the driver skips trials already complete in the store,
builds every dataset recipe once into the on-disk cache, starts an embedded
local Ray sized to the machine (or joins `ray_address` / $RAY_ADDRESS), and
hands the trials to a Tune `Tuner` (function trainable, `reuse_actors=True`,
declared `cpus_per_trial` / fractional `gpus_per_trial`,
`FailureConfig(max_failures)`). A worker only loads the cached dataset (on a
node without the cache file it writes the driver's copy, shipped once through
the object store), runs the trial kind's function on the packed seeds and
reports its records and curves in one result. The driver-side `_StoreCallback`
writes them atomically as each result arrives. A trial that raises or returns
NaN reports rows with its status and is retried in the same warm worker; a lost
worker or node is recorded by the driver and retried elsewhere by Tune.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ablate.errors import ConfigError
from ablate.runner.packing import Pack, make_packs, pack_seeds
from ablate.runner.study import TRIAL_KINDS, Study, Trial, load_attr

if TYPE_CHECKING:
    from ablate.runner.store import Store

# Quiet Ray/Tune console (DESIGN.md "measured facts"); set before ray is imported.
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")  # no per-trial JSON/CSV/TBX
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")  # failures are reported by the runner
os.environ.setdefault("TUNE_WARN_SLOW_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "1e9")
# An embedded Ray need not prestart idle workers: Tune's actors never use them, and on a
# small machine they compete with the trials' start-up for the CPUs.
os.environ.setdefault("RAY_enable_worker_prestart", "0")
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")


@dataclass
class Summary:
    """What a run did; `exit_code` is 0 when every trial of the study is complete."""

    study: str
    total: int  # trials in the study
    skipped: int = 0  # already complete in the store
    ok: int = 0
    failed: list[str] = field(default_factory=list)  # ids whose latest attempt failed
    remaining: list[str] = field(default_factory=list)  # ids never finished (interrupted)
    retries: int = 0
    wall_s: float = 0.0
    results: str = ""
    timings: dict = field(default_factory=dict)  # phase -> seconds (start-up, tune, stop)
    errors: dict = field(default_factory=dict)  # final error text -> failed trial ids
    failures_log: str = ""  # path of failures.jsonl
    storage_error: str = ""  # the first result write that failed (disk full, read-only)
    signal: str = ""  # SIGINT / SIGTERM that stopped the run

    @property
    def interrupted(self) -> bool:
        return bool(self.remaining)

    @property
    def exit_code(self) -> int:
        """0 complete, 1 trials failed, 3 results could not be written, 130/143 interrupted."""
        if self.storage_error:
            return 3
        if self.remaining:
            return 143 if self.signal == "SIGTERM" else 130
        return 1 if self.failed else 0

    def line(self) -> str:
        state = (f"results could not be written ({self.storage_error}): free space or fix "
                 "permissions, then rerun the same command to resume" if self.storage_error
                 else "interrupted: rerun the same command to resume" if self.remaining
                 else f"{len(self.failed)} failed" if self.failed else "complete")
        return (f"study {self.study}: {self.total} trials, {self.ok} run, {self.skipped} "
                f"skipped (already done), {len(self.failed)} failed, {self.retries} retries, "
                f"{len(self.remaining)} not run in {self.wall_s:.1f} s ({state}); "
                f"results in {self.results}")

    def failure_lines(self, limit: int = 5) -> list[str]:
        """Why trials failed: each distinct final error once, with its count; the log's path."""
        if not self.errors:
            return []
        groups = sorted(self.errors.items(), key=lambda kv: -len(kv[1]))
        out = []
        if len(groups) == 1 and len(groups[0][1]) == len(self.failed) > 1:
            out.append(f"every failed trial ({len(self.failed)}) failed the same way:")
        for error, ids in groups[:limit]:
            out.append(f"  {len(ids)} trial(s), e.g. {ids[0]}: {error}")
        if len(groups) > limit:
            out.append(f"  ... and {len(groups) - limit} other error(s)")
        if self.failures_log:
            out.append(f"every failed attempt: {self.failures_log}")
        return out


# ----------------------------------------------------------------------------- worker side

_WORKER_STATE: dict[str, Any] = {}  # per actor process: imported trial functions


def _cache_file(dataset: str, params: dict) -> Path:
    """Path of a dataset recipe in this process's cache (mirrors ablate.data.load_graphsets)."""
    from ablate.data import dataset_recipe_hash
    from ablate.data.cache import cache_dir

    return cache_dir() / f"{dataset}-{dataset_recipe_hash(dataset, params)}.npz"


def _ensure_dataset(p: dict, blobs: dict) -> None:
    """Materialise the driver's cache file on this node when it is missing (other nodes)."""
    ref = blobs.get(p["data_hash"]) if p["data_hash"] else None
    if ref is None:
        return
    path = _cache_file(p["dataset"], dict(p["data_params"]))
    if path.exists():
        return
    import ray

    data = ray.get(ref)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, path)  # atomic: a concurrent loader sees the old state or the whole file


def _trial_function(path: str):
    fn = _WORKER_STATE.get(path)
    if fn is None:
        fn = _WORKER_STATE[path] = load_attr(path)
    return fn


def _error_text(e: BaseException) -> str:
    """One line: the exception and where it was raised."""
    tb = traceback.extract_tb(e.__traceback__)
    where = f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}{where}"[:500]


# Errors a retry cannot fix: a bad config, value or path, a missing device, a bug.
_DETERMINISTIC = (ValueError, TypeError, KeyError, AttributeError, ImportError,
                  NotImplementedError, AssertionError)


def _retryable(e: BaseException) -> bool:
    """Worker deaths, out-of-memory and other runtime faults may pass; config errors never."""
    from ablate.trial.graph import DeviceError

    return not isinstance(e, _DETERMINISTIC + (DeviceError,))


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
        _ensure_dataset(p, blobs)
        cfgs = [pickle.loads(m["config"]) for m in members]
        t0 = time.perf_counter()
        if len(cfgs) > 1:  # several trials trained together (the kind's pack function)
            results = _trial_function(p["pack_run"])(cfgs)
        else:
            results = [_trial_function(p["run"])(cfgs[0])]
        out["trial_s"] = time.perf_counter() - t0
        out["members"] = [_member_outcome(m["trial_id"], r) for m, r in zip(members, results)]
    except Exception as e:
        error, retry = _error_text(e), _retryable(e)
        out["members"] = [{"trial_id": m["trial_id"], "status": "error", "error": error,
                           "retry": retry, "records": [], "curves": []} for m in members]
    return out


def trainable(config: dict, blobs: dict | None = None) -> None:
    """Tune function trainable: run one pack (one or more trials), report each attempt.

    A trial that raises or returns NaN is retried here, in the same warm actor, up
    to `max_failures` times, unless its error is one a retry cannot fix (a bad config
    value: `_retryable`); a retry reruns only the pack's trials that failed. Each
    attempt is reported as one result, so the driver records it. A dead worker or
    node is retried by Tune's FailureConfig.
    """
    import ray
    from ray import tune

    p = config["trial"]
    if p.get("cache_dir"):
        os.environ["ABLATE_CACHE"] = p["cache_dir"]
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


# ----------------------------------------------------------------------------- driver side


def prepare_datasets(trials: list[Trial], progress: bool = True) -> dict[str, list[str]]:
    """Build (or load) every dataset recipe once; data hash -> evaluated split names."""
    from ablate.data import load_graphsets

    splits: dict[str, list[str]] = {}
    for t in trials:
        if t.data_hash is None or t.data_hash in splits:
            continue
        try:
            sets = load_graphsets(t.dataset, progress=progress, **dict(t.data_params))
        except ConfigError as e:
            raise ConfigError(f"dataset {t.dataset}: {e} (dataset parameters are set as "
                              "data.KEY=VALUE)") from None
        splits[t.data_hash] = [s for s in sets if s != "train"]
    return splits


def check_devices(study: Study, ray_address: str | None = None) -> None:
    """device=cuda needs CUDA: here for an embedded Ray, and GPUs for the trials anywhere."""
    wants = any(getattr(t.config, "device", "auto") == "cuda" for t in study.trials)
    if not wants:
        return
    if study.spec.gpus_per_trial != "auto" and float(study.spec.gpus_per_trial) == 0:
        raise ConfigError("device=cuda needs gpus_per_trial > 0 (or auto): a trial given no "
                          "GPU sees none")
    address = ray_address or os.environ.get("RAY_ADDRESS")
    if not address:
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("device=cuda but this machine has no usable CUDA device (no GPU "
                              "or a CPU build of torch); use device=auto or device=cpu, or join "
                              "a GPU cluster with ray_address=")


def _reads_local_files(t: Trial) -> bool:
    """Whether the trial's dataset is read from a local path (it may fail on a bad path)."""
    return t.data_hash is not None and dict(t.data_params).get("path") is not None


def _quiet_logging() -> None:
    for name in ("ray", "ray.tune", "ray.train", "ray.air", "ray.data"):
        logging.getLogger(name).setLevel(logging.CRITICAL)  # the runner reports failures
    warnings.filterwarnings("ignore", module=r"ray\..*")
    warnings.filterwarnings("ignore", category=DeprecationWarning)


def _silence_raylet_messages() -> None:
    """Drop the raylet's worker-death notices that Ray prints on the driver's stdout.

    The runner records every lost worker itself (store rows, failures.jsonl), and
    the user asked for one progress display. Other Ray output is unaffected.
    """
    try:
        from ray._private import worker as ray_worker
    except ImportError:
        return
    original = ray_worker.print_to_stdstream
    if getattr(original, "_ablate_quiet", False):
        return

    def quiet(data, *args, **kwargs):
        if data.get("pid") != "raylet":
            original(data, *args, **kwargs)

    quiet._ablate_quiet = True
    ray_worker.print_to_stdstream = quiet


def _no_colour_reset_at_exit() -> None:
    """Ray initialises colorama, whose exit hook prints a colour reset code after the
    runner's last line; the runner prints no colours, so the hook goes."""
    try:
        import atexit

        import colorama.initialise as ci
    except ImportError:
        return
    atexit.unregister(ci.reset_all)


def start_ray(address: str | None) -> bool:
    """Join `address` (or $RAY_ADDRESS), else start an embedded local Ray; True if started."""
    import ray

    _quiet_logging()
    _silence_raylet_messages()
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    kwargs = dict(logging_level=logging.ERROR, log_to_driver=False,
                  configure_logging=True)
    if address:
        try:
            ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(f"cannot join the Ray cluster at {address!r} ({first}); start one "
                              "(ray start --head, ray up cluster.yaml) or unset RAY_ADDRESS / "
                              "ray_address= to run on an embedded local Ray") from None
        _quiet_logging()
        _no_colour_reset_at_exit()
        return True
    ray.init(include_dashboard=False, **kwargs)  # sized to the machine (all CPUs, GPUs)
    _quiet_logging()  # ray.init reconfigures its loggers
    _no_colour_reset_at_exit()
    return True


def gpus_per_trial(setting: float | str) -> float:
    """The study's GPUs per trial; 'auto' = 0.25 (four trials per GPU) if the cluster has GPUs."""
    import ray

    if setting != "auto":
        return float(setting)
    return 0.25 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0


def _check_resources(study: Study, gpus: float, embedded: bool, stream: TextIO) -> None:
    """An embedded Ray that cannot fit one trial is a bad value; a cluster may still grow."""
    import ray

    have = ray.cluster_resources()
    spec = study.spec
    need = {"CPU": spec.cpus_per_trial, "GPU": gpus}
    short = [f"{k.lower()}s_per_trial={v:g} but the cluster has {have.get(k, 0):g} {k}"
             for k, v in need.items() if v > have.get(k, 0)]
    if short and embedded:
        raise ConfigError(f"{short[0]}s; lower it, or join a larger cluster with "
                          "ray_address=")
    if short:
        stream.write(f"warning: {short[0]}s now; trials wait until the autoscaler adds "
                     "nodes\n")


def _payload(pack: Pack, spec, cache: str | None) -> dict:
    t = pack.trials[0]  # the trials of a pack share kind and dataset recipe
    kind = TRIAL_KINDS[t.kind]
    return {"trial_id": pack.pack_id, "kind": t.kind, "run": kind.run, "pack_run": kind.pack,
            "members": [{"trial_id": m.trial_id, "config": pickle.dumps(m.config)}
                        for m in pack.trials],
            "dataset": t.dataset, "data_params": t.data_params, "data_hash": t.data_hash,
            "cpus": spec.cpus_per_trial, "max_failures": spec.max_failures, "cache_dir": cache}


def _blobs(trials: list[Trial], ship: bool) -> dict:
    """data hash -> ObjectRef of the cache file bytes, for nodes that lack the file."""
    if not ship:
        return {}
    import ray

    out = {}
    for t in trials:
        if t.data_hash and t.data_hash not in out:
            out[t.data_hash] = ray.put(_cache_file(t.dataset, dict(t.data_params)).read_bytes())
    return out


def check_resources_early(study: Study, ray_address: str | None = None) -> None:
    """Before Ray starts: an embedded Ray gets this machine's CPUs and GPUs, so a trial
    asking for more can never run (a cluster may still grow: checked once joined)."""
    if ray_address or os.environ.get("RAY_ADDRESS"):
        return
    try:
        import ray

        if ray.is_initialized():  # a Ray started by the caller: its resources decide
            return
    except ImportError:
        pass
    spec = study.spec
    cpus = os.cpu_count() or 1
    if spec.cpus_per_trial > cpus:
        raise ConfigError(f"cpus_per_trial={spec.cpus_per_trial:g} but this machine has {cpus} "
                          f"CPUs; use cpus_per_trial<={cpus}, or join a larger cluster with "
                          "ray_address=")
    if spec.gpus_per_trial != "auto" and float(spec.gpus_per_trial) > 0:
        import torch

        gpus = torch.cuda.device_count()
        if float(spec.gpus_per_trial) > gpus:
            raise ConfigError(f"gpus_per_trial={spec.gpus_per_trial:g} but this machine has "
                              f"{gpus} GPUs; use gpus_per_trial=auto or 0, or join a GPU "
                              "cluster with ray_address=")


def run_study(study: Study, results_dir: str | os.PathLike = "results", force: bool = False,
              ray_address: str | None = None, progress: str = "auto",
              stream: TextIO | None = None) -> Summary:
    """Run every trial of `study` not yet complete in the store; see the module docstring."""
    from ablate.runner.store import FAILURES, Store, StoreError

    t_start = time.time()
    stream = stream or sys.stderr
    check_devices(study, ray_address)
    check_resources_early(study, ray_address)
    store = Store(results_dir, study.name)
    summary = Summary(study.name, len(study.trials), results=str(store.dir),
                      failures_log=str(store.dir / FAILURES))
    if not store.writable():  # a read-only archive: re-check it, run nothing
        status = store.scan()
        todo = [t for t in study.trials if force or status.get(t.trial_id) != "ok"]
        if todo:
            raise StoreError(f"the result store {store.dir} is read-only and {len(todo)} of "
                             f"{len(study.trials)} trials are still to run; choose a writable "
                             "results_dir=")
        summary.skipped = len(study.trials)
        summary.wall_s = time.time() - t_start
        return summary
    store.lock()
    try:
        store.clean_temp()
        status = store.scan()
        todo = [t for t in study.trials if force or status.get(t.trial_id) != "ok"]
        summary.skipped = len(study.trials) - len(todo)
        if not todo:
            store.write_plan([t.trial_id for t in study.trials])
        else:
            address = ray_address or os.environ.get("RAY_ADDRESS") or None
            t0 = time.time()
            local = [_reads_local_files(t) for t in todo]
            splits = prepare_datasets([t for t, x in zip(todo, local) if x],
                                      progress=stream.isatty())  # bad paths: before Ray
            ray_start = _RayStarter(address)  # Ray starts while the other datasets are built
            started = False
            try:
                rest = [t for t, x in zip(todo, local) if not x]
                splits.update(prepare_datasets(rest, progress=stream.isatty()))
                summary.timings["datasets"] = time.time() - t0
                started = ray_start.wait()
                summary.timings["ray_start"] = ray_start.seconds
                with _sigterm_as_interrupt(summary):
                    _run_tune(study, todo, splits, store, summary,
                              embedded=started and not address, progress=progress,
                              stream=stream, t_start=t_start)
            finally:
                if ray_start.wait(raise_errors=False):
                    import ray

                    t0 = time.time()
                    ray.shutdown()
                    summary.timings["ray_stop"] = time.time() - t0
                ray_start.release()
    finally:
        store.unlock()
        summary.wall_s = time.time() - t_start
    return summary


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


def clean_tune_leftovers(prefix: str = "ablate-tune-") -> int:
    """Remove Tune experiment folders of runs whose driver died (SIGKILL): pid in the name."""
    n = 0
    for p in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        parts = p.name[len(prefix):].split("-")
        pid = next((int(x[3:]) for x in parts if x.startswith("pid") and x[3:].isdigit()), None)
        if pid is None or pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
            continue  # that driver is alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        shutil.rmtree(p, ignore_errors=True)
        n += 1
    return n


class _RayStarter:
    """`start_ray` in a background thread, so Ray's processes start while the driver works.

    The thread stays alive until `release()`: an embedded Ray's processes get
    PR_SET_PDEATHSIG from the thread that forked them, so they would die with it.
    """

    def __init__(self, address: str | None):
        import threading

        self.address, self.started, self.error, self.seconds = address, False, None, 0.0
        self._ready, self._release = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="ablate-ray-start", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        t0 = time.time()
        try:
            self.started = start_ray(self.address)
        except BaseException as e:  # re-raised in the caller's thread
            self.error = e
        self.seconds = time.time() - t0
        self._ready.set()
        self._release.wait()

    def wait(self, raise_errors: bool = True) -> bool:
        self._ready.wait()
        if self.error is not None and raise_errors:
            raise self.error
        return self.started

    def release(self) -> None:
        self._release.set()
        self._thread.join()


def _run_tune(study: Study, todo: list[Trial], splits: dict, store: Store, summary: Summary,
              embedded: bool, progress: str, stream: TextIO, t_start: float | None = None) -> None:
    import ray
    from ray import tune

    clean_tune_leftovers()
    storage = tempfile.mkdtemp(prefix=f"ablate-tune-{study.name}-pid{os.getpid()}-")
    try:
        gpus = gpus_per_trial(study.spec.gpus_per_trial)
        _check_resources(study, gpus, embedded=embedded, stream=stream)
        store.write_plan([t.trial_id for t in study.trials])  # the run is accepted now
        ship = not embedded or len(ray.nodes()) > 1
        spec = study.spec
        cache = os.environ.get("ABLATE_CACHE")
        packs = make_packs(todo, pack_seeds(spec.pack_size, gpus))
        payloads = [_payload(pk, spec, cache) for pk in packs]
        display = Progress(study.name, len(todo), summary.skipped, progress, stream,
                           t0=t_start)
        callback = _StoreCallback(store, {t.trial_id: t for t in todo}, splits, display,
                                  {pk.pack_id: [t.trial_id for t in pk.trials] for pk in packs})
        resources = {"cpu": spec.cpus_per_trial, "gpu": gpus}
        fn = tune.with_resources(tune.with_parameters(trainable, blobs=_blobs(todo, ship)),
                                 resources)
        tuner = tune.Tuner(
            fn,
            param_space={"trial": tune.grid_search(payloads)},
            tune_config=tune.TuneConfig(num_samples=1, reuse_actors=True,
                                        trial_name_creator=_trial_name,
                                        trial_dirname_creator=_trial_name),
            run_config=tune.RunConfig(
                name=study.name, storage_path=storage, verbose=0, callbacks=[callback],
                stop=_StorageStop(callback),
                failure_config=tune.FailureConfig(max_failures=spec.max_failures),
                checkpoint_config=tune.CheckpointConfig(checkpoint_at_end=False),
                log_to_file=False),
        )
        display.refresh(force=True)
        t0 = time.time()
        try:
            tuner.fit()
        except KeyboardInterrupt:  # a second Ctrl-C: stop now, written files stay valid
            pass
        summary.timings["tune"] = time.time() - t0
        display.close()
        summary.ok = sum(1 for s in callback.final.values() if s == "ok")
        summary.failed = sorted(k for k, s in callback.final.items() if s != "ok")
        summary.remaining = sorted(t.trial_id for t in todo if t.trial_id not in callback.final)
        summary.retries = callback.retries
        summary.storage_error = callback.storage_error
        for tid, error in sorted(callback.errors.items()):
            summary.errors.setdefault(error, []).append(tid)
    finally:
        shutil.rmtree(storage, ignore_errors=True)


def _tune_stopper_base():
    from ray import tune

    return tune.Stopper


class _StorageStop(_tune_stopper_base()):
    """Stops the whole study once a result could not be written (disk full, read-only)."""

    def __init__(self, callback: _StoreCallback):
        self.callback = callback

    def __call__(self, trial_id, result) -> bool:
        return bool(self.callback.storage_error)

    def stop_all(self) -> bool:
        return bool(self.callback.storage_error)


def _trial_name(trial) -> str:
    return f"{trial.config['trial']['trial_id']}_{trial.trial_id}"


def _tune_callback_base():
    from ray import tune

    return tune.Callback


class _StoreCallback(_tune_callback_base()):
    """Driver-side: write each reported attempt to the store, record failures, drive progress.

    A Tune trial runs a pack (`ablate.runner.packing`): every member trial's rows go to its own
    file, tagged with the pack's id.
    """

    def __init__(self, store: Store, trials: dict[str, Trial], splits: dict,
                 display: Progress, packs: dict[str, list[str]]):
        import ray

        self.store, self.trials, self.splits, self.display = store, trials, splits, display
        self.packs = packs  # pack id -> member trial ids
        self.ray_version = ray.__version__
        self.final: dict[str, str] = {}  # trial id -> final status (ok / error / nan)
        self.errors: dict[str, str] = {}  # trial id -> final error text
        self.attempts: dict[str, int] = {}  # trial id -> attempts recorded so far
        self.retries = 0
        self.storage_error = ""  # first failed result write: the study stops (`_StorageStop`)

    def on_trial_start(self, iteration, trials, trial, **info):
        for tid in self.packs[_tid(trial)]:
            self.display.start(tid)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        blob = result.pop("payload", None)  # do not keep it in Tune's experiment state
        if blob is None:
            return
        pack_id, out = _tid(trial), pickle.loads(blob)
        for m in out["members"]:
            tid = m["trial_id"]
            records = m["records"] if m["status"] != "error" else []
            rows = records or self._error_rows(tid, m["status"], m["error"])
            attempt = self._write(tid, rows, m["curves"] if records else [], out["meta"],
                                  pack_id)
            if attempt is None:  # not stored: the trial stays to do, the study stops
                self.display.retry(tid)
                continue
            if m["status"] == "ok":
                self.final[tid] = "ok"
                self.display.finish(tid, "ok")
                continue
            self._log(tid, attempt, m["status"], m["error"], out["meta"])
            if m.get("final", out["final"]):
                self.final[tid] = m["status"]
                self.errors[tid] = m["error"] or m["status"]
                self.display.finish(tid, "failed")
            else:
                self.retries += 1
                self.display.retry(tid)

    def on_trial_recover(self, iteration, trials, trial, **info):
        self._lost(trial, final=False)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._lost(trial, final=True)

    def on_step_end(self, iteration, trials, **info):
        self.display.refresh()

    # ------------------------------------------------------------------ helpers
    def _lost(self, trial, final: bool) -> None:
        """The worker (actor or node) died mid-pack: record it; Tune retries it or gives up."""
        pack_id = _tid(trial)
        error = _tune_error(trial)
        for tid in self.packs[pack_id]:
            if tid in self.final:  # already recorded as finished
                continue
            attempt = self._write(tid, self._error_rows(tid, "error", error), [], {}, pack_id)
            if attempt is None:
                continue
            self._log(tid, attempt, "error", error, {})
            if final:
                self.final[tid] = "error"
                self.errors[tid] = error
                self.display.finish(tid, "failed")
            else:
                self.retries += 1
                self.display.retry(tid)

    def _error_rows(self, tid: str, status: str, error: str) -> list[dict]:
        from ablate.config import axes

        t = self.trials[tid]
        base = axes(t.config)
        if t.data_hash:
            base["dataset_hash"] = t.data_hash
        splits = self.splits.get(t.data_hash) or list(getattr(t.config, "eval_splits", [""]))
        return [{**base, "seed": s, "split": sp, "status": status, "error": error}
                for s in getattr(t.config, "seeds", (0,)) for sp in splits]

    def _write(self, tid: str, rows: list[dict], curves: list[dict], meta: dict,
               pack_id: str) -> int | None:
        """Store one attempt's rows; its attempt number, or None if the write failed."""
        from ablate.runner.store import now_iso

        if self.storage_error:
            return None
        attempt = self.attempts.get(tid, 0) + 1
        extra = {"attempt": attempt, "created_at": now_iso(), "ray_version": self.ray_version,
                 "trial_s": meta.get("trial_s", float("nan")), "node": meta.get("node", ""),
                 "node_id": meta.get("node_id", ""), "gpu_ids": meta.get("gpu_ids", ""),
                 "started_at": meta.get("started_at", float("nan")),
                 "finished_at": meta.get("finished_at", float("nan")), "pack_id": pack_id,
                 "pack_trials": len(self.packs[pack_id])}
        try:
            self.store.write(tid, rows, curves, extra)
        except OSError as e:  # disk full, read-only, gone: stop the study cleanly
            self.storage_error = f"{e.strerror or type(e).__name__} writing {self.store.dir}"
            return None
        self.attempts[tid] = attempt
        return attempt

    def _log(self, tid: str, attempt: int, status: str, error: str, meta: dict) -> None:
        try:
            self.store.log_failure({"trial_id": tid, "attempt": attempt, "status": status,
                                    "error": error, "node": meta.get("node", "")})
        except OSError as e:
            self.storage_error = self.storage_error or \
                f"{e.strerror or type(e).__name__} writing {self.store.dir}"


def _tid(trial) -> str:
    return trial.config["trial"]["trial_id"]


def _tune_error(trial) -> str:
    """One line describing why the trial's last attempt failed (from Tune's error file)."""
    try:
        text = Path(trial.error_file).read_text() if trial.error_file else ""
    except OSError:
        text = ""
    sections = text.split("Failure # ")
    lines = [ln.strip() for ln in sections[-1].splitlines()[1:] if ln.strip()]
    for ln in lines:
        if "died" in ln or "Error" in ln or "error" in ln:
            return ln[:500]
    return (lines[0] if lines else "the trial's worker failed")[:500]


# ----------------------------------------------------------------------------- progress


class Progress:
    """One live status line: done / running / failed / skipped, ETA."""

    def __init__(self, study: str, todo: int, skipped: int, mode: str = "auto",
                 stream: TextIO | None = None, every_s: float = 2.0, heartbeat_s: float = 60.0,
                 t0: float | None = None):
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if self.stream.isatty() else "lines"
        self.study, self.todo, self.skipped, self.mode = study, todo, skipped, mode
        self.every_s, self.heartbeat_s = every_s, heartbeat_s
        self.running: set[str] = set()
        self.done = self.failed = self.retries = 0
        self.t0 = t0 or time.time()  # the run's start: Ray's start-up counts too
        self._last = 0.0
        self._last_counts: tuple = ()
        self._first_done: float | None = None  # ETA runs from here: start-up is not a trial

    def __getstate__(self) -> dict:  # Tune pickles its callbacks; streams do not pickle
        return {**self.__dict__, "stream": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, stream=sys.stderr)

    def start(self, tid: str) -> None:
        self.running.add(tid)
        self.refresh()

    def finish(self, tid: str, status: str) -> None:
        self.running.discard(tid)
        self._first_done = self._first_done or time.time()
        if status == "ok":
            self.done += 1
        else:
            self.failed += 1
        self.refresh(force=self.mode == "bar")

    def retry(self, tid: str) -> None:
        self.running.discard(tid)
        self.retries += 1
        self.refresh(force=self.mode == "bar")

    def text(self) -> str:
        el = time.time() - self.t0
        finished = self.done + self.failed
        left = self.todo - finished
        if finished >= 2:
            eta = _fmt((time.time() - self._first_done) / (finished - 1) * left)
        else:
            eta = _fmt(el * left) if finished else "--"
        retry = f", {self.retries} retried" if self.retries else ""
        return (f"[{self.study}] {finished}/{self.todo} finished: {self.done} ok, {self.failed} "
                f"failed{retry}, {len(self.running)} running, {self.skipped} skipped | "
                f"{_fmt(el)} elapsed, ETA {eta}")

    def refresh(self, force: bool = False) -> None:
        if self.mode == "none":
            return
        now = time.time()
        text = self.text()
        if self.mode == "bar":
            if force or now - self._last > 0.5:
                self.stream.write("\r\033[K" + text)
                self.stream.flush()
                self._last = now
        else:  # a log: a line when the counts change (at most every every_s) or a heartbeat
            counts = (self.done, self.failed, self.retries, len(self.running))
            changed = counts != self._last_counts and now - self._last >= self.every_s
            if force or changed or now - self._last >= self.heartbeat_s:
                self.stream.write(text + "\n")
                self.stream.flush()
                self._last, self._last_counts = now, counts

    def close(self) -> None:
        if self.mode == "none":
            return
        self.running.clear()
        if self.mode == "bar":
            self.stream.write("\r\033[K" + self.text() + "\n")
        else:
            self.stream.write(self.text() + "\n")
        self.stream.flush()


def _fmt(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else \
        f"{s // 60}:{s % 60:02d}"
