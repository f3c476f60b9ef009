"""The real PROTEINS and D&D files (shared/fixtures/tu), fetched through a mirror on 127.0.0.1.

What a user's first `study=tu` does with a mirror (`data.url=`, checksums through
$ABLATE_DATA_CHECKSUMS): download, check, read, split. The counts are the public ones
(SPEC section 1, the fixtures' README); the splits are the authors' rule
(`graphdata.DataReader.split_ids_shape`), pinned by ids their own function printed for these
files. No accuracy here: docs/fidelity.md and benchmarks/tu_fidelity.py hold those.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_download import Server

from ablate.data import dataset_recipe_hash, download, load_graphsets, tu
from ablate.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT.parent / "shared" / "fixtures" / "tu"
pytestmark = pytest.mark.skipif(not (FIXTURES / "DD.zip").is_file(),
                                reason="shared/fixtures/tu (the real TU files) is not beside this checkout")


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """The fixture zips served from 127.0.0.1, their sums through $ABLATE_DATA_CHECKSUMS, an
    empty dataset cache: the module's first load downloads."""
    server = Server({n: (FIXTURES / n).read_bytes() for n in ("PROTEINS.zip", "DD.zip")})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ABLATE_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.setenv(download.ENV_CHECKSUMS, str(FIXTURES / "checksums.json"))
        mp.delenv(download.ENV_ALLOW, raising=False)
        yield server
    server.close()


def _load(mirror: Server, name: str, **params):
    return load_graphsets(name, url=mirror.url, **params)


def test_the_real_files_arrive_through_the_mirror_with_their_public_counts(mirror):
    p = _load(mirror, "proteins", final=True)
    d = _load(mirror, "dd", final=True)
    assert sorted(mirror.gets) == ["/base/DD.zip", "/base/PROTEINS.zip"]
    for splits, graphs, nodes, edges, classes, channels, largest in (
            (p, 1113, 43_471, 162_088, [663, 450], 3, 620),
            (d, 1178, 334_925, 1_686_092, [691, 487], 89, 5_748)):
        every = [splits["train"], splits["test_large"]]  # final: train holds val; test holds the rest
        assert sum(len(s) for s in every) == graphs
        assert sum(int(s.num_nodes.sum()) for s in every) == nodes
        assert sum(s.edge_index.shape[1] for s in every) == edges  # both directions
        y = np.concatenate([s.y for s in every])
        assert np.bincount(y).tolist() == classes
        assert max(int(s.num_nodes.max()) for s in every) == largest
        assert splits["train"].num_features == channels  # D&D: labels 1..89 one-hot (82 occur)
    _load(mirror, "proteins", final=True)
    assert len(mirror.gets) == 2  # the prepared cache: no second download


@pytest.mark.parametrize("name,params,n_train,n_test,n_small_left", [
    ("proteins", {}, 500, 613, 48),              # 548 graphs with N <= 25
    ("dd", {}, 462, 716, 0),                     # D&D-200: all 462 small graphs train
    ("dd", {"max_train_nodes": 300}, 500, 678, 240),   # D&D-300: 500 of 740
    ("dd", {"split": "earlier", "max_train_nodes": 300}, 462, 716, 278),  # the rule before
])
def test_split_sizes(mirror, name, params, n_train, n_test, n_small_left):
    s = _load(mirror, name, final=True, **params)
    assert len(s["train"]) == n_train and len(s["test_large"]) == n_test
    assert len(s.get("test_orig", ())) == n_small_left


@pytest.mark.parametrize("name,max_nodes,seed,first", [
    # the first train/val ids of the authors' DataReader.split_ids_shape (their checkout,
    # RandomState(seed_data)) on these files, printed by their function
    ("PROTEINS", 25, 111, [217, 1015, 940, 812, 1049, 445, 675, 1104]),
    ("DD", 300, 0, [421, 405, 31, 62, 1113, 1111, 641, 1143]),
    ("DD", 200, 5, [380, 794, 226, 697, 928, 826, 211, 849]),
])
def test_the_split_is_the_authors_graph_for_graph(mirror, name, max_nodes, seed, first):
    _load(mirror, name.lower(), final=True)  # fetched into the cache's data folder
    folder = download.data_folder(None) / name
    sizes = tu.read_tu(name, str(folder)).num_nodes
    chosen, test = tu.split_ids(sizes, max_nodes, seed, name=name)
    assert chosen[:8].tolist() == first
    assert len(np.intersect1d(chosen, test)) == 0 and len(chosen) + len(test) == len(sizes)


def test_the_earlier_rule_keeps_its_recipe_hash_and_the_default_is_new():
    earlier = {"final": True, "split_seed": 3, "split": "earlier"}
    assert dataset_recipe_hash("dd", earlier) == "366100ae428f8666"  # the hash before issue 33
    assert dataset_recipe_hash("dd", {**earlier, "n_train_val": 462}) == "366100ae428f8666"
    assert dataset_recipe_hash("dd", {"final": True, "split_seed": 3}) != "366100ae428f8666"


@pytest.mark.parametrize("params,words", [
    ({"max_train_nodes": 3}, "no graph with at most max_train_nodes=3"),
    ({"max_train_nodes": 25, "n_train_val": 600}, "asks for more training graphs"),
    ({"max_train_nodes": 10_000, "n_train_val": 1113}, "leaves no test graph"),
    ({"split": "sorted"}, "split"),
])
def test_bad_splits_are_refused_in_one_line(mirror, params, words):
    with pytest.raises(ConfigError, match=words) as err:
        _load(mirror, "proteins", **params)
    assert "\n" not in str(err.value)


def test_a_split_with_no_test_graph_exits_2_before_ray(mirror, tmp_path):
    """The CLI on the real files: one line, exit 2, no Ray started, nothing stored."""
    _load(mirror, "proteins", final=True)
    folder = download.data_folder(None)
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "ablate.run", "study=tu", f"data.path={folder}", "dataset=proteins",
         "data.max_train_nodes=10000", "data.n_train_val=1113", "seeds=[0]", f"results_dir={results}"],
        capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "leaves no test graph" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr and "Ray" not in proc.stdout + proc.stderr.replace(errors[0], "")
    assert not any(results.rglob("*.parquet"))
