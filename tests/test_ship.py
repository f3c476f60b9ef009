"""Shipping a prepared dataset file to a node (`ablate.runner.execute.ship.receive`, issue 35): a file
already at the path is kept only when it is the driver's (same size and SHA-256 under the same
recipe name); a file of an older cache format, or a torn one, is replaced under the node's lock."""

from __future__ import annotations

import hashlib

import pytest

from ablate.runner.execute import ship


@pytest.fixture
def no_ray(monkeypatch):
    import ray

    monkeypatch.setattr(ray, "put", lambda piece: piece)  # the pieces are the bytes themselves
    monkeypatch.setattr(ray, "get", lambda ref: ref)


def _shipped(blob: bytes, pieces: int = 3) -> dict:
    size = -(-len(blob) // pieces)
    return {"name": "x.npz", "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest(),
            "chunks": [blob[i:i + size] for i in range(0, len(blob), size)]}


def test_a_file_of_another_format_at_the_path_is_replaced(tmp_path, no_ray):
    blob = bytes(range(256)) * 40
    path = tmp_path / "cache" / "tu-abc.npz"
    path.parent.mkdir()
    path.write_bytes(b"an older format, shorter")
    assert ship.receive(path, _shipped(blob)) is True
    assert path.read_bytes() == blob
    assert ship.receive(path, _shipped(blob)) is False  # the driver's file: kept as it is


def test_a_damaged_shipment_leaves_nothing(tmp_path, no_ray):
    blob = bytes(range(256)) * 40
    bad = _shipped(blob)
    bad["sha256"] = "0" * 64
    path = tmp_path / "tu-abc.npz"
    with pytest.raises(OSError, match="arrived damaged"):
        ship.receive(path, bad)
    assert not path.exists()


def test_a_file_of_the_same_size_with_other_bytes_is_not_the_shipped_one(tmp_path):
    """Issue 42 item 11: a node's file is trusted by its SHA-256 (remembered by size and
    mtime), not by its size alone."""
    import hashlib
    import os

    from ablate.runner.execute import ship

    good = b"prepared graphs" * 1000
    path = tmp_path / "mnist_sp-abc.npz"
    path.write_bytes(good)
    shipped = {"name": path.name, "bytes": len(good), "sha256": hashlib.sha256(good).hexdigest()}
    assert ship._same_file(path, shipped)
    memo = tmp_path / f".{path.name}.sha256"
    assert memo.exists() and shipped["sha256"] in memo.read_text()
    damaged = bytearray(good)
    damaged[100] ^= 1
    path.write_bytes(bytes(damaged))  # same size, a new mtime
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))
    assert not ship._same_file(path, shipped)
    assert ship.file_sha256(path) == hashlib.sha256(bytes(damaged)).hexdigest()


def test_a_file_put_in_pieces_arrives_whole_and_checked(tmp_path, no_ray, monkeypatch):
    """`put_chunks` and `file_sha256` hash a file piece by piece as `receive` does: one digest
    of the whole file whatever the size of the pieces (a last piece shorter than the others)."""
    blob = bytes(range(256)) * 40 + b"tail"
    src = tmp_path / "driver" / "tu-abc.npz"
    src.parent.mkdir()
    src.write_bytes(blob)
    shipped = ship.put_chunks(src, chunk_bytes=1000)
    assert [len(c) for c in shipped["chunks"]] == [1000] * 10 + [244]
    assert shipped["sha256"] == hashlib.sha256(blob).hexdigest() and shipped["bytes"] == len(blob)
    monkeypatch.setattr(ship, "CHUNK_BYTES", 300)
    assert ship.file_sha256(src) == shipped["sha256"]
    dst = tmp_path / "node" / src.name
    assert ship.receive(dst, shipped) is True and dst.read_bytes() == blob
