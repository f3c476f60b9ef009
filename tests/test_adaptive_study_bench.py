"""benchmarks/adaptive_study.py's cost per round, read from the store: every trial counted in
the round of its seeds, whole across a run stopped and resumed (the log's walls are not)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from _bench import benchmark

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
bench = benchmark("adaptive_study")


def _trial(folder: Path, tid: str, seeds: list[int], trial_s: float, start: float,
           status: str = "ok") -> None:
    rows = [{"trial_id": tid, "seed": s, "split": sp, "status": status, "trial_s": trial_s,
             "started_at": start, "finished_at": start + trial_s, "accuracy": 0.5}
            for s in seeds for sp in ("val", "test_large")]
    pd.DataFrame(rows).to_parquet(folder / f"{tid}.parquet")


def test_round_costs_count_each_trial_once_in_the_round_of_its_seeds(tmp_path):
    trials = tmp_path / "study" / "trials"
    trials.mkdir(parents=True)
    _trial(trials, "a", list(range(0, 5)), 100.0, 1000.0)  # round 1 = seeds 0-9, two packs
    _trial(trials, "b", list(range(5, 10)), 120.0, 1100.0)
    _trial(trials, "c", [10, 11], 30.0, 5000.0)  # round 2 = seeds 10-11 (a later session)
    _trial(trials, "d", [12, 13], 40.0, 6000.0, status="error")  # round 3, failed
    options = {"start": 10, "step": 2, "max": 14, "alpha": 0.05, "equivalence": 0.01,
               "metric": "accuracy", "split": [], "sequence": "asymptotic"}
    got = bench.round_costs("study", tmp_path, options)
    assert got == [
        {"round": 1, "trials": 2, "failed": 0, "seed_runs": 10, "trial_s": 220.0, "span_s": 220.0},
        {"round": 2, "trials": 1, "failed": 0, "seed_runs": 2, "trial_s": 30.0, "span_s": 30.0},
        {"round": 3, "trials": 1, "failed": 1, "seed_runs": 2, "trial_s": 40.0, "span_s": 40.0}]
    assert bench.round_costs("nothing", tmp_path, options) == []


def test_row_spreads_are_each_rows_seed_statistics(monkeypatch):
    """What the simulation's seed spreads are taken from: per row, dataset and split, the
    count, mean and sample std of the values the comparisons read."""
    from ablate.runner.plan import adaptive as ad

    values = pd.DataFrame({"row": ["a"] * 3 + ["b"], "dataset": "colors", "split": "test_largec",
                           "seed": [0, 1, 2, 0], "value": [0.1, 0.2, 0.3, 0.5]})
    monkeypatch.setattr(ad, "store_values", lambda *a: values)
    got = bench.row_spreads("supervision", Path("unused"), 20)
    assert got == [{"row": "a", "dataset": "colors", "split": "test_largec", "seeds": 3,
                    "mean": 0.2, "std": 0.1},
                   {"row": "b", "dataset": "colors", "split": "test_largec", "seeds": 1,
                    "mean": 0.5, "std": None}]


def test_the_simulated_spreads_are_the_kept_records():
    """benchmarks/adaptive_sim.py's seed spreads are measured ones: each equals the sample std
    its source names, read from the committed record."""
    import json
    import statistics

    sim = benchmark("adaptive_sim")
    results = ROOT / "benchmarks" / "results"
    rec = json.loads((results / "cpu-2026-11-27-adaptive" / "supervision.json").read_text())
    colors = [r for r in rec["row_spreads"] if r["row"] == "ChebyGIN (ref. script) global pool"
              and r["split"] == "test_largec"]
    assert len(colors) == 1 and colors[0]["seeds"] == 20
    assert round(colors[0]["std"], 3) == sim.SPREADS["COLORS global-pool LARGE-C"]
    lines = (results / "cpu-2026-11-27-mnist-train-reference" / "mnist_train_reference.jsonl")
    noisy = [r["curve"]["30"][1] / 100 for r in map(json.loads, lines.read_text().splitlines())
             if r["side"] == "ours" and r["row"] == "sup" and r.get("n_train") == 9984
             and not r.get("set") and "30" in r["curve"]]
    assert len(noisy) == 3 and round(statistics.stdev(noisy), 3) == sim.SPREADS["MNIST-75SP NOISY"]
