"""Private calls of Ray, Tune, torch and scikit-image, each behind a version check (issue 35).

Every accessor of `ablate.compat` refuses a version outside the range it was tested for
with one line (faked versions here), gives the real objects on the installed versions, and
pyproject.toml bounds each of those packages the same way. A private name missing from a
release in range is one line naming it and the version (issue 42), never a silent skip, and
the wrappers put ablate's function in place once. The Tune hook hands over Ray's
memory-monitor error alone.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "token")  # before `import ray` (DESIGN.md)

from ablate import compat  # noqa: E402
from ablate.errors import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ACCESSORS = {  # accessor -> the distribution it checks
    "_tune_actor_manager": "ray", "_tune_trial": "ray", "ray_worker": "ray", "_ray_utils": "ray",
    "ray_node_memory": "ray",
    "cuda_pool_exit": "torch", "slic_kernels": "scikit-image",
}
WRAPPERS = {  # accessor that puts a wrapper in place -> (module holding the owner, owner, name)
    "wrap_actor_task_failed": ("ray.air.execution._internal.actor_manager", "RayActorManager",
                               "_actor_task_failed"),
    "wrap_print_to_stdstream": ("ray._private.worker", None, "print_to_stdstream"),
    "wrap_trial_handle_error": ("ray.tune.experiment.trial", "Trial", "handle_error"),
}


def _owner(module: str, cls: str | None):
    import importlib

    mod = importlib.import_module(module)
    return getattr(mod, cls) if cls else mod


@pytest.mark.parametrize("name", sorted(ACCESSORS))
@pytest.mark.parametrize("which", ["newer", "older"])
def test_each_private_call_refuses_an_untested_version_in_one_line(monkeypatch, name, which):
    dist = ACCESSORS[name]
    low, high = compat.TESTED[dist]
    fake = high + ".0" if which == "newer" else "0.1.0"
    monkeypatch.setattr(compat, "installed", lambda d: fake if d == dist else compat.metadata.version(d))
    with pytest.raises(compat.UnsupportedVersion) as err:
        getattr(compat, name)()
    text = str(err.value)
    assert "\n" not in text and isinstance(err.value, ConfigError)  # exit 2 through the CLI
    assert text.startswith(f"{dist} {fake} is {which} than ablate was tested with (>={low},<{high})")


@pytest.mark.parametrize("name", sorted(ACCESSORS))
def test_each_private_call_works_on_the_installed_versions(name):
    got = getattr(compat, name)()
    parts = got if isinstance(got, tuple) else (got,)
    assert all(p is not None for p in parts)


def test_a_missing_name_in_a_tested_release_is_one_line_not_a_silent_skip(monkeypatch):
    import torch

    monkeypatch.delattr(torch._C, "_cuda_releasePool", raising=False)
    with pytest.raises(compat.UnsupportedVersion, match="has no _cuda_releasePool"):
        compat.cuda_pool_exit()


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_a_wrapper_refuses_an_untested_ray_and_leaves_the_private_name_alone(monkeypatch, name):
    module, cls, attr = WRAPPERS[name]
    owner = _owner(module, cls)
    before = getattr(owner, attr)
    monkeypatch.setattr(compat, "installed", lambda d: "9.0.0" if d == "ray" else compat.metadata.version(d))
    with pytest.raises(compat.UnsupportedVersion, match=r"^ray 9\.0\.0 is newer than"):
        getattr(compat, name)(lambda original: original)
    assert getattr(owner, attr) is before


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_a_wrapper_puts_ablates_function_in_place_once(monkeypatch, name):
    module, cls, attr = WRAPPERS[name]
    owner = _owner(module, cls)
    monkeypatch.setattr(owner, attr, lambda *a, **k: "original")  # restored after the test
    calls = []

    def wrap(original):
        calls.append(original)
        return lambda *a, **k: ("wrapped", original(*a, **k))

    assert getattr(compat, name)(wrap) is True
    assert getattr(compat, name)(wrap) is False  # already in place: not wrapped twice
    assert len(calls) == 1 and getattr(owner, attr)() == ("wrapped", "original")


@pytest.mark.parametrize("module, cls, attr, call", [
    ("ray._private.worker", None, "_global_node", "ray_session_dir"),
    ("ray._private.worker", None, "print_to_stdstream", "wrap_print_to_stdstream"),
    ("ray.air.execution._internal.actor_manager", "RayActorManager", "_actor_task_failed",
     "wrap_actor_task_failed"),
])
def test_a_missing_ray_name_is_one_line_naming_it_and_the_version(monkeypatch, module, cls, attr, call):
    """A Ray release that renamed a private name stops the run in one line (`_global_node`:
    the session clean-up is never skipped without a word)."""
    monkeypatch.delattr(_owner(module, cls), attr)
    fn = getattr(compat, call)
    with pytest.raises(compat.UnsupportedVersion) as err:
        fn() if call == "ray_session_dir" else fn(lambda original: original)
    text = str(err.value)
    assert "\n" not in text and f"has no {attr}" in text
    assert text.startswith(f"ray {compat.installed('ray')}: ")


def test_the_session_folder_is_none_without_a_ray_node(monkeypatch):
    import ray._private.worker as worker

    monkeypatch.setattr(worker, "_global_node", None)
    assert compat.ray_session_dir() is None

    class Node:
        def get_session_dir_path(self):
            return "/tmp/ray/session_x"

    monkeypatch.setattr(worker, "_global_node", Node())
    assert compat.ray_session_dir() == "/tmp/ray/session_x"


def test_versions_parse_and_ranges_match_pyproject():
    assert compat.release("2.13.0+cpu") == (2, 13, 0) and compat.release("2.61.0rc1") == (2, 61, 0)
    compat.check("torch", "x", version="2.14.1")
    with pytest.raises(compat.UnsupportedVersion):
        compat.check("torch", "x", version="2.15.0")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dist, (low, high) in compat.TESTED.items():
        spec = next(d for d in deps if re.match(rf"{re.escape(dist)}(\[[^\]]*\])?\s*[<>=]", d))
        assert f">={low}" in spec and f"<{high}" in spec, spec


def test_the_tune_hook_hands_over_worker_losses_and_nothing_else(monkeypatch):
    """Tune's actor manager knows actor and task errors only: a worker lost to the memory
    monitor, a dead node, a crashed process, a full disk or a lost object must reach it as the
    actor's death (the trial fails and is retried), not end the study; a runtime environment
    that cannot be set up (the same for every trial) and the errors Tune handles pass as they
    are."""
    from ray.exceptions import (
        NodeDiedError,
        ObjectLostError,
        OutOfDiskError,
        OutOfMemoryError,
        OwnerDiedError,
        RayActorError,
        RayTaskError,
        RuntimeEnvSetupError,
        WorkerCrashedError,
    )

    from ablate.runner.execute.tune_callback import worker_deaths_as_trial_failures

    manager = compat._tune_actor_manager()
    seen = []
    monkeypatch.setattr(manager, "_actor_task_failed", lambda self, task, exc: seen.append(exc))
    worker_deaths_as_trial_failures()
    losses = [OutOfMemoryError("Task was killed due to the node running low on memory"),
              NodeDiedError("node 10.0.0.2 died"), WorkerCrashedError(),
              OutOfDiskError("disk full"), ObjectLostError("ab" * 14, "owner", "call site"),
              OwnerDiedError("ab" * 14, "owner", "call site")]
    kept = [RuntimeEnvSetupError("pip failed"), RayActorError(error_msg="actor died"),
            RayTaskError("fn", "traceback", ValueError("bad"))]
    for e in losses + kept:
        manager._actor_task_failed(None, None, e)
    for e, got in zip(losses, seen):
        assert isinstance(got, RayActorError) and type(e).__name__ in str(got), (e, got)
    assert seen[len(losses):] == kept  # any other error reaches Tune as it is


def test_the_tune_hook_spends_the_retries_of_a_trial_whose_own_error_a_retry_cannot_fix(
        monkeypatch):
    """Tune retries a failed trial whatever failed it (`FailureConfig(max_failures)`): a search
    trial's own exception that the runner's rule refuses (`ablate.errors.retryable`: a config
    error, a device error) spends its budget at once; a runtime fault, NaN and a worker's
    death (no exception of its own) keep theirs."""
    from types import SimpleNamespace

    from ray.exceptions import RayActorError, RayTaskError

    from ablate.errors import DeviceError, NaNLoss
    from ablate.runner.execute.tune_callback import retry_only_what_may_pass

    trial_cls = compat._tune_trial()
    monkeypatch.setattr(trial_cls, "handle_error", lambda self, exc=None: None)
    retry_only_what_may_pass()
    cases = [(RayTaskError("fn", "tb", ConfigError("bad")), 0),
             (RayTaskError("fn", "tb", DeviceError("no cuda")), 0),
             (RayTaskError("fn", "tb", RuntimeError("flaky")), 2),
             (RayTaskError("fn", "tb", NaNLoss("nan")), 2),
             (RayActorError(error_msg="The actor died."), 2)]
    for exc, left in cases:
        trial = SimpleNamespace(max_failures=2)
        trial_cls.handle_error(trial, exc)
        assert trial.max_failures == left, exc
