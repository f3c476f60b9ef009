"""Raw data fetched on first use (ablate.data.download) from a real HTTP server on 127.0.0.1.

The server is started here and serves tiny files built here: MNIST as four gzipped IDX
files and PROTEINS as a TU zip, with their checksums injected into the checksum table
(or through $ABLATE_DATA_CHECKSUMS). Nothing here reaches any other address: conftest.py
points the default URLs at a closed loopback port.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import socket
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from ablate.data import dataset_recipe_hash, download, load_graphsets
from ablate.errors import ConfigError

TINY = {"n_train": 12, "n_val": 4, "n_test": 6}
MNIST_NAMES = download.MNIST_FILES


# ----------------------------------------------------------------------------- tiny files


def _images(n: int, seed: int) -> np.ndarray:
    """n uint8 28x28 images: a bright disc on faint noise."""
    rng = np.random.default_rng(seed)
    rows, cols = np.indices((28, 28))
    out = rng.integers(0, 40, size=(n, 28, 28)).astype(np.uint8)
    for k in range(n):
        r0, c0, rad = rng.integers(8, 20), rng.integers(8, 20), rng.integers(4, 7)
        disc = ((rows - r0) ** 2 + (cols - c0) ** 2) <= rad**2
        out[k][disc] = 230
    return out


def _idx(arr: np.ndarray) -> bytes:
    return bytes([0, 0, 0x08, arr.ndim]) + np.asarray(arr.shape, ">i4").tobytes() + arr.tobytes()


def mnist_files() -> dict[str, bytes]:
    """The four gzipped IDX files of a 16 + 6 image MNIST."""
    train, test = _images(16, 0), _images(6, 1)
    arrays = [train, (np.arange(16) % 10).astype(np.uint8), test, (np.arange(6) % 10).astype(np.uint8)]
    return {f"{n}.gz": gzip.compress(_idx(a), mtime=0) for n, a in zip(MNIST_NAMES, arrays)}


def proteins_zip() -> bytes:
    """PROTEINS.zip as the TU site lays it out: PROTEINS/PROTEINS_*.txt, 8 rings of 3-12 nodes."""
    sizes, ind, edges, off = [3, 5, 12, 4, 9, 6, 10, 3], [], [], 0
    for g, n in enumerate(sizes):
        ind += [g + 1] * n
        edges += [(off + i + 1, off + (i + 1) % n + 1) for i in range(n)]
        off += n
    files = {"A": "".join(f"{a}, {b}\n{b}, {a}\n" for a, b in edges),
             "graph_indicator": "".join(f"{i}\n" for i in ind),
             "graph_labels": "".join(f"{1 + g % 2}\n" for g in range(len(sizes))),
             "node_labels": "".join(f"{k % 3}\n" for k in range(off))}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for part, text in files.items():
            z.writestr(f"PROTEINS/PROTEINS_{part}.txt", text)
    return buf.getvalue()


def _md5(blob: bytes) -> tuple[str, str]:
    return "md5", hashlib.md5(blob).hexdigest()


# ----------------------------------------------------------------------------- the server


class Server:
    """HTTP on 127.0.0.1 serving `files` under /base/; counts GETs; can cut a file short."""

    def __init__(self, files: dict[str, bytes]):
        self.files, self.gets, self.cut, self.delay = dict(files), [], set(), 0.0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                self._answer(body=False)

            def do_GET(self):
                server.gets.append(self.path)
                self._answer(body=True)

            def _answer(self, body: bool):
                name = self.path.removeprefix("/base/")
                if name not in server.files:
                    self.send_error(404)
                    return
                blob = server.files[name]
                self.send_response(200)
                self.send_header("Content-Length", str(len(blob)))
                self.end_headers()
                if not body:
                    return
                if name in server.cut:  # promise all, send half, hang up
                    self.wfile.write(blob[: len(blob) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                for i in range(0, len(blob), 4096):
                    time.sleep(server.delay)
                    self.wfile.write(blob[i:i + 4096])

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/base"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(download.ENV_ALLOW, raising=False)
    return tmp_path / "cache"


@pytest.fixture
def server(monkeypatch):
    files = {**mnist_files(), "PROTEINS.zip": proteins_zip()}
    for name, blob in files.items():
        monkeypatch.setitem(download.CHECKSUMS, name, _md5(blob))
    srv = Server(files)
    yield srv
    srv.close()


def _files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- first use


def test_first_run_downloads_and_caches_second_run_never_touches_the_network(cache, server):
    a = load_graphsets("mnist_sp", url=server.url, **TINY)
    assert sorted(server.gets) == sorted(f"/base/{n}.gz" for n in MNIST_NAMES)
    raw = cache / "data" / "MNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == sorted(f"{n}.gz" for n in MNIST_NAMES)
    assert [p.name for p in (cache / "data").iterdir()] == ["MNIST"]  # no temp folder left
    assert len(a["train"]) == 12 and len(a["test_orig"]) == 6

    b = load_graphsets("mnist_sp", url=server.url, **TINY)  # the prepared cache
    c = load_graphsets("mnist_sp", url=server.url, **{**TINY, "n_train": 10})  # the raw files
    assert len(server.gets) == 4
    np.testing.assert_array_equal(a["train"].x, b["train"].x)
    assert len(c["train"]) == 10

    load_graphsets("proteins", url=server.url, max_train_nodes=6, n_train_val=4)
    load_graphsets("proteins", url=server.url, max_train_nodes=6, n_train_val=4)
    assert server.gets[4:] == ["/base/PROTEINS.zip"]
    assert (cache / "data" / "PROTEINS" / "PROTEINS_A.txt").is_file()


def test_the_url_setting_is_where_not_what(cache, server, monkeypatch):
    """data.url and $ABLATE_MNIST_URL choose a mirror; neither changes the recipe or trial id."""
    from ablate.config import TrialConfig, resolve, trial_id

    assert dataset_recipe_hash("mnist_sp", {"url": server.url}) == dataset_recipe_hash("mnist_sp")
    cfgs = [resolve(TrialConfig(dataset="mnist_sp", data_params=p)) for p in ({}, {"url": server.url})]
    assert len({trial_id(c, dataset_recipe_hash("mnist_sp")) for c in cfgs}) == 1
    monkeypatch.setenv("ABLATE_MNIST_URL", server.url + "/")
    assert download.base_url("mnist_sp") == server.url
    assert download.base_url("mnist_sp", "file:///srv/mnist") == "file:///srv/mnist"
    load_graphsets("mnist_sp", **TINY)  # through the environment variable
    assert len(server.gets) == 4


def test_checksums_can_come_from_a_json_file(cache, server, monkeypatch, tmp_path):
    for name in download.SOURCES["proteins"].files:
        monkeypatch.setitem(download.CHECKSUMS, name, ("sha256", "0" * 64))  # wrong on purpose
    sums = tmp_path / "sums.json"
    sums.write_text(json.dumps({"PROTEINS.zip": "sha256:" + hashlib.sha256(proteins_zip()).hexdigest()}))
    monkeypatch.setenv(download.ENV_CHECKSUMS, str(sums))
    load_graphsets("proteins", url=server.url, max_train_nodes=6, n_train_val=4)
    sums.write_text('{"PROTEINS.zip": "sha256:nothex"}')
    with pytest.raises(ConfigError, match="ABLATE_DATA_CHECKSUMS"):
        download.checksums()


# ----------------------------------------------------------------------------- integrity


def test_a_wrong_checksum_is_refused_and_nothing_is_kept(cache, server, monkeypatch):
    monkeypatch.setitem(download.CHECKSUMS, "t10k-images-idx3-ubyte.gz", ("md5", "0" * 32))
    with pytest.raises(ConfigError) as err:
        load_graphsets("mnist_sp", url=server.url, **TINY)
    msg = str(err.value)
    assert "\n" not in msg and "t10k-images-idx3-ubyte.gz" in msg and "md5 check" in msg
    assert "nothing was kept" in msg and str(cache / "data" / "MNIST" / "raw") in msg
    assert _files_under(cache) == [] and list((cache / "data").iterdir()) == []
    server.files["t10k-images-idx3-ubyte.gz"] = b"altered"  # a server serving other bytes
    with pytest.raises(ConfigError, match="truncated or altered"):
        load_graphsets("mnist_sp", url=server.url, **TINY)
    assert _files_under(cache) == []


def test_a_server_closing_mid_file_leaves_no_partial_file(cache, server):
    server.cut.add("train-images-idx3-ubyte.gz")
    with pytest.raises(ConfigError) as err:
        load_graphsets("mnist_sp", url=server.url, **TINY)
    assert "train-images-idx3-ubyte.gz" in str(err.value) and "\n" not in str(err.value)
    assert _files_under(cache) == []
    server.cut.add("PROTEINS.zip")
    with pytest.raises(ConfigError, match="PROTEINS.zip"):
        load_graphsets("proteins", url=server.url, max_train_nodes=6, n_train_val=4)
    assert _files_under(cache) == []
    server.cut.clear()  # the next run starts clean and succeeds
    load_graphsets("mnist_sp", url=server.url, **TINY)


def test_two_drivers_fetching_at_once_do_not_corrupt_each_other(cache, server):
    server.delay = 0.05  # both transfers overlap
    folder = cache / "data"
    errors: list[BaseException] = []

    def fetch():
        try:
            download.ensure_files("mnist_sp", None, server.url)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=fetch) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(server.gets) == 8  # both downloaded, one copy installed
    raw = folder / "MNIST" / "raw"
    for name, blob in mnist_files().items():
        assert (raw / name).read_bytes() == blob
    assert _files_under(folder) == sorted(f"MNIST/raw/{n}" for n in mnist_files())


def test_workers_may_not_download(cache, server, monkeypatch):
    monkeypatch.setenv(download.ENV_ALLOW, "0")
    with pytest.raises(ConfigError, match="may not download"):
        load_graphsets("mnist_sp", url=server.url, **TINY)
    assert server.gets == []


# ----------------------------------------------------------------------------- the command line


def _cli(capsys, args: list[str]) -> tuple[int, list[str]]:
    """Exit code and stderr lines, less the progress display's step lines ("[study] preparing
    datasets ..."): a step is logged once it has lasted 2 s, as it may on a loaded machine."""
    import re

    from ablate.run import main

    code = main(args)
    lines = capsys.readouterr().err.strip().splitlines()
    return code, [ln for ln in lines if not re.match(r"\[[\w.-]+\] ", ln)]


def _ray_running() -> bool:
    import sys

    return "ray" in sys.modules and sys.modules["ray"].is_initialized()


def test_offline_names_the_url_and_the_folder_before_ray(cache, capsys, tmp_path):
    dead = f"http://127.0.0.1:{_closed_port()}/mirror"
    for dry in ("true", "false"):
        code, err = _cli(capsys, ["study=mnist", f"data.url={dead}", f"dry_run={dry}",
                                  f"results_dir={tmp_path / 'r'}"])
        assert code == 2 and len(err) == 1, err
        assert f"{dead}/train-images-idx3-ubyte.gz" in err[0]
        assert str(cache / "data" / "MNIST" / "raw") in err[0] and "by hand" in err[0]
    assert not _ray_running() and _files_under(cache) == []
    assert not (tmp_path / "r").exists()  # a refused first run leaves no study folder


def test_a_refused_run_leaves_an_existing_store_as_it_was(cache, capsys, tmp_path, monkeypatch):
    """Offline, a rerun of a study that has results, or a search study's first run into a
    results folder of the user's, removes nothing it did not make."""
    dead = f"http://127.0.0.1:{_closed_port()}/mirror"
    kept = tmp_path / "r" / "mnist"
    (kept / "trials").mkdir(parents=True)
    (kept / "trials" / "abc.parquet").write_bytes(b"not ours to judge")
    (kept / "plan.json").write_text("{}")
    before = _files_under(tmp_path / "r")
    code, err = _cli(capsys, ["study=mnist", f"data.url={dead}", f"results_dir={tmp_path / 'r'}"])
    assert code == 2 and len(err) == 1, err
    assert set(_files_under(tmp_path / "r")) >= set(before)
    assert (kept / "trials" / "abc.parquet").read_bytes() == b"not ours to judge"

    mine = tmp_path / "mine"
    mine.mkdir()
    monkeypatch.setenv("ABLATE_TU_URL", dead)
    code, err = _cli(capsys, ["study=tu_search", "arms=proteins_weak", f"results_dir={mine}"])
    assert code == 2 and len(err) == 1 and "cannot download" in err[0], err
    assert mine.is_dir() and list(mine.iterdir()) == []  # its own folder stays, emptied


def test_a_dry_run_says_what_a_run_would_download(cache, capsys, server, tmp_path):
    from ablate.run import main

    server.files.update({"DD.zip": b"-", "COLLAB.zip": b"-"})  # asked for (HEAD), not fetched
    assert main(["study=tu", f"data.url={server.url}", "dry_run=true",
                 f"results_dir={tmp_path / 'r'}"]) == 0
    out = capsys.readouterr().out
    assert f"note: PROTEINS: 1 file(s) (size not known) will be downloaded from {server.url}" in out
    assert server.gets == [] and _files_under(cache) == []


def test_data_url_that_is_not_a_url(cache, capsys, tmp_path):
    code, err = _cli(capsys, ["study=mnist", "data.url=not a url", f"results_dir={tmp_path}"])
    assert code == 2 and len(err) == 1 and "is not a URL" in err[0]


def test_a_half_filled_folder_is_refused_and_left_as_it_was(cache, capsys, server, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    files = mnist_files()
    for name in list(files)[:2]:
        (mine / name).write_bytes(files[name])
    before = {p: p.read_bytes() for p in mine.iterdir()}
    code, err = _cli(capsys, ["study=mnist", f"data.path={mine}", f"data.url={server.url}",
                              f"results_dir={tmp_path / 'r'}"])
    assert code == 2 and len(err) == 1 and "half-filled" in err[0], err
    assert "t10k-images-idx3-ubyte" in err[0] and str(mine) in err[0]
    assert {p: p.read_bytes() for p in mine.iterdir()} == before and server.gets == []
    tu = tmp_path / "tu"
    (tu / "PROTEINS").mkdir(parents=True)
    (tu / "PROTEINS" / "PROTEINS_A.txt").write_text("1, 2\n")
    with pytest.raises(ConfigError, match="PROTEINS_graph_indicator.txt"):
        load_graphsets("proteins", path=str(tu), url=server.url)
    assert _files_under(tu) == ["PROTEINS/PROTEINS_A.txt"]


def test_a_data_folder_that_is_not_writable(cache, capsys, server, tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "notes.txt").write_text("mine")
    locked.chmod(0o555)
    if os.geteuid() == 0:  # root writes anywhere: the folder refuses as a read-only mount would

        def refuse(tmp: Path) -> None:
            raise PermissionError(13, "Permission denied", str(tmp))

        monkeypatch.setattr(download, "_make_temp", refuse)
    try:
        code, err = _cli(capsys, ["study=mnist", f"data.path={locked}", f"data.url={server.url}",
                                  f"results_dir={tmp_path / 'r'}"])
    finally:
        locked.chmod(0o755)
    assert code == 2 and len(err) == 1, err
    assert "cannot download MNIST into" in err[0] and "Permission denied" in err[0]
    assert _files_under(locked) == ["notes.txt"] and server.gets == []
    code, err = _cli(capsys, ["study=mnist", f"data.path={tmp_path / 'typo'}",
                              f"data.url={server.url}", f"results_dir={tmp_path / 'r'}"])
    assert code == 2 and len(err) == 1 and "does not exist" in err[0]
    assert not (tmp_path / "typo").exists() and not _ray_running()


# ----------------------------------------------------------------------------- once per cluster


@pytest.mark.slow  # the default suite stays under 10 min; CI runs -m slow too
def test_once_per_cluster_the_driver_fetches_and_other_nodes_get_the_prepared_cache(
        server, tmp_path, monkeypatch, local_cluster):
    """Head node without CPUs, two trials at once on a second node whose dataset cache is
    another folder: the driver downloads and prepares once; the node receives the prepared
    file once (not once per trial), through the object store in pieces no larger than the
    chunk size, byte for byte the driver's; it never gets the raw files, never downloads."""
    import math

    import ablate.data.cache
    from ablate.runner.execute import ship
    from ablate.runner.execute.driver import run_study
    from ablate.runner.execute.store import read_trials
    from ablate.runner.study.compose import StudySpec
    from ablate.runner.study.expand import Study, expand

    driver_cache, node_cache = tmp_path / "driver", tmp_path / "node2"
    # Each node has its own disk: no $ABLATE_CACHE to pass on; the driver process alone
    # sees its folder, the second node's processes theirs (set on that node only).
    monkeypatch.delenv("ABLATE_CACHE", raising=False)
    monkeypatch.setattr(ablate.data.cache, "cache_dir", lambda: driver_cache)
    monkeypatch.setattr(ship, "CHUNK_BYTES", 8 << 10)  # the tiny file travels in pieces
    spec = StudySpec(name="fetch", fixed={"dataset": "mnist_sp", "backbone": "gin", "pool_layers": [],
                                          "epochs": 1, "loo_auc": False},
                     data={**TINY, "url": server.url}, seeds=[0, 1], seeds_per_trial=1,
                     gpus_per_trial=0)
    study = Study(spec, expand(spec))
    cluster = local_cluster(num_cpus=0)
    node = cluster.add_node(num_cpus=2, env_vars={"ABLATE_CACHE": str(node_cache)})
    cluster.wait_for_nodes()
    summary = run_study(study, tmp_path / "results", ray_address=cluster.address,
                        progress="none")
    assert summary.exit_code == 0 and summary.ok == 2
    assert len(server.gets) == 4  # the driver's download, once
    assert (driver_cache / "data" / "MNIST" / "raw").is_dir() and not (node_cache / "data").exists()
    [sent] = driver_cache.glob("*.npz")
    assert [p.name for p in node_cache.glob("*.npz")] == [sent.name]
    assert (node_cache / sent.name).read_bytes() == sent.read_bytes()
    [got] = ship.received(node_cache)  # once for the node's two trials
    size = sent.stat().st_size
    assert got["file"] == sent.name and got["bytes"] == size
    assert got["chunks"] == math.ceil(size / (8 << 10)) > 1
    rows = read_trials(tmp_path / "results", "fetch")
    assert set(rows.node_id) == {node.node_id}
