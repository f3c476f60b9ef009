"""Every private API of Ray, Tune, torch and scikit-image that ablate calls, in one place.

Private names change without notice between releases, and a changed one would show as a
traceback deep in a study, or worse as a silent skip. So each call goes through an accessor
here, which first checks the installed version against the range the call was written and
tested for (`TESTED`: the lower bound of pyproject.toml, an upper bound past the newest
version tested) and otherwise raises `UnsupportedVersion` with one line that names the
package, its version, the range and what to do (a `ConfigError`: the CLI prints it and exits
2, before Ray starts where the call comes first).

    package        private call                                      used by
    ray (Tune)     RayActorManager._actor_task_failed                runner/tune_callback.py
    ray            ray._private.worker (print_to_stdstream, _global_node)   runner/ray_env.py
    ray            ray._private.utils (available memory, object store)       runner/resources.py
    torch          torch._C._cuda_endAllocateToPool / _cuda_releasePool      trial/pack_step.py
    scikit-image   skimage.segmentation._slic (SLIC's kernels)       data/slic.py
"""

from __future__ import annotations

import re
from importlib import metadata
from typing import Any

from ablate.errors import ConfigError

# distribution -> (lowest supported, first unsupported): each private call below was written
# for and tested on versions in [low, high). Keep pyproject.toml's upper bounds the same.
TESTED: dict[str, tuple[str, str]] = {
    "ray": ("2.40", "2.61"),
    "torch": ("2.4", "2.15"),
    "scikit-image": ("0.23", "0.27"),
}


class UnsupportedVersion(ConfigError):
    """An installed package is outside the version range a private call of ablate was tested on."""


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: '2.13.0+cpu' -> (2, 13, 0), '2.61.0rc1' -> (2, 61, 0)."""
    m = re.match(r"\d+(\.\d+)*", version.strip())
    return tuple(int(p) for p in m.group(0).split(".")) if m else ()


def installed(dist: str) -> str:
    """The installed version of distribution `dist` ('' when it is not installed)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def check(dist: str, what: str, version: str | None = None) -> None:
    """Raise `UnsupportedVersion` unless `dist` (at `version`, default: installed) is in its
    tested range; `what` names the private call."""
    low, high = TESTED[dist]
    version = installed(dist) if version is None else version
    got = release(version)
    if got and release(low) <= got < release(high):
        return
    where = "newer than" if got >= release(high) else "older than"
    raise UnsupportedVersion(
        f"{dist} {version or '(unknown version)'} is {where} ablate was tested with "
        f"(>={low},<{high}): {what} is a private call that may differ there; install "
        f"'{dist}>={low},<{high}' (bash install.sh uses the lock file) or extend "
        f"ablate.compat.TESTED after checking the call")


def _attr(module: Any, name: str, dist: str, what: str) -> Any:
    """`module.name`, or `UnsupportedVersion` when a release in range lacks it."""
    value = getattr(module, name, None)
    if value is None:
        raise UnsupportedVersion(f"{dist} {installed(dist)}: {what} has no {name}; ablate's "
                                 f"private call no longer fits this release")
    return value


def _import(module: str, dist: str, what: str) -> Any:
    """`import module`, or `UnsupportedVersion` when a release in range lays it out otherwise."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise UnsupportedVersion(f"{dist} {installed(dist)}: {what}: {module} cannot be imported "
                                 f"({e}); ablate's private call no longer fits this release") from None


def tune_actor_manager() -> Any:
    """Tune's `RayActorManager` (its `_actor_task_failed` is wrapped, `tune_callback`)."""
    what = "Tune's RayActorManager._actor_task_failed"
    check("ray", what)
    actor_manager = _import("ray.air.execution._internal.actor_manager", "ray", what)
    cls = _attr(actor_manager, "RayActorManager", "ray", what)
    _attr(cls, "_actor_task_failed", "ray", what)
    return cls


def ray_worker() -> Any:
    """`ray._private.worker` (the driver's log printer and the node of this process)."""
    check("ray", "ray._private.worker")
    return _import("ray._private.worker", "ray", "ray._private.worker")


def ray_utils() -> Any:
    """`ray._private.utils` (how Ray sizes an embedded node's memory and object store)."""
    what = "ray._private.utils"
    check("ray", what)
    utils = _import("ray._private.utils", "ray", what)
    _attr(utils, "estimate_available_memory", "ray", what)
    _attr(utils, "resolve_object_store_memory", "ray", what)
    return utils


def cuda_pool_exit() -> tuple[Any, Any]:
    """torch's `_cuda_endAllocateToPool` and `_cuda_releasePool` (leaving a failed capture)."""
    what = "torch._C._cuda_endAllocateToPool / _cuda_releasePool"
    check("torch", what)
    import torch

    return (_attr(torch._C, "_cuda_endAllocateToPool", "torch", what),
            _attr(torch._C, "_cuda_releasePool", "torch", what))


def slic_kernels() -> tuple[Any, Any]:
    """scikit-image's SLIC k-means and connectivity kernels (`_slic_cython`,
    `_enforce_label_connectivity_cython`): MNIST-75SP's superpixels as the authors made them."""
    what = "skimage.segmentation._slic"
    check("scikit-image", what)
    _slic = _import("skimage.segmentation._slic", "scikit-image", what)
    return (_attr(_slic, "_slic_cython", "scikit-image", what),
            _attr(_slic, "_enforce_label_connectivity_cython", "scikit-image", what))
