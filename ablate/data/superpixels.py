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
    """How the superpixel pool starts its workers. fork where the OS has it and this process
    runs no other thread: a spawned/forkserver worker must import this module and with it the
    `ablate.data` package, i.e. torch and torch_geometric (~9 s on 2 cores), which costs more
    than converting all 1797 digits (forking a parent that holds idle torch threads is safe:
    the workers run only NumPy/SciPy/scikit-image code, never torch or OpenMP). With another
    Python thread alive in a driver (it starts Ray in one while data are prepared), a fork
    may copy a lock that thread holds and hang: forkserver then."""
    methods = mp.get_all_start_methods()
    if "fork" in methods and (threading.active_count() == 1 or _in_ray_actor()):
        return "fork"  # (a Ray worker forks as it always has: this is about the driver)
    return "forkserver" if "forkserver" in methods else "spawn"


def _in_ray_actor() -> bool:
    """Whether this process is a Ray worker running an actor (a trial), not a driver."""
    ray = sys.modules.get("ray")
    try:
        return bool(ray is not None and ray.is_initialized()
                    and ray.get_runtime_context().get_actor_id() is not None)
    except Exception:  # noqa: BLE001 - a half-imported ray: not a worker
        return False


def _map_chunks(chunks: list[tuple[np.ndarray, str]], workers: int) -> Iterator[list]:
    """Results of `_chunk_superpixels` over chunks, in order, serial or on a process pool."""
    if workers <= 1 or len(chunks) <= 1 or mp.current_process().daemon:
        yield from map(_chunk_superpixels, chunks)
        return
    method = start_method()
    ctx = mp.get_context(method)
    if method == "forkserver":  # the server imports this module once; workers fork from it
        ctx.set_forkserver_preload([__name__])
    with _signals_blocked():  # only while the workers are forked
        pool = ctx.Pool(min(workers, len(chunks)), initializer=_pool_worker,
                        initargs=(os.getpid() if method == "fork" else None,))
    with pool:
        yield from pool.imap(_chunk_superpixels, chunks)


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


def _pool_worker(parent: int | None) -> None:
    """A superpixel worker: Ctrl-C is the driver's to handle, SIGTERM (the pool's shutdown)
    ends it silently, and it dies with the driver. Without this, a forked worker keeps the
    driver's SIGTERM handler and prints a traceback when the pool ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if parent is not None and os.getppid() != parent:  # the driver died before the line above
        os._exit(1)  # (a forkserver's worker: its parent is the server, which dies with the driver)
