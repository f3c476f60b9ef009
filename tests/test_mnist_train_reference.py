"""benchmarks/mnist_train_reference.py without the real data or the authors' code: a fake
checkout whose main.py prints their log lines and saves checkpoints as theirs does. What it
checks: the published LR timing reaches their command line, chunks resume from the last
checkpoint (a stopped run continues, nothing repeats), the records and the log parsing."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import fake_checkout

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "mnist_train_reference", ROOT / "benchmarks" / "mnist_train_reference.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

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
    steps = bench.authors_steps([3, 5], "published")
    # state and work given relative to here, as a user's --out is: their main.py runs elsewhere
    return bench.run_authors_chunked("sup", 0, epochs, steps, chunk, fake_authors,
                                     tmp_path / "data", Path("work"), Path("state"))


def test_published_timing_gives_their_code_the_next_epoch():
    assert bench.authors_steps([20, 25], "published") == [21, 26]
    assert bench.authors_steps([20, 25], "early") == [20, 25]
    cmd = bench.authors_cmd("sup", 1, 10, [21, 26], Path("d"), resume=Path("c.pth.tar"))
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
