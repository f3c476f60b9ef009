"""benchmarks/bench_memory.py's choice of raw files: which are served real (vouched for by a
folder's checksums.json) and which generated, and the cache kind each run uses. No data is
prepared here (the benchmark itself runs at full size)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from _bench import benchmark

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
bench = benchmark("bench_memory")

MNIST = ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
         "t10k-labels-idx1-ubyte.gz")


def _folder(path: Path, files: dict[str, str]) -> Path:
    """A folder of `files` (name -> checksum, each file present) and its checksums.json."""
    path.mkdir()
    for name in files:
        (path / name).write_bytes(b"x")
    (path / "checksums.json").write_text(json.dumps(files))
    return path


def test_mnist_is_real_only_with_all_four_files_and_tu_sets_by_their_zip(tmp_path):
    mnist = _folder(tmp_path / "mnist", {f: f"sha256:{i}" for i, f in enumerate(MNIST)})
    tu = _folder(tmp_path / "tu", {"DD.zip": "sha256:dd"})
    real = bench._real_files([mnist, tu])
    assert bench.raw_files("mnist_sp") == MNIST and bench.raw_files("dd") == ("DD.zip",)
    assert bench.is_real("mnist_sp", real) and bench.is_real("dd", real)
    assert not bench.is_real("collab", real)
    assert real["DD.zip"] == (tu, "sha256:dd")
    partial = _folder(tmp_path / "partial", {MNIST[0]: "sha256:0"})
    assert not bench.is_real("mnist_sp", bench._real_files([partial]))  # three files missing
    assert bench._kind("mnist_sp", real) == "real" and bench._kind("collab", real) == "generated"


def test_a_folder_without_checksums_is_refused(tmp_path):
    (tmp_path / "DD.zip").write_bytes(b"x")
    with pytest.raises(SystemExit, match="no checksums.json there"):
        bench._real_files([tmp_path])


def test_a_file_the_checksums_name_but_the_folder_lacks_is_not_served(tmp_path):
    folder = _folder(tmp_path / "tu", {"DD.zip": "sha256:dd"})
    (folder / "checksums.json").write_text(json.dumps({"DD.zip": "sha256:dd", "PROTEINS.zip": "sha256:p"}))
    assert set(bench._real_files([folder])) == {"DD.zip"}
