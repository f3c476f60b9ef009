"""The raw files `benchmarks/bench_memory.py` serves from 127.0.0.1 when no real ones are
given: MNIST IDX digits drawn like the real ones (`bench_mnist_prep`) and TU zips whose graph
counts and node-count spreads match PROTEINS, D&D and COLLAB (`TU_SHAPES`), plus the small HTTP
server the runner's download fetches them from (as a user's first run fetches the real ones).
"""

from __future__ import annotations

import hashlib
import io
import sys
import threading
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def write_raw(name: str, serve: Path) -> dict[str, str]:
    """The raw files of `name` in `serve` (MNIST IDX, or NAME.zip); file name -> checksum."""
    sys.path.insert(0, str(HERE))
    if name == "mnist_sp":
        import bench_mnist_prep as mp

        from ablate.data.download import MNIST_FILES

        arrays = (*mp.digit_images(60000, 0), *mp.digit_images(10000, 1))
        blobs = {f"{n}.gz": mp.idx_gz(a) for n, a in zip(MNIST_FILES, arrays)}
    else:
        label = name.upper()
        blobs = {f"{label}.zip": tu_zip(label, **TU_SHAPES[name])}
    for fname, blob in blobs.items():
        (serve / fname).write_bytes(blob)
    return {k: "sha256:" + hashlib.sha256(v).hexdigest() for k, v in blobs.items()}


TU_SHAPES = {
    # log-normal graph sizes, one graph at the data set's largest size
    "dd": dict(graphs=1178, log_mean=np.log(230), log_sd=0.55, lo=30, hi=2000, largest=5748,
               per_node=2.3, labels=89),
    "collab": dict(graphs=5000, log_mean=np.log(61.5), log_sd=0.6, lo=32, hi=491, largest=492,
                   density=0.65, labels=0),
}


def tu_zip(label: str, graphs: int, log_mean: float, log_sd: float, lo: int, hi: int,
           largest: int, labels: int, per_node: float | None = None,
           density: float | None = None, seed: int = 0) -> bytes:
    """A TU-format zip (LABEL/LABEL_*.txt) of random graphs: `per_node` undirected edges per
    node, or a fraction `density` of all node pairs; `labels` node labels (0: none)."""
    rng = np.random.default_rng(seed)
    sizes = np.clip(rng.lognormal(log_mean, log_sd, graphs).astype(np.int64), lo, hi)
    sizes[0] = largest
    off = np.concatenate([[0], np.cumsum(sizes)])
    src, dst = [], []
    for g, n in enumerate(sizes):
        pairs = n * (n - 1) // 2
        m = min(pairs, int(density * pairs) if density is not None else int(per_node * n))
        k = rng.choice(pairs, size=m, replace=False)
        i = np.floor((1 + np.sqrt(1 + 8 * k)) / 2).astype(np.int64)  # pair k = (i, j), i > j
        j = k - i * (i - 1) // 2
        src.append(np.concatenate([i, j]) + off[g] + 1)
        dst.append(np.concatenate([j, i]) + off[g] + 1)
    a = np.stack([np.concatenate(src), np.concatenate(dst)], 1)
    files = {"A": _lines(a, "%d, %d"),
             "graph_indicator": _lines(np.repeat(np.arange(1, graphs + 1), sizes)[:, None], "%d"),
             "graph_labels": _lines((np.arange(graphs) % 2 + 1)[:, None], "%d")}
    if labels:
        files["node_labels"] = _lines(rng.integers(1, labels + 1, off[-1])[:, None], "%d")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for part, text in files.items():
            z.writestr(f"{label}/{label}_{part}.txt", text)
    return buf.getvalue()


def _lines(a: np.ndarray, fmt: str) -> bytes:
    out = io.BytesIO()
    np.savetxt(out, a, fmt=fmt)
    return out.getvalue()


class Server:
    """The raw files of a folder on http://127.0.0.1:PORT (a mirror, as `data.url` names one)."""

    def __init__(self, folder: Path):
        class Quiet(SimpleHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

        handler = partial(Quiet, directory=str(folder))
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
