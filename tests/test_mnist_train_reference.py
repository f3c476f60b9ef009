"""benchmarks/mnist_train_reference.py without the real data or the authors' code: a fake
checkout whose main.py prints their log lines and saves checkpoints as theirs does. What it
checks: the published LR timing reaches their command line, chunks resume from the last
checkpoint (a stopped run continues, nothing repeats), the records and the log parsing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _bench import benchmark
from conftest import fake_checkout

ROOT = Path(__file__).resolve().parents[1]
bench = benchmark("mnist_train_reference")
their = benchmark("mnist_authors")  # the authors' side of it

FAKE_MAIN = '''import argparse, os, sys
ap = argparse.ArgumentParser()
ap.add_argument("--epochs", type=int)
ap.add_argument("--seed", type=int)
ap.add_argument("--results")
ap.add_argument("--resume")
ap.add_argument("--lr_decay_step")
args, _ = ap.parse_known_args()
start = int(open(args.resume).read()) + 1 if args.resume else 1
print("ARGS", " ".join(sys.argv[1:]))
if os.environ.get("FAKE_FAIL_AT") == str(args.epochs):
    sys.exit(5)
for e in range(start, args.epochs + 1):
    print(f"Train set (epoch {e}): [60000/60000 (100%)]\\tLoss: 0.1 (avg: {1.0 / e:.4f}), "
          f"other losses: []\\tAcc metric: 1/1 ({50 + e:.2f}%)\\t AttnAUC: []\\t avg sec/iter: 0.01")
    if e == 1 or e == args.epochs:
        with open(f"{args.results}/checkpoint_mnist-75sp_77_epoch{e}_seed{args.seed:07d}.pth.tar", "w") as f:
            f.write(str(e))
        for split, acc in (("test", 90), ("test", 80), ("test", 70)):
            print(f"Test set (epoch {e}): Avg loss: 0.1, Acc metric: 1/1 ({acc + e / 10:.2f}%)")
'''


@pytest.fixture
def fake_authors(tmp_path) -> Path:
    return fake_checkout(tmp_path / "authors", FAKE_MAIN)


def _run(fake_authors, tmp_path, epochs=6, chunk=2):
    steps = their.authors_steps([3, 5], "published")
    # state and work given relative to here, as a user's --out is: their main.py runs elsewhere
    return their.run_authors_chunked("sup", 0, epochs, steps, chunk, fake_authors,
                                     tmp_path / "data", Path("work"), Path("state"))


def test_published_timing_gives_their_code_the_next_epoch():
    assert their.authors_steps([20, 25], "published") == [21, 26]
    assert their.authors_steps([20, 25], "early") == [20, 25]
    cmd = their.authors_cmd("sup", 1, 10, [21, 26], Path("d"), resume=Path("c.pth.tar"))
    assert cmd[cmd.index("--lr_decay_step") + 1] == "21,26"
    assert cmd[cmd.index("--resume") + 1] == "c.pth.tar"


def test_chunks_resume_from_the_last_checkpoint(fake_authors, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "work").mkdir()
    monkeypatch.setenv("FAKE_FAIL_AT", "4")  # the second chunk dies: the run stops there
    with pytest.raises(RuntimeError, match="failed"):
        _run(fake_authors, tmp_path)
    prog = json.loads((tmp_path / "state" / "progress.json").read_text())
    assert prog["done"] == 2 and sorted(prog["curve"]) == ["1", "2"]
    assert (tmp_path / "state" / "checkpoint_epoch2.pth.tar").exists()
    monkeypatch.delenv("FAKE_FAIL_AT")
    got = _run(fake_authors, tmp_path)  # a rerun continues at epoch 3
    assert got["done"] == 6 and sorted(got["curve"], key=int) == ["1", "2", "4", "6"]
    assert got["curve"]["6"] == [90.6, 80.6, 70.6]
    assert [c["epochs"] for c in got["chunks"]] == [[1, 2], [3, 4], [5, 6]]
    assert got["chunks"][1]["train"] == {"3": [0.3333, 53.0], "4": [0.25, 54.0]}
    logs = sorted((tmp_path / "work").glob("authors_*.log"))
    resumed = [p.read_text() for p in logs if "epochs3-4" in p.name][0]
    assert "--resume" in resumed and "checkpoint_epoch2.pth.tar" in resumed
    assert "--lr_decay_step 4,6" in resumed
    assert sorted(p.name for p in (tmp_path / "state").glob("*.pth.tar")) == ["checkpoint_epoch6.pth.tar"]


def test_a_finished_record_is_not_run_again(tmp_path):
    out = tmp_path / "records.jsonl"
    rec = {"side": "authors", "row": "sup", "seed": 2, "epochs_total": 30, "n_train": None,
           "lr_timing": "published", "chunk": 5}
    out.write_text(json.dumps(rec) + "\n" + json.dumps({"side": "ours", "seed": 1, "row": "sup"}) + "\n")
    assert bench._recorded(out) == {("authors", "sup", 2, "sup_e30_nall_published_c5")}


def test_bad_timing_is_refused():
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mnist_train_reference.py"),
                          "--timing", "late"], capture_output=True, text=True)
    assert run.returncode == 2 and "--timing" in run.stderr


# A checkout whose main.py follows the authors' order of random draws (issue 53 item 2):
# reseed at every start, the model's initial draws, the feature statistics over a shuffled
# loader, then per epoch the training draws; at epoch 1 and the last, save_checkpoint and then
# the tests, which draw too. Names bound by `from train_test import *`, as in theirs.
FAKE_DRAWS_MAIN = '''import argparse
import torch
from train_test import *
ap = argparse.ArgumentParser()
for a in ("--epochs", "--seed"):
    ap.add_argument(a, type=int)
ap.add_argument("--results")
ap.add_argument("--resume")
args, _ = ap.parse_known_args()
args.dataset, args.experiment_ID = "mnist-75sp", "000077"
torch.manual_seed(args.seed)
w = torch.randn(4)
start = 1
if args.resume:
    st = torch.load(args.resume)
    w, start = st["w"], st["epoch"] + 1
stats = compute_feature_stats(w)
for epoch in range(start, args.epochs + 1):
    w = train(w, epoch)
    if epoch <= 1 or epoch == args.epochs:
        save_checkpoint(w, None, None, args, epoch)
        torch.rand(3)
        for _ in range(3):
            print(f"Test set (epoch {epoch}): Avg loss: 0.1, Acc metric: 1/1 (50.00%)")
'''
FAKE_DRAWS_TRAIN_TEST = '''import torch
def compute_feature_stats(w):
    return torch.randperm(10)[:3]
def train(w, epoch):
    return w + torch.randn(4)
def save_checkpoint(model, scheduler, optimizer, args, epoch):
    torch.save({"epoch": epoch, "w": model}, "%s/checkpoint_%s_%s_epoch%d_seed%07d.pth.tar" % (
        args.results, args.dataset, args.experiment_ID, epoch, args.seed))
'''


def _final(authors, tmp_path, name, epochs, chunk, exact, key="w"):
    import torch

    state = tmp_path / name
    their.run_authors_chunked("global", 0, epochs, [2, 3], chunk, authors, tmp_path / "data",
                              tmp_path / "work", state, exact=exact,
                              provenance={"git_sha": "abc1234", "git_dirty": ""})
    return torch.load(state / f"checkpoint_epoch{epochs}.pth.tar", weights_only=False)[key]


@pytest.mark.slow
def test_exact_resume_trains_as_one_run_where_their_restarts_replay(tmp_path):
    """Chunks of one epoch with the adapter end on the weights of one uninterrupted run (the
    epoch-1 state is taken after its tests, a middle epoch's at once); without it they do
    not. Each chunk entry names the commit that ran it."""
    import torch

    authors = fake_checkout(tmp_path / "authors", FAKE_DRAWS_MAIN, **{"train_test.py": FAKE_DRAWS_TRAIN_TEST})
    (tmp_path / "work").mkdir()
    whole = _final(authors, tmp_path, "whole", 3, 3, exact=False)
    assert torch.equal(_final(authors, tmp_path, "exact", 3, 1, exact=True), whole)
    prog = json.loads((tmp_path / "exact" / "progress.json").read_text())
    assert [c["epochs"] for c in prog["chunks"]] == [[1, 1], [2, 2], [3, 3]]
    assert all(c["git_sha"] == "abc1234" and c["git_dirty"] == "" for c in prog["chunks"])
    assert sorted(p.name for p in (tmp_path / "exact").glob("checkpoint_*")) == [
        "checkpoint_epoch3.pth.tar", "checkpoint_epoch3.pth.tar.rng.pt"]
    assert not torch.equal(_final(authors, tmp_path, "replay", 3, 1, exact=False), whole)


def test_exact_resume_refuses_a_resume_without_its_state(tmp_path):
    """A checkpoint with no saved generator state is not silently resumed as a replay."""
    authors = fake_checkout(tmp_path / "authors", FAKE_DRAWS_MAIN, **{"train_test.py": FAKE_DRAWS_TRAIN_TEST})
    (tmp_path / "work").mkdir()
    _final(authors, tmp_path, "s", 1, 1, exact=False)
    with pytest.raises(RuntimeError, match="failed"):
        _final(authors, tmp_path, "s", 2, 1, exact=True)
    log = (tmp_path / "work" / "authors_s_epochs2-2.log").read_text()
    assert "no generator state beside" in log


def test_exact_resume_and_every_epoch_are_refused_together(tmp_path):
    with pytest.raises(ValueError, match="every-epoch"):
        their.run_authors_chunked("sup", 0, 2, [2], 1, tmp_path, tmp_path, tmp_path, tmp_path,
                                  every_epoch=True, exact=True)


def test_run_keys_keep_replayed_records_apart_from_exact_ones(tmp_path):
    out = tmp_path / "records.jsonl"
    base = {"side": "authors", "row": "global", "seed": 0, "epochs_total": 30, "n_train": None,
            "lr_timing": "published", "chunk": 5}
    out.write_text(json.dumps(base) + "\n" + json.dumps({**base, "resume": "exact", "seed": 1}) + "\n")
    assert bench._recorded(out) == {("authors", "global", 0, "global_e30_nall_published_c5"),
                                    ("authors", "global", 1, "global_e30_nall_published_c5_exact")}


AUTHORS = os.environ.get("ABLATE_AUTHORS_CHECKOUT")


@pytest.mark.slow
@pytest.mark.skipif(not AUTHORS or not (Path(AUTHORS) / "main.py").is_file(),
                    reason="set ABLATE_AUTHORS_CHECKOUT to a checkout of bknyaz/graph_attention_pool")
def test_their_main_py_in_exact_chunks_ends_on_the_uninterrupted_weights(tmp_path):
    """Their unmodified main.py on tiny graphs (96 training graphs, 4 epochs, LR drops at 2 and
    3): chunks of one epoch with the adapter give bit-identical final weights to one run;
    chunks of two without it (their code as is) do not."""
    import torch

    _write_tiny_mnist75sp(tmp_path / "data")
    (tmp_path / "work").mkdir()

    def final(name: str, chunk: int, exact: bool) -> dict:
        their.run_authors_chunked("sup", 0, 4, [2, 3], chunk, Path(AUTHORS), tmp_path / "data",
                                  tmp_path / "work", tmp_path / name, exact=exact)
        return torch.load(tmp_path / name / "checkpoint_epoch4.pth.tar", weights_only=False)["state_dict"]

    whole = final("whole", 4, False)
    exact = final("exact", 1, True)
    replay = final("replay", 2, False)
    assert whole.keys() == exact.keys()
    assert all(torch.equal(whole[k], exact[k]) for k in whole)
    assert not all(torch.equal(whole[k], replay[k]) for k in whole)


def _write_tiny_mnist75sp(folder: Path, n_train: int = 96, n_test: int = 100) -> None:
    """Random superpixel graphs in their MNIST75sp files (labels, then per image intensities
    (N, 1), centres (N, 2) in pixels, order); test graphs of 75 nodes, as their noise adds to
    the padded batch."""
    import pickle

    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    folder.mkdir(parents=True)
    for split, n in (("train", n_train), ("test", n_test)):
        graphs = []
        for _ in range(n):
            k = 75 if split == "test" else int(rng.integers(20, 40))
            x = np.where(rng.random((k, 1)) < 0.5, 0, rng.random((k, 1))).astype(np.float32)
            graphs.append((x, (rng.random((k, 2)) * 28).astype(np.float32), np.arange(k)))
        with open(folder / f"mnist_75sp_{split}.pkl", "wb") as f:
            pickle.dump((rng.integers(0, 10, n).astype(np.int32), graphs), f, protocol=4)
    torch.save(torch.from_numpy(rng.standard_normal((n_test, 75)).astype(np.float32)),
               folder / "mnist_75sp_noise.pt")
    torch.save(torch.from_numpy(rng.standard_normal((n_test, 75, 3)).astype(np.float32)),
               folder / "mnist_75sp_color_noise.pt")
