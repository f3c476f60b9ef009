"""The adaptive-seed runs of benchmarks/results/cpu-2026-11-27-adaptive/ were decided by the
asymptotic sequence, the default before issue 54; docs/performance.md says so wherever it reads
them, and its claim about today's default rests on the simulation record.

Their "equivalent" decisions (the ground-truth rows of study=supervision, seven TRIANGLES pairs
of study=smoke) came from an interval of [0, 0]: zero spread, which the default betting sequence
never calls equivalent. The docs once read the ground-truth one as a finding.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from _bench import benchmark

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "benchmarks" / "results" / "cpu-2026-11-27-adaptive"
SIM = ROOT / "benchmarks" / "results" / "cpu-2026-12-02-adaptive-sim" / "simulation.json"
GT = ("ChebyGIN (ref. script) + GT attention", "GIN + GT attention")


def _tables():
    return benchmark("tables")


def test_the_records_are_the_asymptotic_sequences_and_their_equivalents_zero_spread():
    sup = json.loads((RUNS / "supervision.json").read_text())["adaptive"]
    assert sup["options"]["sequence"] == "asymptotic"
    [gt] = [c for c in sup["comparisons"] if (c["row"], c["baseline"]) == GT]
    assert (gt["decision"], gt["round"], gt["lo"], gt["hi"]) == ("equivalent", 1, [0.0], [0.0])
    words = _tables().tables_adaptive._adaptive_sequence
    assert "Decided by the `asymptotic` sequence" in words(sup)
    assert "1 'equivalent' came from an interval of [0, 0]" in words(sup)
    smoke = json.loads((RUNS / "smoke.json").read_text())["adaptive"]
    assert "7 'equivalent' came from an interval of [0, 0]" in words(smoke)
    today = {**sup, "options": {**sup["options"], "sequence": "betting"}}
    assert words(today).endswith("today's default.")


def test_the_default_never_calls_zero_spread_equivalent():
    """The simulation record's zero-spread line (the docs' source), and the sequence itself on
    the ground-truth pair's differences: 0 at each of 10, then 20 seeds, alpha 0.05 / 13."""
    from ablate.runner.plan import adaptive as ad

    lines = [e for e in json.loads(SIM.read_text())["errors"] if e["scenario"] == "zero_spread"]
    assert len(lines) == 2
    for e in lines:
        assert e["rules"]["betting"]["equivalent"] == 0.0
        assert e["rules"]["betting"]["open_at_max"] == 1.0
    opts = ad.AdaptiveSeeds(start=10, step=2, max=20)
    for n in (10, 20):
        assert ad.sequence_decision(opts, np.zeros(n), 0.05 / 13)[2] == "open"


def test_performance_md_reads_the_ground_truth_equivalent_as_the_old_sequences():
    text = (ROOT / "docs" / "performance.md").read_text()
    reading = text[text.index("Reading `study=supervision`"):text.index(
        "<!-- generated:adaptive_study -->")]
    assert "a finding no test of a difference makes" not in reading
    assert "measurement of the asymptotic" in reading and "not a finding" in reading
    assert "cpu-2026-12-02-adaptive-sim/simulation.json" in reading
