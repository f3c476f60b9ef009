"""A tiny TU-format zip named MUTAG (NOT the real MUTAG: 60 rings/paths of 4..14 nodes,
labels 1 / -1, 3 node labels) to exercise the download path offline from 127.0.0.1.
    python make_tiny_tu.py serve/MUTAG.zip"""
import sys
import zipfile

import numpy as np

rng = np.random.default_rng(0)
A, ind, glab, nlab, off = [], [], [], [], 1
for g in range(60):
    k, ring = int(rng.integers(4, 15)), g % 2 == 1
    src = np.arange(k - (not ring))
    for s in src:
        t = (s + 1) % k
        A += [(off + s, off + t), (off + t, off + s)]
    ind += [g + 1] * k
    nlab += list(rng.integers(0, 3, k))
    glab.append(1 if ring else -1)
    off += k
files = {"MUTAG/MUTAG_A.txt": "".join(f"{a}, {b}\n" for a, b in A),
         "MUTAG/MUTAG_graph_indicator.txt": "".join(f"{i}\n" for i in ind),
         "MUTAG/MUTAG_graph_labels.txt": "".join(f"{y}\n" for y in glab),
         "MUTAG/MUTAG_node_labels.txt": "".join(f"{y}\n" for y in nlab)}
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for name, text in files.items():
        z.writestr(name, text)
