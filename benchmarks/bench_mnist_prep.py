"""First-use preparation of MNIST-75SP, timed through the real path on locally made images.

No MNIST is needed (nor a network): the script writes n_train + n_test 28x28 digit images
as MNIST's four gzipped IDX files (scikit-learn's 8x8 digits upscaled by
`ablate.data.mnist.upscale_digits`, cycled, each shifted by a random -2..2 pixels),
serves them from an HTTP server on 127.0.0.1 with their checksums
($ABLATE_DATA_CHECKSUMS), and times what `study=mnist` does on its first run for one
dataset recipe: `load_graphsets("mnist_sp", ...)` = download + checksum + install of the
raw files, then IDX reading, SLIC superpixels of every image on 2 processes, graphs,
features and the cache file. With the study's `final=True` the 5,000 val images are
also in train, so n_train + n_val + n_test + n_val images are converted. Then the number of
superpixels per image of every split (mean, min, max, share of images with 75).

    python benchmarks/bench_mnist_prep.py                          # the full 70,000
    python benchmarks/bench_mnist_prep.py --n-train 6000 --n-test 1000 --n-val 500
    python benchmarks/bench_mnist_prep.py --slic v0.19             # another SLIC rule (data.slic)
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np


def digit_images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n uint8 (28, 28) images of upscaled scikit-learn digits, randomly shifted; labels."""
    from sklearn.datasets import load_digits

    from ablate.data.mnist import upscale_digits

    digits = load_digits()
    base = (upscale_digits(digits.images / 16.0) * 255).round().astype(np.uint8)
    rng = np.random.default_rng(seed)
    idx = np.arange(n) % len(base)
    shifts = rng.integers(-2, 3, size=(n, 2))
    out = np.stack([np.roll(base[i], tuple(s), axis=(0, 1)) for i, s in zip(idx, shifts)])
    return out, digits.target[idx].astype(np.uint8)


def idx_gz(arr: np.ndarray) -> bytes:
    head = bytes([0, 0, 0x08, arr.ndim]) + np.asarray(arr.shape, ">i4").tobytes()
    return gzip.compress(head + arr.tobytes(), mtime=0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-train", type=int, default=60000, help="training images in the IDX file")
    ap.add_argument("--n-test", type=int, default=10000)
    ap.add_argument("--n-val", type=int, default=5000, help="the recipe's n_val (held out of train)")
    ap.add_argument("--slic", default=None, help="the recipe's SLIC rule (data.slic; default: the "
                    "recipe's default)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mnist_prep_"))
    try:
        _measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _measure(args: argparse.Namespace, work: Path) -> None:
    from ablate.data import download, load_graphsets

    serve = work / "serve"
    serve.mkdir()
    train_x, train_y = digit_images(args.n_train, 0)
    test_x, test_y = digit_images(args.n_test, 1)
    sums = {}
    for name, arr in zip(download.MNIST_FILES, (train_x, train_y, test_x, test_y)):
        blob = idx_gz(arr)
        (serve / f"{name}.gz").write_bytes(blob)
        sums[f"{name}.gz"] = "sha256:" + hashlib.sha256(blob).hexdigest()
    (work / "sums.json").write_text(json.dumps(sums))
    os.environ["ABLATE_DATA_CHECKSUMS"] = str(work / "sums.json")
    os.environ["ABLATE_CACHE"] = str(work / "cache")
    handler = partial(SimpleHTTPRequestHandler, directory=str(serve))
    handler.log_message = lambda *a: None
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    t0 = time.perf_counter()
    download.ensure_files("mnist_sp", None, url)
    t1 = time.perf_counter()
    rule = {} if args.slic is None else {"slic": args.slic}
    splits = load_graphsets("mnist_sp", progress=True, url=url, final=True, **rule,
                            n_train=args.n_train - args.n_val, n_val=args.n_val, n_test=args.n_test)
    t2 = time.perf_counter()
    httpd.shutdown()
    converted = args.n_train + args.n_val + args.n_test  # final=True: val images also in train
    mb = sum((serve / f).stat().st_size for f in sums) / 1e6
    print(f"raw files {mb:.1f} MB: download + checksum + install from 127.0.0.1 {t1 - t0:.1f} s")
    sizes = ", ".join(f"{k} {len(v)}" for k, v in splits.items())
    print(f"superpixels, graphs and cache of {converted} images ({sizes}): {t2 - t1:.1f} s "
          f"({1e3 * (t2 - t1) / converted:.2f} ms per image)")
    for name in ("train", "val", "test_orig"):
        n = np.diff(np.asarray(splits[name].node_ptr))
        print(f"superpixels per image, {name}: mean {n.mean():.2f}, min {n.min()}, max {n.max()}, "
              f"{100 * np.mean(n == 75):.1f}% with 75")


if __name__ == "__main__":
    main()
