"""Every private API of Ray, Tune, torch and scikit-image that ablate calls, in one place.

Private names change without notice between releases, and a changed one would show as a
traceback deep in a study, or worse as a silent skip. So each call goes through an accessor
here, which first checks the installed version against the range the call was written and
tested for (`TESTED`: the lower bound of pyproject.toml, an upper bound past the newest
version tested) and otherwise raises `UnsupportedVersion` with one line that names the
package, its version, the range and what to do (a `ConfigError`: the CLI prints it and exits
2, before Ray starts where the call comes first).

    private name                                    accessor                 used by (ablate/)
    Tune's RayActorManager._actor_task_failed       wrap_actor_task_failed   runner/execute/tune_callback.py
    Tune's Trial.handle_error (internal to Tune)     wrap_trial_handle_error  runner/execute/tune_callback.py
    ray._private.worker.print_to_stdstream          wrap_print_to_stdstream  runner/execute/ray_env.py
    ray._private.worker._global_node                ray_session_dir          runner/execute/reap.py
    ray._private.utils: estimate_available_memory,  ray_node_memory          runner/plan/resources.py
      resolve_object_store_memory
    torch._C._cuda_endAllocateToPool,               cuda_pool_exit           trial/pack_step.py
      _cuda_releasePool
    skimage.segmentation._slic: _slic_cython,       slic_kernels             data/slic.py
      _enforce_label_connectivity_cython

A private name missing from a release inside the tested range raises `UnsupportedVersion` too,
with one line naming the name and the installed version (`_attr`): nothing is skipped silently.
Every other module reaches these only through the accessors (tests/test_layout.py checks that
no module but this one reads a private attribute of Ray, Tune, torch or scikit-image).
"""

from __future__ import annotations

import re
from collections.abc import Callable
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


_MISSING = object()
WRAPPED = "_ablate_wrapped"  # set on a function ablate put in place of a private one


def _attr(owner: Any, name: str, dist: str, what: str) -> Any:
    """`owner.name` (a module or class of `dist`), or `UnsupportedVersion` in one line naming
    the missing name and the installed version when a release in range lacks it."""
    value = getattr(owner, name, _MISSING)
    if value is _MISSING:
        raise UnsupportedVersion(f"{dist} {installed(dist) or '(unknown version)'}: {what} has "
                                 f"no {name}; ablate's private call no longer fits this release")
    return value


def _wrap_once(owner: Any, name: str, wrap: Callable[[Callable], Callable], dist: str,
               what: str) -> bool:
    """Put `wrap(owner.name)` in place of `owner.name`, once: False when ablate's wrapper is
    already there (idempotent)."""
    original = _attr(owner, name, dist, what)
    if getattr(original, WRAPPED, False):
        return False
    wrapped = wrap(original)
    setattr(wrapped, WRAPPED, True)
    setattr(owner, name, wrapped)
    return True


def _import(module: str, dist: str, what: str) -> Any:
    """`import module`, or `UnsupportedVersion` when a release in range lays it out otherwise."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise UnsupportedVersion(f"{dist} {installed(dist)}: {what}: {module} cannot be imported "
                                 f"({e}); ablate's private call no longer fits this release") from None


def _tune_actor_manager() -> Any:
    """Tune's `RayActorManager`, checked to have the `_actor_task_failed` ablate wraps."""
    what = "Tune's RayActorManager._actor_task_failed"
    check("ray", what)
    actor_manager = _import("ray.air.execution._internal.actor_manager", "ray", what)
    cls = _attr(actor_manager, "RayActorManager", "ray", what)
    _attr(cls, "_actor_task_failed", "ray", what)
    return cls


def wrap_actor_task_failed(wrap: Callable[[Callable], Callable]) -> bool:
    """Put `wrap(original)` in place of Tune's `RayActorManager._actor_task_failed(self,
    tracked_actor_task, exception)`, once (`tune_callback.worker_deaths_as_trial_failures`);
    False when it already is."""
    return _wrap_once(_tune_actor_manager(), "_actor_task_failed", wrap, "ray",
                      "Tune's RayActorManager._actor_task_failed")


def _tune_trial() -> Any:
    """Tune's `Trial` class, checked to have the `handle_error` ablate wraps (a name without an
    underscore, yet no part of Tune's public API: its controller calls it on a trial's failure,
    before it asks `Trial.should_recover` whether to retry)."""
    what = "Tune's Trial.handle_error"
    check("ray", what)
    trial = _import("ray.tune.experiment.trial", "ray", what)
    cls = _attr(trial, "Trial", "ray", what)
    _attr(cls, "handle_error", "ray", what)
    _attr(cls, "should_recover", "ray", what)
    return cls


def wrap_trial_handle_error(wrap: Callable[[Callable], Callable]) -> bool:
    """Put `wrap(original)` in place of Tune's `Trial.handle_error(self, exc)`, once
    (`tune_callback.retry_only_what_may_pass`); False when it already is."""
    return _wrap_once(_tune_trial(), "handle_error", wrap, "ray", "Tune's Trial.handle_error")


def ray_worker() -> Any:
    """`ray._private.worker`, checked to have the two names ablate uses: `print_to_stdstream`
    (the driver's printer of workers' output) and `_global_node` (this process's Ray node)."""
    what = "ray._private.worker"
    check("ray", what)
    worker = _import("ray._private.worker", "ray", what)
    _attr(worker, "print_to_stdstream", "ray", what)
    _attr(worker, "_global_node", "ray", what)  # None until this process starts or joins Ray
    return worker


def wrap_print_to_stdstream(wrap: Callable[[Callable], Callable]) -> bool:
    """Put `wrap(original)` in place of `ray._private.worker.print_to_stdstream(data, ...)`,
    once (`ray_env` drops the raylet's notices); False when it already is."""
    return _wrap_once(ray_worker(), "print_to_stdstream", wrap, "ray",
                      "ray._private.worker.print_to_stdstream")


def ray_session_dir() -> str | None:
    """The session folder of the Ray node this process started or joined
    (`ray._private.worker._global_node.get_session_dir_path()`); None before it has one."""
    node = ray_worker()._global_node
    if node is None:
        return None
    what = "ray._private.worker._global_node"
    return _attr(node, "get_session_dir_path", "ray", what)()


def _ray_utils() -> Any:
    """`ray._private.utils` (how Ray sizes an embedded node's memory and object store)."""
    what = "ray._private.utils"
    check("ray", what)
    utils = _import("ray._private.utils", "ray", what)
    _attr(utils, "estimate_available_memory", "ray", what)
    _attr(utils, "resolve_object_store_memory", "ray", what)
    return utils


def ray_node_memory() -> int:
    """Ray's ``memory`` resource of an embedded node started now on this machine: available
    memory less the object store, as `ray._private.utils` computes them."""
    utils = _ray_utils()
    available = utils.estimate_available_memory()
    return int(available - utils.resolve_object_store_memory(available))


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
