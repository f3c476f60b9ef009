"""Prepared datasets shipped to the other nodes of a cluster, in bounded pieces.

The driver prepares every dataset recipe once (`ablate.runner.plan.datasets.prepare_datasets`).
A node without the prepared file gets it through Ray's object store: `put_chunks` reads
the file in pieces of `CHUNK_BYTES` and puts each piece (never the whole file as one
object, never the whole file in the driver's memory at once); on the node, the first
worker that needs the recipe (`receive`, under a lock that the node's other workers wait
on) fetches the pieces one at a time, writes them to a temp file beside the cache file,
checks the SHA-256 and renames it into place. So a recipe crosses the network once per
node, whatever the number of trials there, and a worker holds one piece at a time.

Each file received is logged as one JSON line in the node's cache folder
(`received.jsonl`: file, bytes, pieces), what a node was sent and when.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

from ablate.atomic import atomic_write

CHUNK_BYTES = 32 << 20  # one object-store object per 32 MiB of a prepared file
RECEIVED = "received.jsonl"


def put_chunks(path: Path, chunk_bytes: int | None = None) -> dict[str, Any]:
    """Put the file at `path` in the object store in pieces: its name, size, SHA-256 and the
    pieces' ObjectRefs, in order (what `receive` needs)."""
    import ray

    refs: list = []
    with open(path, "rb") as f:
        sha256 = _stream(_pieces(f, chunk_bytes or CHUNK_BYTES), lambda p: refs.append(ray.put(p)))
    return {"name": path.name, "bytes": path.stat().st_size, "sha256": sha256, "chunks": refs}


def _pieces(f: BinaryIO, size: int) -> Iterable[bytes]:
    """The open binary file `f` in pieces of `size` bytes (the reader keeps none of them)."""
    return iter(functools.partial(f.read, size), b"")


def _stream(pieces: Iterable[bytes], sink: Callable[[bytes], Any]) -> str:
    """Hand each piece to `sink` in order, holding one piece at a time; the SHA-256 of them all."""
    digest = hashlib.sha256()
    for piece in pieces:
        digest.update(piece)
        sink(piece)
        del piece  # let it go before the next one is read or fetched
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """The SHA-256 of the file at `path`, remembered beside it (`.NAME.sha256`: size, mtime
    and digest) so that a file unchanged since is not read again; `OSError` if it is absent."""
    st = path.stat()
    memo = path.parent / f".{path.name}.sha256"
    stamp = {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns}
    with contextlib.suppress(OSError, ValueError, KeyError):
        saved = json.loads(memo.read_text())
        if {k: saved[k] for k in stamp} == stamp:
            return saved["sha256"]
    with open(path, "rb") as f:
        sha256 = _stream(_pieces(f, CHUNK_BYTES), lambda p: None)
    with contextlib.suppress(OSError):  # a read-only cache: computed again next time
        atomic_write(memo, lambda f: f.write(json.dumps({**stamp, "sha256": sha256}).encode()))
    return sha256


def _same_file(path: Path, shipped: dict[str, Any]) -> bool:
    """The file at `path` is the driver's: same size and same SHA-256 (a file of the same size
    with other bytes, e.g. torn or of another build, is not)."""
    try:
        return path.stat().st_size == shipped["bytes"] and file_sha256(path) == shipped["sha256"]
    except OSError:
        return False


def receive(path: Path, shipped: dict[str, Any]) -> bool:
    """Write the shipped file to `path` unless the same file is there; True if this call wrote it.

    One worker per node fetches (a lock file beside `path`); the others wait for it and then
    find the file. A file already at `path` is kept only when it is the driver's (same recipe
    hash in the name, same size and SHA-256, `_same_file`): a file of another cache format, a
    torn or a damaged one is replaced, under the lock. The pieces are fetched one at a time; a
    file whose SHA-256 differs from the driver's is refused (`OSError`) and nothing is left at
    `path`."""
    import ray

    if _same_file(path, shipped):
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    with _node_lock(path):
        if _same_file(path, shipped):  # another worker of this node received it meanwhile
            return False

        def write(f) -> None:
            if _stream((ray.get(ref) for ref in shipped["chunks"]), f.write) != shipped["sha256"]:
                raise OSError(f"the shipped {shipped['name']} arrived damaged (SHA-256 differs)")

        atomic_write(path, write)
        entry = {"file": path.name, "bytes": shipped["bytes"], "chunks": len(shipped["chunks"]),
                 "pid": os.getpid(), "time": time.time()}
        with open(path.parent / RECEIVED, "a") as log:
            log.write(json.dumps(entry) + "\n")
    return True


def received(folder: Path) -> list[dict]:
    """The entries of a node's `received.jsonl` (what it was sent), oldest first."""
    try:
        text = (Path(folder) / RECEIVED).read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@contextlib.contextmanager
def _node_lock(path: Path):
    """An exclusive lock of this node's processes on `path` (a ``.NAME.lock`` file beside it)."""
    with open(path.parent / f".{path.name}.lock", "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def dataset_pieces(trials: list, ship: bool) -> dict:
    """data hash -> the prepared cache file of each recipe of `trials` (`ablate.runner.study.expand.
    Trial`) as object-store pieces (`put_chunks`), for nodes that lack the file; nothing when
    every trial runs on this node (`ship` false). Grid and search studies both send these."""
    if not ship:
        return {}
    from ablate.data import dataset_cache_path

    out = {}
    for t in trials:
        if t.data_hash and t.data_hash not in out:
            out[t.data_hash] = put_chunks(dataset_cache_path(t.dataset, dict(t.data_params)))
    return out


def ensure_dataset(dataset: str | None, data_params: tuple, data_hash: str | None,
                   pieces: dict) -> None:
    """On a worker: materialise the driver's prepared file of a recipe (`data_params`: sorted
    (key, value) pairs) on this node when it is missing or not the driver's (other size or
    SHA-256; other nodes), fetched in pieces once per node (`receive`)."""
    shipped = pieces.get(data_hash) if data_hash else None
    if shipped is None:
        return
    from ablate.data import dataset_cache_path

    receive(dataset_cache_path(dataset, dict(data_params)), shipped)

