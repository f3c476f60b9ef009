"""Ray start-up for the runner: a quiet environment, joining or starting Ray, Tune's storage.

Importing this module changes nothing: `quiet_ray_env` sets Ray's and Tune's
environment variables when the driver starts (`ablate.runner.execute.driver.run_study`)
and again at the top of `start_ray`, before this process first imports `ray`.
`start_ray` joins a cluster or starts an embedded local Ray and quiets its
console (loggers, the raylet's worker-death notices, colorama's exit hook);
`RayStarter` runs it in a background thread. `RayMode` decides embedded-or-cluster and
shipping the same way for grid and search studies; `check_resources` checks, once Ray is up,
that the cluster can fit a trial (the checks before Ray starts: `ablate.runner.plan.checks`).
`tune_storage` gives each driver its Tune experiment folder.

The session folder of an embedded Ray is marked and reaped by `ablate.runner.execute.reap`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ablate.errors import ConfigError
from ablate.runner.execute.reap import clean_ray_leftovers, mark_session, ray_temp_dir
from ablate.runner.plan.checks import check_cluster_reachable, cluster_address

if TYPE_CHECKING:
    from ablate.runner.study.expand import Study

# Quiet Ray/Tune console (DESIGN.md "measured facts"). Set before `import ray`: Ray reads
# RAY_DEDUP_LOGS when it is imported, the raylet reads RAY_* when ray.init starts it, Tune
# reads TUNE_* and RAY_AIR_NEW_OUTPUT when a Tuner runs.
RAY_ENV = {
    "RAY_AIR_NEW_OUTPUT": "0",
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",  # no per-trial JSON/CSV/TBX
    "RAY_DEDUP_LOGS": "0",
    "TUNE_PRINT_ALL_TRIAL_ERRORS": "0",  # failures are reported by the runner
    "TUNE_WARN_SLOW_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "1e9",
    # An embedded Ray need not prestart idle workers: Tune's actors never use them, and on a
    # small machine they compete with the trials' start-up for the CPUs.
    "RAY_enable_worker_prestart": "0",
    "RAY_prestart_worker_first_driver": "0",
}


def worker_data_env(cache_dir: str | None) -> None:
    """In a Ray worker: read datasets from the driver's cache folder (when it shipped one) and
    never download (the driver fetched and prepared every data set before trials started)."""
    from ablate.data.download import ENV_ALLOW

    if cache_dir:
        os.environ["ABLATE_CACHE"] = cache_dir
    os.environ[ENV_ALLOW] = "0"


def worker_env(cache_dir: str | None, import_paths: Iterable[str] = ()) -> None:
    """In a Ray worker, before it reads a trial's config: the driver's dataset cache with no
    download (`worker_data_env`) and the driver's folders of user code on `sys.path`
    (`ablate.user_code.extend_import_path`: a ``backbone=module:Class`` or ``kind:
    module:attr`` imports there as it does in the driver). The driver sends its
    `ablate.user_code.import_paths()` with the work; every Ray task or actor that trains a
    trial calls this: the grid trainable (`ablate.runner.execute.worker`), the search
    trainable and the final evaluation's task (`ablate.runner.search`)."""
    from ablate.user_code import extend_import_path

    worker_data_env(cache_dir)
    extend_import_path(import_paths)


def quiet_ray_env() -> None:
    """Set `RAY_ENV` in this process's environment, keeping any value the user already set."""
    for key, value in RAY_ENV.items():
        os.environ.setdefault(key, value)


def _quiet_logging() -> None:
    for name in ("ray", "ray.tune", "ray.train", "ray.air", "ray.data"):
        logging.getLogger(name).setLevel(logging.CRITICAL)  # the runner reports failures
    warnings.filterwarnings("ignore", module=r"ray\..*")  # Ray's own; no process-wide filter


def _silence_raylet_messages() -> None:
    """Drop the raylet's worker-death notices that Ray prints on the driver's stdout.

    The runner records every lost worker itself (store rows, failures.jsonl), and
    the user asked for one progress display. Other Ray output is unaffected.
    """
    from ablate.compat import wrap_print_to_stdstream

    def drop_raylet(original):
        def quiet(data, *args, **kwargs):
            if data.get("pid") != "raylet":
                original(data, *args, **kwargs)

        return quiet

    wrap_print_to_stdstream(drop_raylet)  # once; Ray's private printer, through ablate.compat


def _no_colour_reset_at_exit() -> None:
    """Ray initialises colorama, whose exit hook prints a colour reset code after the
    runner's last line; the runner prints no colours, so the hook goes."""
    try:
        import atexit

        import colorama.initialise as ci
    except ImportError:
        return
    atexit.unregister(ci.reset_all)


def ship_data(embedded: bool, nodes: int) -> bool:
    """Whether the prepared dataset files go to the trials through Ray's object store
    (`ablate.runner.execute.ship`): always on a joined cluster, whose nodes need not share
    this machine's disk, and on an embedded Ray only once it has more than one node."""
    return not embedded or nodes > 1


@dataclass(frozen=True)
class RayMode:
    """How a study runs on Ray, decided the same way for grid and search studies: joining the
    cluster at `address` (the `ray_address` option, else $RAY_ADDRESS) or, with none, an
    embedded local Ray. `started` False: Ray was already running in this process when the
    study began (its caller's, whose nodes are unknown), which counts as a cluster."""

    address: str | None
    started: bool = True

    @classmethod
    def of(cls, ray_address: str | None, started: bool = True) -> RayMode:
        return cls(cluster_address(ray_address), started)

    @property
    def embedded(self) -> bool:
        return self.started and self.address is None

    def ship(self, nodes: int) -> bool:
        """Whether to ship the prepared data to a Ray of `nodes` nodes (`ship_data`)."""
        return ship_data(self.embedded, nodes)


def start_ray(address: str | None) -> bool:
    """Join `address` (or $RAY_ADDRESS), else start an embedded local Ray; True if started."""
    quiet_ray_env()  # before the first `import ray` of this process
    import ray

    _quiet_logging()
    _silence_raylet_messages()
    if ray.is_initialized():
        return False
    address = cluster_address(address)
    kwargs = dict(logging_level=logging.ERROR, log_to_driver=False,
                  configure_logging=True)
    if address:
        check_cluster_reachable(address)
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
    # a new Ray of this process, sized to the machine (all CPUs, GPUs); "local" never joins a
    # Ray that something else left running on this host (that takes ray_address=auto)
    check_loopback()
    clean_ray_leftovers()
    try:
        ray.init(address="local", include_dashboard=False, **kwargs)
    except (OSError, RuntimeError) as e:  # RpcError is a RuntimeError; ConnectionError an OSError
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        logs = ray_temp_dir() / "session_latest" / "logs"
        raise ConfigError(f"the embedded Ray did not start ({first.strip()})"
                          + (f"; its logs are in {logs}" if logs.is_dir() else "")) from None
    mark_session()
    _quiet_logging()  # ray.init reconfigures its loggers
    _no_colour_reset_at_exit()
    return True


def check_loopback() -> None:
    """An embedded Ray's processes talk over 127.0.0.1: where it cannot be reached (the loopback
    interface down, as in a fresh network namespace), Ray would wait minutes for its GCS before
    failing; say so at once instead."""
    import socket

    try:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            with socket.create_connection(server.getsockname(), timeout=5):
                pass
    except OSError as e:
        raise ConfigError(f"an embedded Ray needs 127.0.0.1, which this machine cannot reach "
                          f"({e.strerror or e}): bring the loopback interface up (ip link set lo "
                          "up) or join a running cluster (ray_address=...)") from None


class RayStarter:
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
        """Block until Ray is up; True if this starter started (or joined) it."""
        self._ready.wait()
        if self.error is not None and raise_errors:
            raise self.error
        return self.started

    def release(self) -> None:
        """Let the thread end (after `ray.shutdown()`, for an embedded Ray)."""
        self._release.set()
        self._thread.join()


def gpus_per_trial(setting: float | str) -> float:
    """The study's GPUs per trial; 'auto' = 0.25 (four trials per GPU) if the cluster has GPUs."""
    import ray

    if setting != "auto":
        return float(setting)
    return 0.25 if ray.cluster_resources().get("GPU", 0) > 0 else 0.0


def check_resources(study: Study, gpus: float, embedded: bool, stream: TextIO) -> None:
    """Once Ray is up: an embedded Ray that cannot fit one trial is a bad value; a cluster
    may still grow (a warning)."""
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


@contextlib.contextmanager
def tune_storage(name: str):
    """A Tune experiment folder for this driver, `ablate-tune-<name>-pid<pid>-*` in the temp
    dir: folders left by killed drivers are removed first, this one on exit."""
    clean_tune_leftovers()
    path = tempfile.mkdtemp(prefix=f"ablate-tune-{name}-pid{os.getpid()}-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


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
