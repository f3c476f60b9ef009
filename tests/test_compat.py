"""Private calls of Ray, Tune, torch and scikit-image, each behind a version check (issue 35).

Every accessor of `ablate.compat` refuses a version outside the range it was tested for
with one line (faked versions here), gives the real objects on the installed versions, and
pyproject.toml bounds each of those packages the same way. The Tune hook hands over Ray's
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
    "tune_actor_manager": "ray", "ray_worker": "ray", "ray_utils": "ray",
    "cuda_pool_exit": "torch", "slic_kernels": "scikit-image",
}


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


def test_versions_parse_and_ranges_match_pyproject():
    assert compat.release("2.13.0+cpu") == (2, 13, 0) and compat.release("2.61.0rc1") == (2, 61, 0)
    compat.check("torch", "x", version="2.14.1")
    with pytest.raises(compat.UnsupportedVersion):
        compat.check("torch", "x", version="2.15.0")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for dist, (low, high) in compat.TESTED.items():
        spec = next(d for d in deps if re.match(rf"{re.escape(dist)}(\[[^\]]*\])?\s*[<>=]", d))
        assert f">={low}" in spec and f"<{high}" in spec, spec


def test_the_tune_hook_hands_over_the_memory_monitor_error_alone(monkeypatch):
    from ray.exceptions import OutOfMemoryError, RayActorError, RuntimeEnvSetupError

    from ablate.runner.execute.tune_callback import worker_deaths_as_trial_failures

    manager = compat.tune_actor_manager()
    seen = []
    monkeypatch.setattr(manager, "_actor_task_failed", lambda self, task, exc: seen.append(exc))
    worker_deaths_as_trial_failures()
    oom, other = OutOfMemoryError("Task was killed due to the node running low on memory"), \
        RuntimeEnvSetupError("pip failed")
    manager._actor_task_failed(None, None, oom)
    manager._actor_task_failed(None, None, other)
    assert isinstance(seen[0], RayActorError) and "OutOfMemoryError" in str(seen[0])
    assert seen[1] is other  # any other error reaches Tune as it is
