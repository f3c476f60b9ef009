"""The process pool that prepares data (superpixels of tens of thousands of images): how its
workers start, how they die with the driver, and one clear error when one dies.

Not a data source: nothing here shapes a graph, so it is not part of any recipe's source
digest (`ablate.data.source_digest`); the pool and the serial path give the same graphs.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Callable, Iterator


def start_method() -> str:
    """How the superpixel pool starts its workers: `fork` where the OS has it and this process
    runs no other thread (a worker forked from it needs no imports: cheaper than a fresh
    interpreter importing `ablate.data`, i.e. torch, which costs more than converting all 1797
    digits); else `loky` (joblib's executor: a fresh interpreter per worker, exec'd, not forked,
    so no lock another thread holds is copied; it never re-imports the caller's `__main__`, so
    a script without a main guard, code on stdin and a notebook all work). With another thread
    alive (a driver starting Ray beside data preparation, tqdm's monitor, a Ray worker's own
    threads) a fork could copy a held lock and hang: never then. Both executors fail loudly
    when a worker dies (`SuperpixelPoolError`); none respawns dying workers forever."""
    if "fork" in mp.get_all_start_methods() and threading.active_count() == 1:
        return "fork"
    return "loky"


class SuperpixelPoolError(RuntimeError):
    """A superpixel worker died (killed, out of memory, crashed): one line, no retry loop."""


def _executor(method: str, workers: int):
    if method == "fork":
        from concurrent.futures import ProcessPoolExecutor

        return ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"),
                                   initializer=_pool_worker, initargs=(os.getpid(),))
    from joblib.externals.loky import get_reusable_executor

    # reused by later calls of this process (the workers' imports are paid once); they exit
    # after 30 s idle, and with the driver (`_pool_worker`)
    return get_reusable_executor(workers, timeout=30, initializer=_pool_worker,
                                 initargs=(os.getpid(), False))


def map_chunks(fn: Callable, chunks: list, workers: int) -> Iterator:
    """`fn` of every chunk, in order: serial (`workers <= 1`, at most one chunk, or inside a
    daemonic process that may not start children) or on a process pool (`start_method`)."""
    if workers <= 1 or len(chunks) <= 1 or mp.current_process().daemon:
        yield from map(fn, chunks)
        return
    from concurrent.futures.process import BrokenProcessPool

    method = start_method()
    ex = _executor(method, min(workers, len(chunks)))
    try:
        with _signals_blocked():  # only while the workers start (a fork happens at submit)
            futures = [ex.submit(fn, chunks[0])]
        futures += [ex.submit(fn, c) for c in chunks[1:]]
        for f in futures:
            yield f.result()
    except BrokenProcessPool as e:  # loky's TerminatedWorkerError is one
        raise SuperpixelPoolError(
            f"a superpixel worker ({method}) died before finishing: {str(e).splitlines()[0]} "
            "(out of memory? prepare with fewer workers, or serially with workers=1)") from None
    finally:
        if method == "fork":
            ex.shutdown(wait=True, cancel_futures=True)
        else:  # the reusable executor stays for the next call; drop what was queued
            for f in futures if "futures" in locals() else ():
                f.cancel()


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _signals_blocked():
    """Ctrl-C and SIGTERM held back while the pool forks its workers, so that none arrives in a
    worker before `_pool_worker` has replaced the driver's handlers (the driver gets them
    once the fork is over)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _pool_worker(parent: int, deathsig: bool = True) -> None:
    """A superpixel worker: Ctrl-C is the driver's to handle, SIGTERM (the pool's shutdown)
    ends it silently, and it dies with the driver. Without this, a forked worker keeps the
    driver's SIGTERM handler and prints a traceback when the pool ends. `deathsig`: the kernel
    kills it when the thread that started it ends (a forked worker: the driver's main thread);
    loky starts workers from its own threads too, so its workers rely on loky's own watch (a
    worker whose driver is gone finds its queue closed and exits)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
    if not deathsig:
        return
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the driver died before the line above
        os._exit(1)
