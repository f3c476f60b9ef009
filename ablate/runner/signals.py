"""SIGTERM as an interrupt: `Terminated`, raised in the main thread the way Ctrl-C raises
`KeyboardInterrupt`, so that a run stopped during start-up (imports, datasets, Ray's
start) prints the same resume line as one stopped later, exits 143 and stops the embedded
Ray it started. While Tune runs, the driver's own handler asks Tune to stop gracefully."""

from __future__ import annotations

import signal
import threading


class Terminated(KeyboardInterrupt):
    """The process got SIGTERM (exit code 143; a rerun resumes)."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def raise_on_sigterm() -> None:
    """From now on SIGTERM raises `Terminated` in the main thread (a no-op in other threads)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)


def signal_name(exc: BaseException) -> str:
    """'SIGTERM' for `Terminated`, 'SIGINT' for any other `KeyboardInterrupt`."""
    return "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
