"""SIGTERM as an interrupt: `Terminated`, raised in the main thread the way Ctrl-C raises
`KeyboardInterrupt`, so that a run stopped during start-up (imports, datasets, Ray's
start) prints the same resume line as one stopped later, exits 143 and stops the embedded
Ray it started. While Tune runs, the driver's own handler asks Tune to stop gracefully."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """The process got SIGTERM (exit code 143; a rerun resumes)."""


RESUME = "interrupted: rerun the same command to resume"


def _importing(frame) -> bool:
    """True while `frame` runs inside an import (some module's top level executing)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


_PENDING = threading.Event()  # SIGTERM came: set until the run ends (`forget_sigterm`)


def _raise_terminated(signum, frame) -> None:
    _PENDING.set()
    if _importing(frame):
        # raised inside an import, the error would leave a library half-imported (numpy
        # without `matrix`: seen), and a library that catches it would fail later on the
        # half module with a traceback. Leave now, as before `main`: anything Ray left is
        # cleaned by the next run (`reap.clean_ray_leftovers`).
        exit_resumable()
    raise Terminated()


def exit_resumable() -> None:
    """Print the resume line and leave at once with 143 (SIGTERM), running no clean-up."""
    print(RESUME, flush=True)
    os._exit(143)


def raise_if_terminated() -> None:
    """Raise `Terminated` again if SIGTERM came and the run is still going: a library that
    caught the first one (`except BaseException`, `except KeyboardInterrupt` around its own
    work) would otherwise let a stopped run go on. Called between start-up's stages."""
    if _PENDING.is_set():
        raise Terminated()


def forget_sigterm() -> None:
    """The run that a SIGTERM stopped is over: later runs of this process (a notebook's, a
    test's) start clean."""
    _PENDING.clear()


def raise_on_sigterm() -> None:
    """From now on SIGTERM raises `Terminated` in the main thread (a no-op in other threads);
    a SIGTERM that ended an earlier run of this process is forgotten."""
    if threading.current_thread() is threading.main_thread():
        forget_sigterm()
        signal.signal(signal.SIGTERM, _raise_terminated)


def signal_name(exc: BaseException) -> str:
    """'SIGTERM' for `Terminated`, 'SIGINT' for any other `KeyboardInterrupt`."""
    return "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"


@contextmanager
def handlers_kept_through_tune() -> Iterator[None]:
    """SIGINT's and SIGUSR1's handlers as they were before a Tune run, after it.

    Tune installs its own handler for a run and puts the previous one back only when a signal
    comes; after a run that ended by itself, its handler stays and swallows the next Ctrl-C
    (a search's next arm, anything after the run in the same process)."""
    saved = {}
    if threading.current_thread() is threading.main_thread():
        saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGUSR1)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            if handler is not None:
                signal.signal(s, handler)
