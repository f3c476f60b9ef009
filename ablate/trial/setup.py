"""What every seed of a graph trial starts from: the process, the device and the model.

One copy of the per-seed set-up (the sequential trainer, the packed trainer and the
search all use it): `seeded_model` draws a seed's initial weights after
`torch.manual_seed(seed)`, and `shuffler` gives its own batch order.
"""

from __future__ import annotations

import math
import os

import torch

from ablate.config import TrialConfig
from ablate.data import GraphSet
from ablate.errors import DeviceError
from ablate.models.network import GraphNet
from ablate.models.pooling import cosine


def pick_device(name: str = "auto") -> torch.device:
    """`cuda` (an error without CUDA), `cpu`, or `auto`: CUDA when available, else CPU."""
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError("device=cuda but this process sees no CUDA device (no GPU, a CPU "
                          "build of torch, or a Ray trial given no GPU: set gpus_per_trial)")
    if name in ("cuda", "auto") and torch.cuda.is_available():
        deterministic_cuda()
        return torch.device("cuda")
    return torch.device("cpu")


CUBLAS_WORKSPACE = ":4096:8"  # the cuBLAS setting deterministic GEMMs need (CUDA >= 10.2)


def deterministic_cuda() -> None:
    """Same config + seed, same numbers on every run of one GPU (idempotent).

    Deterministic algorithms on: CUDA's atomic-add ops (the leave-one-out `index_add_`, the
    backward of gathers) take their sorted, deterministic variants, and an op that has none
    raises instead of drifting silently. cuBLAS needs a fixed workspace for deterministic
    GEMMs; the variable is read when the process first uses cuBLAS, so it is set here, before
    any model reaches the device (an earlier value set by the user is kept). Uninitialised
    memory is not filled: every buffer of ours is written before it is read, and the fill
    would add a kernel to every allocation of a replayed step."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch.backends.cudnn.benchmark = False


def prepare_process() -> None:
    """Process-wide settings for training tiny models on CPU (idempotent)."""
    torch.set_flush_denormal(True)  # denormals double CPU time per step (SPEC pitfalls)
    tune_allocator()


def tune_allocator() -> None:
    """Keep freed tensor memory in the heap instead of unmapping it (glibc mallopt).

    Tiny models allocate and free ~100 KB tensors every op; by default glibc
    maps each one fresh and the page faults cost more than the arithmetic.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def model_sizes(cfg: TrialConfig, splits: dict[str, GraphSet]) -> tuple[int, int]:
    """(input channels, outputs): one output for a count (regression), else the class count."""
    in_ch = splits["train"].num_features
    if cfg.task == "regression":
        return in_ch, 1
    return in_ch, int(max(int(g.y.max()) for g in splits.values()) + 1)


def seeded_model(cfg: TrialConfig, seed: int, in_ch: int, out_ch: int,
                 device: torch.device) -> GraphNet:
    """The seed's initial model: `torch.manual_seed(seed)`, then `GraphNet(cfg, ...)`."""
    torch.manual_seed(seed)
    return GraphNet(cfg, in_ch, out_ch).to(device)


def shuffler(seed: int) -> torch.Generator:
    """The seed's own batch-order generator (one permutation per epoch)."""
    return torch.Generator().manual_seed(seed)


def optimal_projection(dataset: str, in_channels: int) -> torch.Tensor | None:
    """The attention projection that solves the task, where known: COLORS p_opt = e_green over
    the colour channels (the last input channel holds only LARGEC's unseen colours, is zero in
    training and never gets a task gradient, so the reference leaves it out)."""
    if dataset != "colors":
        return None
    p = torch.zeros(in_channels - 1)
    p[1] = 1.0
    return p


def init_cosine(model: GraphNet, dataset: str, in_channels: int) -> float:
    """cos(p_init, p_opt) over the colour channels (COLORS, plain projection p), else NaN."""
    p_init, p_opt = model.first_projection(), optimal_projection(dataset, in_channels)
    if p_init is None or p_opt is None or p_init.numel() != in_channels:
        return math.nan
    return cosine(p_init[: p_opt.numel()], p_opt)


def init_cosines(models: list[GraphNet], dataset: str, in_channels: int) -> list[float]:
    """`init_cosine` of every member of a pack, computed on their device with one transfer
    (members share a config: either all have a plain projection p or none has)."""
    p_opt = optimal_projection(dataset, in_channels)
    ps = [m.first_projection() for m in models]
    if p_opt is None or any(p is None or p.numel() != in_channels for p in ps):
        return [init_cosine(m, dataset, in_channels) for m in models]  # NaN: no host read
    P = torch.stack([p.detach().reshape(-1)[: p_opt.numel()] for p in ps]).double()  # (S, C-1)
    o = p_opt.to(P.device, torch.float64)
    den = P.norm(dim=1) * o.norm()
    return torch.where(den > 0, P @ o / den, torch.full_like(den, math.nan)).tolist()

