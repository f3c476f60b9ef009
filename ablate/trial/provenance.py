"""Where a result came from and what it cost: git commit, package versions, host, the CPU's
vector unit, the GPU and its driver, peak host and GPU memory."""

from __future__ import annotations

import functools
import os
import resource
import subprocess

import torch

_STATUS = "/proc/self/status"


def reset_peak_rss() -> bool:
    """Count this process's peak resident memory afresh from now (Linux: writing 5 to
    /proc/self/clear_refs resets VmHWM), so a worker reused for many trials records each
    trial's own peak, not the largest of all before it. False where the kernel cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """Peak resident memory of this process since the last `reset_peak_rss` (VmHWM), in MB;
    the lifetime peak where /proc cannot tell."""
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def provenance(data_hash: str, device: torch.device | None = None) -> dict:
    """The provenance columns of a trial's records (`device`: where it trained)."""
    from importlib.metadata import version

    return {"dataset_hash": data_hash, "torch_version": torch.__version__,
            "pyg_version": version("torch_geometric"), **code_provenance(),
            "cpu_capability": cpu_capability(), **device_provenance(device)}


def cpu_capability() -> str:
    """The vector unit torch's CPU kernels dispatch to in this process, as
    `torch.backends.cpu.get_cpu_capability()` names it ('AVX2', 'AVX512', 'DEFAULT' where
    `ATEN_CPU_CAPABILITY=default` forces scalar kernels, ...; '' where torch cannot say).
    Vectorised reductions round by it, so a CPU trial is bit-identical run to run on one
    vector unit, not across them (a CUDA trial records its host's: harmless)."""
    try:
        return str(torch.backends.cpu.get_cpu_capability() or "")
    except Exception:  # noqa: BLE001 - an old or odd build: nothing to say
        return ""


def code_provenance() -> dict[str, str]:
    """host, git_sha and git_dirty of this process: a trial's rows carry their worker's, a failed
    trial's rows the driver's that recorded it (one rule for "modified tree" in both)."""
    return {"host": os.uname().nodename, "git_sha": git_sha(), "git_dirty": git_dirty()}


def device_provenance(device: torch.device | None) -> dict:
    """gpu_name, cuda_version (of torch's build) and gpu_driver of the CUDA device a trial ran
    on; empty strings on a CPU."""
    if device is None or device.type != "cuda":
        return {"gpu_name": "", "cuda_version": "", "gpu_driver": ""}
    index = device.index if device.index is not None else torch.cuda.current_device()
    return dict(_cuda_info(index))


@functools.cache
def _cuda_info(index: int) -> tuple:
    return (("gpu_name", torch.cuda.get_device_name(index)),
            ("cuda_version", torch.version.cuda or ""), ("gpu_driver", driver_version(index)))


@functools.cache
def driver_version(index: int = 0) -> str:
    """The NVIDIA driver's version as nvidia-smi reports it ('' where it cannot be asked)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader",
                              "-i", str(index)], capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else ""
    except (OSError, subprocess.SubprocessError, IndexError):
        return ""


def start_gpu_peak(device: torch.device) -> None:
    """Start counting a trial's peak GPU memory (no-op on a CPU; no device sync)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_gpu_mb(device: torch.device) -> float | None:
    """Peak GPU memory allocated by tensors since `start_gpu_peak`, in MB (None on a CPU)."""
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2**20


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


@functools.cache
def git_dirty() -> str:
    """'' when the checkout that holds this code has no uncommitted change to tracked files
    outside benchmarks/results/ (`tree_state`), else 'dirty:' and the first 12 hex digits of
    the SHA-256 of their `git diff HEAD` (asked once per process, like `git_sha`; '' outside a
    git checkout)."""
    return tree_state(os.path.dirname(os.path.abspath(__file__)))


def tree_state(folder: str) -> str:
    """`git_dirty`'s answer for the checkout holding `folder`: the state of the code, so the
    records a benchmark writes into the checkout (`benchmarks/results/`) do not count: a
    long run that appends to its own record is not "modified" by it."""
    import hashlib

    code = [":(top)", ":(top,exclude)benchmarks/results"]
    try:
        run = lambda *a: subprocess.run(["git", "-C", folder, *a], capture_output=True,  # noqa: E731
                                        timeout=10, check=True).stdout
        if not run("status", "--porcelain", "--untracked-files=no", "--", *code).strip():
            return ""
        return "dirty:" + hashlib.sha256(run("diff", "HEAD", "--", *code)).hexdigest()[:12]
    except Exception:  # noqa: BLE001 - not a checkout, no git: nothing to say
        return ""
