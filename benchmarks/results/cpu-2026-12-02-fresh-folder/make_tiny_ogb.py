"""A tiny stand-in for ogbg-molhiv in OGB's own layout (offline): rings (label 1) and paths
(label 0) of 4..12 nodes, 9 integer atom features, 3 bond features, each undirected edge once,
a shuffled 'scaffold' split 20 / 10 / 10, OGB's RELEASE_v1.txt.

    python make_tiny_ogb.py DIR            # DIR/hiv/... (hiv/: what OGB's hiv.zip unpacks to)
    python make_tiny_ogb.py DIR --zip Z    # and Z, a zip of it (OGB's download format)
"""
import gzip
import shutil
import sys
from pathlib import Path

import numpy as np


def write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.writelines(",".join(str(v) for v in np.atleast_1d(r)) + "\n" for r in rows)


def make(folder: Path, n: int = 40) -> None:
    rng = np.random.default_rng(0)
    edges, nodes, n_edges, x, bonds, y = [], [], [], [], [], []
    for i in range(n):
        k, ring = int(rng.integers(4, 13)), i % 2 == 1
        src = np.arange(k - (not ring))
        edges += list(zip(src, (src + 1) % k))
        nodes.append(k)
        n_edges.append(len(src))
        x += [[6 + ring, 2] + [0] * 7] * k
        bonds += [[0, 0, int(ring)]] * len(src)
        y.append([int(ring)])
    for name, rows in (("edge", edges), ("num-node-list", nodes), ("num-edge-list", n_edges),
                       ("node-feat", x), ("edge-feat", bonds), ("graph-label", y)):
        write(folder / "raw" / f"{name}.csv.gz", rows)
    ids = dict(zip(("train", "valid", "test"), np.split(rng.permutation(n), [n // 2, 3 * n // 4])))
    for part, part_ids in ids.items():
        write(folder / "split" / "scaffold" / f"{part}.csv.gz", part_ids)
    (folder / "RELEASE_v1.txt").write_text("")


if __name__ == "__main__":
    out = Path(sys.argv[1])
    make(out / "hiv")
    if "--zip" in sys.argv:
        z = sys.argv[sys.argv.index("--zip") + 1]
        shutil.make_archive(z.removesuffix(".zip"), "zip", out, "hiv")
