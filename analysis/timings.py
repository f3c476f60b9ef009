"""Seconds per phase of the last report (`LAST_TIMINGS`, written to `timings.json`).

`with timed("figures"): ...` adds the block's wall time to its phase; `write_report`
clears the dict when it starts, so it always holds the last report's phases.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

LAST_TIMINGS: dict[str, float] = {}  # seconds per phase of the last write_report (benchmarks)


@contextmanager
def timed(name: str) -> Iterator[None]:
    """Add the wall time of the `with` block to LAST_TIMINGS[name]."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        LAST_TIMINGS[name] = LAST_TIMINGS.get(name, 0.0) + time.perf_counter() - t0
