"""One way to write a file so that readers see the old file or the whole new one.

Every writer in `ablate` that replaces a file others may read (result store,
dataset cache, a cache file shipped to another node, the Optuna database) goes
through `atomic_write`: write a hidden temp file in the same folder, fsync it,
rename it over the target, fsync the folder. A crash leaves at most a hidden
``.NAME.*.tmp`` file, which `stale_temps` finds for clean-up.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def temp_name(path: Path) -> Path:
    """A hidden temp path beside `path`, unique to this process and call."""
    return path.parent / f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"


def stale_temps(path: Path) -> list[Path]:
    """Temp files `atomic_write` (or `atomic_file`) left beside `path` after a crash."""
    return sorted(path.parent.glob(f".{path.name}.*.tmp"))


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> Path:
    """Call `write(binary file)` on a temp file beside `path`, fsync, and rename it over `path`."""

    def make(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())

    return atomic_file(path, make)


def atomic_file(path: Path, make: Callable[[Path], object]) -> Path:
    """Like `atomic_write` for writers that need a path, not a file object (SQLite, say):
    `make(temp path)` builds the file, which is then renamed over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    try:
        make(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)  # the rename itself survives a power loss
    return path


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (a rename) to disk; a no-op where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
