"""Shared test set-up: one torch thread (tiny models run faster and steadier that way)."""

import os
import sys
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)
os.environ.setdefault("RAY_AUTH_MODE", "token")  # Ray 2.60: local test clusters need it
# Tests never download from the internet: MNIST / TU base URLs point at a closed loopback port
# (tests/test_download.py serves its own files on 127.0.0.1 and passes their URL)
os.environ["ABLATE_MNIST_URL"] = "http://127.0.0.1:9/no-downloads-in-tests"
os.environ["ABLATE_TU_URL"] = "http://127.0.0.1:9/no-downloads-in-tests"


@pytest.fixture
def ray_env(tmp_path, monkeypatch):
    """Dataset cache in tmp, tests/ importable by the driver and Ray workers; Ray stopped after."""
    tests = Path(__file__).resolve().parent
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tests), str(tests.parent)]))
    monkeypatch.syspath_prepend(str(tests))
    yield tmp_path
    if "ray" in sys.modules and sys.modules["ray"].is_initialized():
        sys.modules["ray"].shutdown()
