"""Device memory errors, handled where they happen.

`is_out_of_memory` says what counts as running out: torch's `OutOfMemoryError` and the
allocation failures CUDA libraries report as a plain `RuntimeError` (cuBLAS, cuSPARSE,
cuDNN, cuSOLVER, a kernel's `cudaErrorMemoryAllocation`). Evaluation and leave-one-out use
memory that does not depend on the pack size, so `in_smaller_pieces` retries such a step in
smaller chunks (1/4, 1/16, 1/64 of the budget) instead of retraining anything; only an
out-of-memory error in training splits a pack (`ablate.trial.packed.run_members`). When the
smallest piece does not fit either, `DeviceMemoryExhausted` says so, and the worker does not
retry it (it would fail the same way).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TypeVar

import torch

from ablate.errors import DeviceMemoryExhausted

T = TypeVar("T")
SHRINKS = (1, 4, 16, 64)  # budget divisors tried in turn after an out-of-memory error
REMEDY = ("fewer trials per GPU (gpus_per_trial=1), a smaller pack (pack_size) or a GPU "
          "with more memory")
_LIBRARY_OOM = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUSPARSE_STATUS_ALLOC_FAILED",
                "CUSPARSE_STATUS_INSUFFICIENT_RESOURCES", "CUDNN_STATUS_ALLOC_FAILED",
                "CUSOLVER_STATUS_ALLOC_FAILED", "cudaErrorMemoryAllocation")


def is_out_of_memory(e: BaseException) -> bool:
    """Whether `e` is a device allocation failure (torch's or a CUDA library's)."""
    if isinstance(e, torch.cuda.OutOfMemoryError):
        return True
    if isinstance(e, DeviceMemoryExhausted) or not isinstance(e, RuntimeError):
        return False
    text = str(e)
    return any(m in text for m in _LIBRARY_OOM)


def release_cached(device: torch.device) -> None:
    """Free what the failed attempt left: Python garbage, then the allocator's cache."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def in_smaller_pieces(step: Callable[[int], T], what: str, device: torch.device) -> T:
    """`step(shrink)` with shrink = 1, then 4, 16, 64 after each out-of-memory error (the step
    divides its memory budgets by `shrink`); `DeviceMemoryExhausted` when the last fails."""
    last = ""
    for shrink in SHRINKS:
        try:
            return step(shrink)
        except Exception as e:  # noqa: BLE001 - only out-of-memory is retried
            if not is_out_of_memory(e):
                raise
            last = _first_line(e)  # the text only: the error's frames hold the attempt's tensors
        release_cached(device)  # outside the handler, the failed attempt's tensors are free
    raise DeviceMemoryExhausted(
        f"{what} ran out of device memory even in pieces 1/{SHRINKS[-1]} of the usual size "
        f"({last}): {REMEDY}")


def _first_line(e: BaseException | None) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"[:200]
