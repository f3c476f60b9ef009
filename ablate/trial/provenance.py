"""Where a result came from and what it cost: git commit, package versions, host, peak memory."""

from __future__ import annotations

import functools
import os
import resource
import subprocess

import torch


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def provenance(data_hash: str) -> dict:
    """The provenance columns of a trial's records."""
    from importlib.metadata import version

    return {"dataset_hash": data_hash, "torch_version": torch.__version__,
            "pyg_version": version("torch_geometric"), "host": os.uname().nodename,
            "git_sha": git_sha()}


@functools.cache
def git_sha() -> str:
    """The checkout's short commit when this process first asks ('' outside a git checkout):
    the code a long-lived worker imported, asked once, not once per trial."""
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(["git", "-C", here, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=5).stdout.strip()
    except Exception:
        return ""
