"""Ray start-up for the runner: a quiet environment, joining or starting Ray, resource checks.

Importing this module changes nothing: `quiet_ray_env` sets Ray's and Tune's
environment variables when the driver starts (`ablate.runner.execute.driver.run_study`)
and again at the top of `start_ray`, before this process first imports `ray`.
`start_ray` joins a cluster or starts an embedded local Ray and quiets its
console (loggers, the raylet's worker-death notices, colorama's exit hook);
`RayStarter` runs it in a background thread. The checks here reject a study
whose trials can never run on this machine or cluster, before any trial starts.

An embedded Ray's session folder (`/tmp/ray/session_*`) is marked with the driver's pid
(`SESSION_MARK`): `end_session` stops what is left of it and removes it after
`ray.shutdown()`, and `clean_ray_leftovers` does the same, at the next start, for the
session of a driver that was killed (SIGKILL) before it could.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ablate.errors import ConfigError

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


def cluster_address(ray_address: str | None) -> str | None:
    """The Ray cluster a run joins: the `ray_address` option, else $RAY_ADDRESS; None for an
    embedded local Ray. The one rule of grid and search studies (`start_ray`, `RayMode`)."""
    return ray_address or os.environ.get("RAY_ADDRESS") or None


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
    clean_ray_leftovers()
    ray.init(address="local", include_dashboard=False, **kwargs)
    mark_session()
    _quiet_logging()  # ray.init reconfigures its loggers
    _no_colour_reset_at_exit()
    return True


SESSION_MARK = "ablate_driver_pid"  # in an embedded Ray's session folder: the driver's pid


def _session_dir() -> Path | None:
    """The session folder of the Ray this process started or joined, if any."""
    from ablate.compat import ray_session_dir

    session = ray_session_dir()  # a Ray without the private name: one line, not a silent skip
    return Path(session) if session is not None else None


def mark_session() -> Path | None:
    """Write this driver's pid into the session folder of the embedded Ray it just started."""
    session = _session_dir()
    if session is None:
        return None
    try:
        (session / SESSION_MARK).write_text(str(os.getpid()))
    except OSError:
        return None
    return session


def embedded_session() -> Path | None:
    """The session folder of the embedded Ray this driver started (marked with its pid)."""
    session = _session_dir()
    try:
        if session is not None and (session / SESSION_MARK).read_text() == str(os.getpid()):
            return session
    except OSError:
        pass
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) is not alive
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _ray_package_dir() -> str:
    import importlib.util

    spec = importlib.util.find_spec("ray")
    locations = list(spec.submodule_search_locations or []) if spec else []
    return str(Path(locations[0]).resolve()) + os.sep if locations else ""


def is_ray_process(argv: list[str], ray_dir: str | None = None) -> bool:
    """Whether a command line is one of Ray's processes: a worker or agent (its title starts
    with 'ray::'), or a program or Python script of the installed ray package (GCS, raylet,
    monitors, dashboard). A user's `tail -f` on a session's log is not."""
    if not argv:
        return False
    if argv[0].startswith("ray::"):
        return True
    ray_dir = _ray_package_dir() if ray_dir is None else ray_dir
    return bool(ray_dir) and any(a.startswith(ray_dir) for a in argv[:3])


def session_processes(session: Path) -> list[int]:
    """Ray's processes (other than this one) with a file open under `session` (Linux `/proc`).

    Every process of an embedded Ray keeps its log files there (GCS, raylet, monitors, the
    dashboard and runtime-env agents, workers); a process counts only when its command line
    is Ray's too (`is_ray_process`), so a user's viewer of those logs is never stopped."""
    prefix = str(session) + os.sep
    out = []
    proc = Path("/proc")
    if not proc.is_dir():
        return out
    ray_dir = _ray_package_dir()
    for d in proc.iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if not any(os.readlink(fd).startswith(prefix) for fd in (d / "fd").iterdir()):
                continue
            argv = [a.decode(errors="replace") for a in (d / "cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue
        if is_ray_process(argv, ray_dir):
            out.append(int(d.name))
    return out


def end_session(session: Path, keep_logs: bool = False, wait_s: float = 5.0) -> int:
    """Stop every process left of an embedded Ray's session (SIGTERM, then SIGKILL after
    `wait_s`) and remove its folder, or with `keep_logs` only unmark it (Ray's own way:
    the folder stays). Returns how many processes had to be stopped."""
    pids = session_processes(session)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.time() + wait_s
    while any(_alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.05)
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    if keep_logs:
        (session / SESSION_MARK).unlink(missing_ok=True)
        return len(pids)
    latest = session.parent / "session_latest"
    with contextlib.suppress(OSError):
        if latest.is_symlink() and Path(os.readlink(latest)).name == session.name:
            latest.unlink()
    shutil.rmtree(session, ignore_errors=True)
    return len(pids)


def ray_temp_dir() -> Path:
    """Where Ray keeps its session folders on this machine (`/tmp/ray` unless RAY_TMPDIR or
    TMPDIR says otherwise, as Ray decides)."""
    base = os.environ.get("RAY_TMPDIR") or (os.environ.get("TMPDIR")
                                            if sys.platform.startswith("linux") else None)
    return Path(base or "/tmp") / "ray"


def clean_ray_leftovers(root: Path | None = None) -> int:
    """Sessions of embedded runs whose driver died without stopping Ray (SIGKILL): their
    agents and workers are stopped and their folders removed. Sessions not marked by an
    ablate driver (`ray start`, other programs) and those of live drivers are left alone."""
    n = 0
    root = root or ray_temp_dir()
    if not root.is_dir():
        return 0
    for session in root.glob("session_*"):
        if session.is_symlink():
            continue
        try:
            pid = int((session / SESSION_MARK).read_text())
        except (OSError, ValueError):
            continue
        if pid == os.getpid() or _alive(pid):
            continue
        end_session(session)
        n += 1
    return n


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


def check_devices(study: Study, ray_address: str | None = None) -> None:
    """device=cuda needs CUDA: here for an embedded Ray, and GPUs for the trials anywhere."""
    wants = any(getattr(t.config, "device", "auto") == "cuda" for t in study.trials)
    if not wants:
        return
    if study.spec.gpus_per_trial != "auto" and float(study.spec.gpus_per_trial) == 0:
        raise ConfigError("device=cuda needs gpus_per_trial > 0 (or auto): a trial given no "
                          "GPU sees none")
    if not cluster_address(ray_address):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("device=cuda but this machine has no usable CUDA device (no GPU "
                              "or a CPU build of torch); use device=auto or device=cpu, or join "
                              "a GPU cluster with ray_address=")


def check_resources_early(study: Study, ray_address: str | None = None) -> None:
    """Before Ray starts: an embedded Ray gets this machine's CPUs and GPUs, so a trial
    asking for more can never run (a cluster may still grow: checked once joined)."""
    if cluster_address(ray_address):
        return
    ray = sys.modules.get("ray")  # not imported yet: no Ray is running in this process
    if ray is not None and ray.is_initialized():  # a Ray started by the caller decides
        return
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
