"""SLIC superpixel graphs of 28x28 grayscale images (MNIST-75SP, SPEC section 1).

Follows SPEC "MNIST-75SP" and the authors' `extract_superpixels.py` /
`MNIST75sp` code: each image in [0, 1] becomes <= 75 SLIC superpixels
(compactness 0.25, `n_segments` starting at 95 and lowered by one until at most
75 segments come back), with SLIC as scikit-image 0.15 ran it for the authors (the
recipe's `slic` rule, `ablate.data.slic`; "v0.19" is today's wrapper); every superpixel
is a node with its mean intensity and its centre of mass (row, col) / 28; the graph is
complete with weights A_ij = exp(-||c_i - c_j|| / (0.1 pi)^2) (zero diagonal;
`ablate.data.kernel`, derived from the centroids where batches are made, never stored);
the ground-truth
attention is proportional to the mean intensity of superpixels with intensity
>= 0.5, zero elsewhere, normalised to sum 1 (`gt="intensity"`, SPEC 1). The
reference's MNIST-75SP script runs its ChebyGIN (K > 1) ground-truth oracle with
another ground truth, uniform over every superpixel with mean intensity > 0
(`gt="any"`, the authors' `gt_attn_threshold = 0`); see docs/recipes.md.

`images_to_superpixels` converts many images on 2 worker processes (which leave
Ctrl-C and SIGTERM to the driver, end quietly with the pool and die with the driver);
`superpixel_graphs` turns the (intensity, centre) pairs into explicit edges, edge
weights and ground truth (the form the cache stored before it kept centroids only).
Feature assembly and standardisation live in `ablate.data.mnist`.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import threading
from collections.abc import Iterator

import numpy as np

from ablate.data import slic
from ablate.data.graphs import normalize_gt
from ablate.data.kernel import adjacency, complete_edges

N_SEGMENTS_START = 95  # first n_segments asked of SLIC
MAX_SUPERPIXELS = 75  # lower n_segments until at most this many segments come back
SLIC_DEFAULT = "v0.15"  # the authors' scikit-image (their published data and checkpoints)
GT_THRESHOLD = 0.5  # superpixels at least this bright carry ground-truth attention
GT_VARIANTS = ("intensity", "any")  # SPEC default; the reference's oracle for K > 1 (I > 0)


def slic_segments(img: np.ndarray, rule: str = SLIC_DEFAULT) -> np.ndarray:
    """(H, W) SLIC labels 0..k-1 of a grayscale image with <= MAX_SUPERPIXELS segments (SPEC 1):
    the reference loop `n = 95; while count > 75: n -= 1` under the SLIC `rule`
    (`ablate.data.slic.SLIC_RULES`)."""
    return slic.superpixel_labels(img, N_SEGMENTS_START, MAX_SUPERPIXELS, rule)


def image_superpixels(img: np.ndarray,
                       rule: str = SLIC_DEFAULT) -> tuple[np.ndarray, np.ndarray]:
    """Mean intensity (N,) and centre of mass (N, 2) = (row, col) / 28 of each superpixel, in
    SLIC label order."""
    img = np.asarray(img, dtype=np.float64)
    labels = slic_segments(img, rule)
    _, inv = np.unique(labels.ravel(), return_inverse=True)
    n = int(inv.max()) + 1
    count = np.bincount(inv, minlength=n)
    rows, cols = np.indices(img.shape)
    intensity = np.bincount(inv, weights=img.ravel(), minlength=n) / count
    # centre of mass normalised by the image size (28 for MNIST), as in the reference
    r = np.bincount(inv, weights=rows.ravel(), minlength=n) / count / img.shape[0]
    c = np.bincount(inv, weights=cols.ravel(), minlength=n) / count / img.shape[1]
    return intensity.astype(np.float32), np.stack([r, c], axis=1).astype(np.float32)


def gt_attention(intensity: np.ndarray, gt: str = "intensity") -> np.ndarray:
    """Ground-truth attention of one image's superpixels, normalised to sum 1 (SPEC 1).

    gt="intensity": alpha_i ~ I_i on superpixels with I_i >= 0.5, else 0 (SPEC default).
    gt="any": alpha_i ~ [I_i > 0], uniform over every non-black superpixel (the reference
    script's ground-truth oracle for ChebyGIN, K > 1).
    """
    intensity = np.asarray(intensity, dtype=np.float32)
    if gt == "any":
        return normalize_gt((intensity > 0).astype(np.float32))
    if gt != "intensity":
        raise ValueError(f"unknown ground truth {gt!r}; valid choices: {', '.join(GT_VARIANTS)}")
    return normalize_gt(np.where(intensity >= GT_THRESHOLD, intensity, 0.0))


def superpixel_graphs(
    superpixels: list[tuple[np.ndarray, np.ndarray]],
    gt: str = "intensity",
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Complete-graph edges, edge weights A_ij and ground truth (`gt_attention`) of every graph."""
    edges, weights, gts = [], [], []
    for intensity, coord in superpixels:
        e = complete_edges(len(intensity))
        edges.append(e)
        weights.append(adjacency(coord)[e[0], e[1]].astype(np.float32))
        gts.append(gt_attention(intensity, gt))
    return edges, weights, gts


def _chunk_superpixels(task: tuple[np.ndarray, str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Worker task: superpixels of a chunk of images under a SLIC rule."""
    images, rule = task
    return [image_superpixels(img, rule) for img in images]


def images_to_superpixels(
    images: np.ndarray,
    progress: bool = False,
    workers: int = 2,
    chunksize: int = 200,
    desc: str = "superpixels",
    rule: str = SLIC_DEFAULT,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """(intensity, centre) of every image of an (n, H, W) array in [0, 1], in order, with SLIC
    under `rule`.

    Chunks of `chunksize` images go to a pool of `workers` processes (serial
    when `workers <= 1`, when there is at most one chunk, or inside a daemonic
    process that may not fork). A tqdm bar goes to stderr when `progress`.
    """
    from tqdm.auto import tqdm

    slic.check_rule(rule)
    images = np.asarray(images)
    chunks = [(images[i:i + chunksize], rule) for i in range(0, len(images), chunksize)]
    bar = tqdm(total=len(images), desc=desc, file=sys.stderr, disable=not progress,
               unit="img")
    out: list[tuple[np.ndarray, np.ndarray]] = []
    try:
        for res in _map_chunks(chunks, workers):
            out.extend(res)
            bar.update(len(res))
    finally:
        bar.close()
    return out


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


def _map_chunks(chunks: list[tuple[np.ndarray, str]], workers: int,
                fn=None) -> Iterator[list]:
    """Results of `fn` (`_chunk_superpixels`) over chunks, in order, serial or on a process
    pool (`start_method`)."""
    fn = fn or _chunk_superpixels
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
