"""benchmarks/adaptive_study.py's cost per round, read from the store: every trial counted in
the round of its seeds, whole across a run stopped and resumed (the log's walls are not)."""

from __future__ import annotations

import json
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


def test_the_simulation_stops_an_undecidable_comparison_as_the_runner_does():
    """Zero spread at the default (start 10, step 2, max 40) and the 13-comparison alpha:
    K = 1 at d = 0, and 1.75^10 < 2 / alpha = 520 <= 1.75^12, so every study stops at 30 seeds,
    open; with a collapse now and then it stops no later than 40 and decides nothing wrong."""
    import numpy as np

    sim = benchmark("adaptive_sim")
    alpha = 0.05 / 13
    zero = sim.error_line(np.zeros((50, sim.MAX)), 0.0, alpha, "betting")
    assert (zero["stopped_early"], zero["mean_seeds"], zero["open_at_max"]) == (1.0, 30.0, 1.0)
    rng = np.random.default_rng(0)
    d = np.where(rng.random((200, sim.MAX)) < 0.05, -0.8, rng.normal(0, 0.01, (200, sim.MAX)))
    got = sim.error_line(d, -0.04, alpha, "betting")
    assert got["false_difference"] == 0 and got["equivalent"] == 0 and got["mean_seeds"] <= 40
    assert "stopped_early" not in sim.error_line(d, -0.04, alpha, "asymptotic") or \
        sim.error_line(d, -0.04, alpha, "asymptotic")["stopped_early"] == 0


TINY = """\
description: tiny adaptive
fixed: {dataset: colors, backbone: gin, epochs: 2}
data: {n_train: 40, n_val: 20, n_test: 30, n_max_large: 30}
variants:
  - {pool_layers: []}
  - {supervision: unsup}
  - {supervision: sup}
seeds: {adaptive: {start: 10, step: 2, max: 20}}
seeds_per_trial: 2
"""


def test_a_replay_decides_the_rounds_again_from_the_store_and_counts_what_ran(tmp_path,
                                                                             monkeypatch):
    """A store holding every round: unsup vs global pool (+80 points) is decided in round 1;
    sup vs unsup (every difference 0) stays open until no seeds up to 20 could decide it
    (14 seeds: 1.75^6 < 2 / (0.05 / 2) = 80 <= 1.75^8), then asks for none. Seed runs: 30 in
    round 1, the two rows' 4 in rounds 2 and 3; trial time: each trial's trial_s once."""
    from ablate.runner.study.expand import build_study
    from analysis.synthetic import trial_record, write_trials

    replay = benchmark("adaptive_replay")
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "adtiny.yaml").write_text(TINY)
    monkeypatch.setenv("ABLATE_STUDIES", str(tmp_path / "studies"))
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    study, _ = build_study("adtiny")
    level = {"": 0.1, "unsup": 0.9, "sup": 0.9}
    rows = [trial_record(trial_id=t.trial_id, seed=s, split="test_largec", trial_s=10.0,
                         accuracy=level[t.config.supervision if t.config.pool_layers else ""],
                         seeds=",".join(map(str, t.config.seeds)))
            for t in study.trials for s in t.config.seeds]
    write_trials(tmp_path / "r", "adtiny", rows)
    got = replay.replay("adtiny", [], tmp_path / "r")
    assert (got["round"], got["seed_runs"], got["seed_runs_max"]) == (3, 38, 60)
    assert got["seed_runs_per_round"] == [30, 4, 4] and got["trial_s"] == 190.0
    by = {(c["row"], c["baseline"]): c for c in got["comparisons"]}
    assert (by[("GIN unsup", "GIN global pool")]["decision"],
            by[("GIN unsup", "GIN global pool")]["round"]) == ("greater", 1)
    sup = by[("GIN sup", "GIN unsup")]
    assert (sup["decision"], sup["stopped"], sup["seeds"]) == ("open", 3, 14)
    # the script: the record beside the store's own decisions, named by the study's name
    doc = {"round": 16, "seed_runs": 60, "comparisons": got["comparisons"]}
    (tmp_path / "r" / "adtiny" / "adaptive.json").write_text(json.dumps(doc))
    assert replay.main([str(tmp_path / "studies" / "adtiny.yaml"), "--max", "20", "--store",
                        str(tmp_path / "r"), "--out", str(tmp_path / "out")]) == 0
    rec = json.loads((tmp_path / "out" / "adtiny_replay.json").read_text())
    assert rec["replayed"]["seed_runs"] == 38 and rec["recorded"]["seed_runs"] == 60
