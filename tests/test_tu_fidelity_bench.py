"""benchmarks/tu_fidelity.py without the authors' code: a fake checkout whose main.py prints
their log lines. What it checks: the published LR timing reaches their command line, their log
is parsed (last test epoch, accuracy, train accuracy), a failing run is one clear error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _bench import benchmark
from conftest import fake_checkout

ROOT = Path(__file__).resolve().parents[1]
bench = benchmark("tu_fidelity")

FAKE_MAIN = '''import sys
args = sys.argv[1:]
if "--fail" in open("mode.txt").read():
    sys.exit(4)
print("ARGS", " ".join(args))
for e in (1, 50):
    print(f"Train set (epoch {e}): [500/500 (100%)]\\tLoss: 0.5 (avg: 0.5), other losses: []"
          "\\tAcc metric: 400/500 (80.00%)")
    print(f"Test set (epoch {e}): Avg loss: 0.6, Acc metric: {430 + e}/613 ({100 * (430 + e) / 613:.2f}%)")
'''


@pytest.fixture
def fake(tmp_path) -> Path:
    return fake_checkout(tmp_path / "authors", FAKE_MAIN, **{"mode.txt": "ok"})


def test_their_run_is_parsed_and_gets_the_published_timing(fake, tmp_path):
    got = bench.run_authors("proteins_weak", 3, fake, tmp_path, tmp_path, 50, tmp_path)
    assert (got["epochs"], got["test_correct"], got["n_test"]) == (50, 480, 613)
    assert got["test_acc"] == pytest.approx(78.30) and got["train_acc"] == 80.0
    log = Path(got["log"]).read_text()
    assert "--lr_decay_step 26,36,46" in log  # drops listed at 25, 35, 45, published timing
    assert "--pool attn_sup_threshold_skip_skip_" in log and "--seed 3" in log


def test_a_failing_run_is_one_clear_error(fake, tmp_path):
    (fake / "mode.txt").write_text("--fail")
    with pytest.raises(RuntimeError, match="the authors' main.py failed \\(exit 4\\)"):
        bench.run_authors("proteins_global", 0, fake, tmp_path, tmp_path, 50, tmp_path)


def test_a_row_compares_one_lr_timing_on_both_sides():
    """Records of both timings in one file (the early ones predate issue 41): a row's mean never
    mixes them and never sets one side's timing against the other's; the newest timing both
    sides ran wins, else the newest any side ran."""
    def rec(row, side, timing, acc, same=True):
        r = {"row": row, "side": side, "seed": 0, "test_acc": acc, "same_split": same}
        return r if timing is None else {**r, "lr_timing": timing}

    rows = [rec("proteins_weak", "ours", None, 1), rec("proteins_weak", "authors", None, 2),
            rec("proteins_weak", "ours", "published", 3), rec("proteins_weak", "authors", "published", 4),
            rec("dd200_weak", "ours", None, 5), rec("dd200_weak", "authors", None, 6),
            rec("dd200_weak", "ours", "published", 7),  # theirs not rerun yet: stays early
            rec("dd300_global_gcn", "ours", "published", 8), rec("dd300_global", "ours", None, 9,
                                                                 same=False)]
    got, timing = bench.comparable(rows)
    assert timing == {"proteins_weak": "published", "dd200_weak": "early",
                      "dd300_global_gcn": "published"}
    assert sorted(r["test_acc"] for r in got) == [3, 4, 5, 6, 8]


def test_a_rerun_skips_only_runs_of_the_published_timing(tmp_path):
    out = tmp_path / "tu.jsonl"
    assert bench.done_runs(out) == set()
    out.write_text("\n".join(json.dumps(r) for r in [
        {"row": "proteins_weak", "side": "ours", "seed": 0},  # before issue 41: early
        {"row": "proteins_weak", "side": "ours", "seed": 1, "lr_timing": "published"},
        {"row": "proteins_weak", "side": "authors", "seed": 1, "lr_timing": "early"}]) + "\n")
    assert bench.done_runs(out) == {("proteins_weak", "ours", 1)}


def test_a_rerun_of_a_seed_counts_once_with_its_last_record():
    """Issue 53: a (side, row, seed, timing) recorded twice (a rerun, e.g. with other flags)
    is one seed in the table, the newest record's."""
    rows = [{"row": "collab_weak", "side": "ours", "seed": s, "test_acc": a, "lr_timing": "published",
             "same_split": True} for s, a in ((0, 60.0), (1, 61.0), (0, 62.0))]
    got, _ = bench.comparable(rows)
    assert sorted((r["seed"], r["test_acc"]) for r in got) == [(0, 62.0), (1, 61.0)]


def test_collab_weak_gets_their_readme_command(fake, tmp_path):
    """COLLAB's weak row: attention after the last layer (`skip_skip_skip`), p at the framework
    init (`--scale None`), ChebyNet K = 3, and `np.int` restored for their degree features."""
    got = bench.run_authors("collab_weak", 1, fake, tmp_path, tmp_path, 50, tmp_path)
    log = Path(got["log"]).read_text()
    assert "--pool attn_sup_threshold_skip_skip_skip_0.001 " in log and "--scale None" in log
    assert "-K 3 --aggregation mean --n_hidden 0" in log and "--init" not in log
    assert "numpy.int = int" in (tmp_path / "numpy_alias" / "sitecustomize.py").read_text()
    proteins = Path(bench.run_authors("proteins_weak", 1, fake, tmp_path, tmp_path, 50, tmp_path)["log"])
    assert "--pool attn_sup_threshold_skip_skip_0.001 " in proteins.read_text()


def test_the_welch_interval_of_a_difference_by_hand():
    """ours - theirs with its 95% Welch interval: a = [1, 2, 3], b = [2, 4]: diff -1, se^2 =
    1/3 + 2/2 = 4/3, df = (4/3)^2 / ((1/3)^2 / 2 + 1^2 / 1) = 1.6842, t(0.975, df) = 5.1762,
    half-width 5.1762 * sqrt(4/3) = 5.977."""
    from scipy import stats

    d, lo, hi, p = bench.welch_interval([1.0, 2.0, 3.0], [2.0, 4.0])
    df = (4 / 3) ** 2 / ((1 / 3) ** 2 / 2 + 1.0)
    half = stats.t.ppf(0.975, df) * (4 / 3) ** 0.5
    assert d == pytest.approx(-1.0) and (lo, hi) == (pytest.approx(-1 - half), pytest.approx(-1 + half))
    assert df == pytest.approx(1.6842, abs=1e-4) and half == pytest.approx(5.977, abs=1e-3)
    assert p == pytest.approx(stats.ttest_ind([1, 2, 3], [2, 4], equal_var=False).pvalue)
