"""Shared test set-up: one torch thread (tiny models run faster and steadier that way)."""

import os
import signal
import sys
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)
# Started as a background job by a non-interactive shell (as CI may be), pytest inherits an
# ignored SIGINT, and so would every CLI it starts: the tests of Ctrl-C would then wait
# forever. Ctrl-C is what they test, so it gets Python's usual handler back (children
# started from here then get the default action, not "ignored").
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
os.environ.setdefault("RAY_AUTH_MODE", "token")  # Ray 2.60: local test clusters need it
# Tests never download from the internet: MNIST / TU base URLs point at a closed loopback port
# (tests/test_download.py serves its own files on 127.0.0.1 and passes their URL)
os.environ["ABLATE_MNIST_URL"] = "http://127.0.0.1:9/no-downloads-in-tests"
os.environ["ABLATE_TU_URL"] = "http://127.0.0.1:9/no-downloads-in-tests"
# ogb (a test extra) starts a thread asking PyPI for a newer version when it is imported, by
# whichever test or library imports it first: `outdated` unimportable for the whole session,
# so ogb skips that check (tests/test_pyg_ogb.py asserts it did)
sys.modules["outdated"] = None  # type: ignore[assignment]


@pytest.fixture
def ray_env(tmp_path, monkeypatch):
    """Dataset cache in tmp, tests/ importable by the driver and Ray workers; Ray stopped after."""
    tests = Path(__file__).resolve().parent
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tests), str(tests.parent)]))
    monkeypatch.syspath_prepend(str(tests))
    yield tmp_path
    _stop_drivers_ray()


def _stop_drivers_ray() -> None:
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()


@pytest.fixture
def local_cluster():
    """Makes `ray.cluster_utils.Cluster`s (`local_cluster(num_cpus=2, ...)`: the head's
    arguments); after the test, the driver's Ray connection and every cluster made stop."""
    _stop_drivers_ray()  # a Ray an earlier test left connected would be joined instead
    made = []

    def make(**head):
        from ray.cluster_utils import Cluster

        made.append(Cluster(initialize_head=True, head_node_args=head))
        return made[-1]

    yield make
    _stop_drivers_ray()
    for cluster in made:
        cluster.shutdown()


def fake_checkout(folder: Path, main_py: str, **files: str) -> Path:
    """A stand-in for a checkout of the authors' code: `main.py` (prints their log lines) and
    any other files, in `folder` (the side-by-side benchmarks' tests)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "main.py").write_text(main_py)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder
