"""Before Ray starts: which Ray a study runs on, and whether this machine can run its trials.

`cluster_address` is the one rule of grid and search studies for the Ray a run joins (the
`ray_address` option, else $RAY_ADDRESS; none: an embedded local Ray; see
`ablate.runner.execute.ray_env.RayMode`). `check_devices` and `check_resources_early` reject
a study whose trials can never run here (device=cuda without CUDA, more CPUs or GPUs per
trial than an embedded Ray gets), one `ConfigError` line each, before any dataset is built
or Ray starts; the dry run makes the same checks. Once Ray is up,
`ablate.runner.execute.ray_env.check_resources` checks what the cluster has.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from ablate.errors import ConfigError

if TYPE_CHECKING:
    from ablate.runner.study.expand import Study


def cluster_address(ray_address: str | None) -> str | None:
    """The Ray cluster a run joins: the `ray_address` option, else $RAY_ADDRESS; None for an
    embedded local Ray. The one rule of grid and search studies (`start_ray`, `RayMode`)."""
    return ray_address or os.environ.get("RAY_ADDRESS") or None


def check_cluster_reachable(address: str | None) -> None:
    """A cluster address host:port (or ray://host:port) that nothing answers on: one line at
    once, before the data is prepared, instead of Ray's minutes of retries. "auto" and other
    forms are left to Ray, which fails fast on them."""
    import socket

    target = (address or "").removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or "://" in target or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=5):
            pass
    except OSError as e:
        raise ConfigError(f"cannot join the Ray cluster at {address!r}: nothing answers at "
                          f"{host}:{port} ({e.strerror or e}); start one (ray start --head, ray "
                          "up cluster.yaml) or unset RAY_ADDRESS / ray_address= to run on an "
                          "embedded local Ray") from None


def check_devices(study: Study, ray_address: str | None = None) -> None:
    """device=cuda needs CUDA: here for an embedded Ray, and GPUs for the trials anywhere."""
    wants = any(getattr(t.config, "device", "auto") == "cuda" for t in study.trials)
    if not wants:
        return
    if study.spec.gpus_per_trial != "auto" and float(study.spec.gpus_per_trial) == 0:
        raise ConfigError("device=cuda needs gpus_per_trial > 0 (or auto): a trial given no "
                          "GPU sees none")
    if not cluster_address(ray_address):
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("device=cuda but this machine has no usable CUDA device (no GPU "
                              "or a CPU build of torch); use device=auto or device=cpu, or join "
                              "a GPU cluster with ray_address=")


def check_resources_early(study: Study, ray_address: str | None = None) -> None:
    """Before Ray starts: an embedded Ray gets this machine's CPUs and GPUs, so a trial
    asking for more can never run (a cluster may still grow: checked once joined)."""
    if cluster_address(ray_address):
        return
    ray = sys.modules.get("ray")  # not imported yet: no Ray is running in this process
    if ray is not None and ray.is_initialized():  # a Ray started by the caller decides
        return
    spec = study.spec
    cpus = os.cpu_count() or 1
    if spec.cpus_per_trial > cpus:
        raise ConfigError(f"cpus_per_trial={spec.cpus_per_trial:g} but this machine has {cpus} "
                          f"CPUs; use cpus_per_trial<={cpus}, or join a larger cluster with "
                          "ray_address=")
    if spec.gpus_per_trial != "auto" and float(spec.gpus_per_trial) > 0:
        import torch

        gpus = torch.cuda.device_count()
        if float(spec.gpus_per_trial) > gpus:
            raise ConfigError(f"gpus_per_trial={spec.gpus_per_trial:g} but this machine has "
                              f"{gpus} GPUs; use gpus_per_trial=auto or 0, or join a GPU "
                              "cluster with ray_address=")
