"""Shared test set-up: one torch thread (tiny models run faster and steadier that way)."""

import os
import sys
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)
os.environ.setdefault("RAY_AUTH_MODE", "token")  # Ray 2.60: local test clusters need it


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
