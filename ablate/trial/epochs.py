"""Epoch events: a training loop says how far it has come; whoever runs the trial may listen.

The loops (`fit.fit`, the packed loop in `packed.py`, `sdc.fit`) call `report_epoch(0, n)`
as training starts and `report_epoch(e, n)` after each epoch's one read of its loss from the
device, so listening adds no host sync. The runner's worker listens (`ablate.runner.execute.worker`)
and forwards a rate-limited summary to the driver's live line; with no listener a call costs
one global lookup.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

Listener = Callable[[int, int], None]  # (epoch reached, epochs of this training run)

_listener: Listener | None = None


def report_epoch(epoch: int, total: int) -> None:
    """Epoch `epoch` of `total` is done (1-based; 0: training starts)."""
    if _listener is not None:
        _listener(epoch, total)


@contextlib.contextmanager
def listening(fn: Listener) -> Iterator[None]:
    """Call `fn(epoch, total)` for every epoch a training loop finishes inside the block."""
    global _listener
    before, _listener = _listener, fn
    try:
        yield
    finally:
        _listener = before
