"""Adaptive seeds (issue 43): options, bad input, rounds, decisions and their replay.

The statistics (coverage, error rates against the naive rule) are tested in
tests/test_sequences.py; here: how a study uses them.
"""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pandas as pd
import pytest

from ablate.errors import ConfigError
from ablate.run import main
from ablate.runner.plan import adaptive as ad
from ablate.runner.study.expand import build_study

TINY = """\
description: tiny adaptive
fixed: {{dataset: colors, backbone: gin, epochs: 2}}
data: {{n_train: 40, n_val: 20, n_test: 30, n_max_large: 30}}
variants:
  - {{pool_layers: []}}
  - {{supervision: unsup}}
  - {{supervision: sup}}
seeds: {seeds}
seeds_per_trial: 2
"""


@pytest.fixture
def studies(tmp_path, monkeypatch):
    folder = tmp_path / "studies"
    folder.mkdir()
    monkeypatch.setenv("ABLATE_STUDIES", str(folder))
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))

    def write(seeds: str, name: str = "adtiny") -> str:
        (folder / f"{name}.yaml").write_text(TINY.format(seeds=seeds))
        return name
    return write


def test_defaults_and_rounds():
    a = ad.parse_adaptive("adaptive")
    assert (a.start, a.step, a.max, a.alpha, a.sequence) == (10, 2, 30, 0.05, "asymptotic")
    assert a.round_seeds(1) == list(range(10)) and a.round_seeds(2) == [10, 11]
    assert a.rounds == 11 and a.round_seeds(11) == [28, 29]
    b = ad.parse_adaptive({"adaptive": {"start": 3, "step": 2, "max": 8, "split": "test_large"}})
    assert [b.round_seeds(r) for r in range(1, b.rounds + 1)] == [[0, 1, 2], [3, 4], [5, 6], [7]]
    assert b.split == ("test_large",)


@pytest.mark.parametrize("opts, words", [
    ({"start": 1}, "start must be an integer >= 2"), ({"step": 0}, "step must be an integer >= 1"),
    ({"start": 5, "max": 4}, "max (4) must be >= start (5)"), ({"alpha": 1.5}, "alpha must be in (0, 1)"),
    ({"alpha": 0}, "alpha must be in (0, 1)"), ({"metric": "loss"}, "metric must be one of"),
    ({"sequence": "naive"}, "sequence must be one of"), ({"maxx": 3}, "unknown key(s) ['maxx']"),
])
def test_bad_options_are_one_line(opts, words):
    with pytest.raises(ConfigError) as e:
        ad.parse_adaptive({"adaptive": opts})
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("seeds, words", [
    ("{adaptive: {start: 1}}", "start must be an integer >= 2"),
    ("{adaptive: {split: test_noisy}}", "dataset colors produces"),
])
def test_bad_options_exit_2_before_ray(studies, capsys, tmp_path, seeds, words):
    import ray

    name = studies(seeds)
    assert main([f"study={name}", "dry_run=true", f"results_dir={tmp_path / 'r'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and words in err and "\n" not in err
    assert not ray.is_initialized()


def test_a_study_with_nothing_to_compare_is_refused(studies, tmp_path, capsys):
    folder = tmp_path / "studies"
    (folder / "lonely.yaml").write_text(TINY.format(seeds="adaptive").replace(
        "  - {pool_layers: []}\n  - {supervision: unsup}\n", ""))
    assert main(["study=lonely", "dry_run=true", f"results_dir={tmp_path / 'r'}"]) == 2
    assert "adaptive needs rows to compare" in capsys.readouterr().err


def test_the_dry_run_shows_round_one_and_the_most_it_can_cost(studies, tmp_path, capsys):
    name = studies("{adaptive: {start: 2, step: 1, max: 4}}")
    assert main([f"study={name}", "dry_run=true", f"results_dir={tmp_path / 'r'}"]) == 0
    out = capsys.readouterr().out
    assert "9 trials (0 done, 9 to run), 12 seed runs" in out  # 3 rows x 4 seeds, at most
    assert "round 1 trains seeds 0-1 of every row (3 trials)" in out


def test_rows_comparisons_and_trials_per_round(studies):
    study, _ = build_study(studies("{adaptive: {start: 2, step: 1, max: 4}}"))
    plan = ad.plan_rows(study.trials)
    assert sorted(set(plan.row_of.values())) == ["GIN global pool", "GIN sup", "GIN unsup"]
    assert sorted((r, b) for r, b, _ in plan.comparisons) == [
        ("GIN sup", "GIN unsup"), ("GIN unsup", "GIN global pool")]
    chunks = sorted({t.config.seeds for t in study.trials})
    assert chunks == [(0, 1), (2,), (3,)]  # packed within a round, never across rounds


def _values(diffs: dict[str, float], n: int, rng) -> pd.DataFrame:
    rows = []
    for row, shift in diffs.items():
        for s in range(n):
            rows.append({"row": row, "dataset": "colors", "split": "test_largec", "seed": s,
                         "value": float(np.clip(0.6 + shift + rng.normal(0, 0.03), 0, 1))})
    return pd.DataFrame(rows)


def test_decisions_stop_decided_rows_and_replay_the_same():
    """A clear difference (30 points) is decided by the first look the sequence allows and its
    rows stop, while a null comparison stays open; deciding again from the same store gives
    the same decisions round by round (what a rerun does)."""
    a = ad.AdaptiveSeeds(start=10, step=2, max=20, equivalence=0.001)
    plan = ad.PlanRows({}, [("B", "A", "x"), ("C", "A", "y")],
                       {"A": ["colors"], "B": ["colors"], "C": ["colors"]})
    values = _values({"A": 0.0, "B": 0.3, "C": 0.0}, 20, np.random.default_rng(0))

    def replay():
        dec = ad.initial_decisions(a, plan)
        seen = []
        for r in range(1, a.rounds + 1):
            upto = max(a.round_seeds(r)) + 1
            ad.decide_round(a, plan, values, upto, r, dec)
            seen.append(sorted(ad.active_rows(dec)))
        return dec, seen

    dec, seen = replay()
    b_vs_a = dec[("B", "A", "colors", "test_largec")]
    c_vs_a = dec[("C", "A", "colors", "test_largec")]
    assert b_vs_a.decision == "greater" and b_vs_a.round == 1 and b_vs_a.seeds == 10
    assert c_vs_a.decision in ("open", "equivalent") and c_vs_a.decision != "greater"
    assert seen[0] == ["A", "C"]  # B stops after round 1; A stays for its open comparison
    again, seen2 = replay()
    assert seen2 == seen and [d.decision for d in again.values()] == [d.decision for d in dec.values()]
    assert c_vs_a.at == list(range(10, 21, 2)) and len(c_vs_a.lo) == len(c_vs_a.at)


@pytest.mark.slow
def test_an_adaptive_study_runs_in_rounds_and_a_rerun_replays_them(studies, tmp_path, capsys):
    """Through the CLI on an embedded Ray: rounds of seeds, the store holding every round's
    seeds of every row still compared, the decisions file, and a rerun that skips it all."""
    name = studies("{adaptive: {start: 2, step: 1, max: 4, equivalence: 0.05}}")
    res = tmp_path / "r"
    assert main([f"study={name}", f"results_dir={res}", "progress=none"]) == 0
    err = capsys.readouterr().err
    assert "round 1: seed(s) 0-1 for 3 of 3 rows" in err and "round 3: seed(s) 3" in err
    doc = json.loads((res / name / ad.DECISIONS_FILE).read_text())
    assert doc["round"] == 3 and len(doc["comparisons"]) == 2
    for c in doc["comparisons"]:  # the asymptotic sequence says nothing before 10 seeds
        assert c["decision"] == "open" and c["at"] == [2, 3, 4] and c["seeds"] == 4
    from ablate import read_trials

    df = read_trials(str(res), name)
    assert sorted(df["seed"].unique()) == [0, 1, 2, 3]
    assert main([f"study={name}", f"results_dir={res}", "progress=none"]) == 0
    out = capsys.readouterr()
    assert "9 skipped (already done)" in out.out
    assert json.loads((res / name / ad.DECISIONS_FILE).read_text())["comparisons"] == doc["comparisons"]


def test_docstring_example_parses():
    text = textwrap.dedent("""\
        seeds:
          adaptive: {start: 3, step: 2, max: 30, alpha: 0.05, equivalence: 0.01,
                     metric: accuracy, split: test_large}
        """)
    import yaml

    a = ad.parse_adaptive(yaml.safe_load(text)["seeds"])
    assert (a.start, a.split) == (3, ("test_large",))


def test_the_report_shows_each_decision_and_the_methods(tmp_path):
    from analysis.report import write_report
    from analysis.synthetic import trial_record, write_trials

    rows = [trial_record(trial_id=f"t{v}{s}", seed=s, seeds=str(s), split="test_largec",
                         dataset="colors", pool_layers=pl, supervision=sup, accuracy=acc)
            for v, (pl, sup, acc) in enumerate([("", "unsup", 0.3), ("1", "sup", 0.8)])
            for s in range(12)]
    write_trials(tmp_path / "res", "ad", rows)
    a = ad.AdaptiveSeeds(start=10, step=2, max=12)
    d = ad.Decision("GIN sup", "GIN global pool", "pool_layers", "colors", "test_largec",
                    seeds=10, decision="greater", round=1, lo=[0.4], hi=[0.6], at=[10])
    ad.write_decisions(tmp_path / "res" / "ad" / ad.DECISIONS_FILE, a, {d.key: d}, 1, 20, 24)
    write_report(tmp_path / "res", tmp_path / "out", figures=True)
    md = (tmp_path / "out" / "tables" / "ad__adaptive.md").read_text()
    assert "| GIN sup | GIN global pool | pool_layers | COLORS / test_largec | higher than its " \
           "baseline | 1 | 10 | [+40.0, +60.0] points |" in md
    assert "Bonferroni" in md and "asymptotic confidence sequence" in md and "4 saved" in md
    assert (tmp_path / "out" / "figures" / "ad__adaptive.png").exists()
