"""Reaping what an embedded Ray leaves behind: its processes and session folder.

An embedded Ray's session folder (`/tmp/ray/session_*`) is marked with the driver's pid
(`SESSION_MARK`, `mark_session`, written by `ablate.runner.execute.ray_env.start_ray`):
`end_session` stops what is left of it and removes it after `ray.shutdown()`, and
`clean_ray_leftovers` does the same, at the next start, for the session of a driver that was
killed (SIGKILL) before it could. Only Ray's own processes with a file open in the session
count (`session_processes`, `is_ray_process`); sessions not marked by an ablate driver and
those of live drivers are left alone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

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


def shutdown_ray(embedded: bool, keep_logs: Callable[[], bool]) -> Path | None:
    """`ray.shutdown()`; for the embedded Ray this driver started, its leftover processes
    stopped and its session folder removed, or kept when `keep_logs()` (trials failed: Ray's
    logs are there). Returns the kept logs folder, else None."""
    import ray

    session = embedded_session() if embedded else None
    ray.shutdown()
    if session is None:
        return None
    keep = keep_logs()
    end_session(session, keep_logs=keep)
    return session / "logs" if keep else None


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
