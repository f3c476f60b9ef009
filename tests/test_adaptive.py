"""Adaptive seeds (issue 43): options, bad input, rounds, decisions and their replay.

The statistics (coverage, error rates against the naive rule) are tested in
tests/test_sequences.py; here: how a study uses them.
"""

from __future__ import annotations

import json
import textwrap
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from ablate.errors import ConfigError
from ablate.run import main
from ablate.runner.execute.progress import Summary
from ablate.runner.plan import adaptive as ad
from ablate.runner.plan.adaptive_rounds import Rounds
from ablate.runner.study.expand import build_study
from analysis import betting

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


# the same rows on two datasets (as study=smoke: COLORS and TRIANGLES)
TWO = TINY.replace("fixed: {{dataset: colors, backbone: gin, epochs: 2}}",
                   "fixed: {{backbone: gin, epochs: 2}}\ngrid: {{dataset: [colors, triangles]}}")


@pytest.fixture
def studies(tmp_path, monkeypatch):
    folder = tmp_path / "studies"
    folder.mkdir()
    monkeypatch.setenv("ABLATE_STUDIES", str(folder))
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))

    def write(seeds: str, name: str = "adtiny", template: str = TINY, extra: str = "") -> str:
        (folder / f"{name}.yaml").write_text(template.format(seeds=seeds) + extra)
        return name
    return write


def test_defaults_and_rounds():
    a = ad.parse_adaptive("adaptive")
    assert (a.start, a.step, a.max, a.alpha, a.sequence) == (10, 2, 40, 0.05, "betting")
    assert a.round_seeds(1) == list(range(10)) and a.round_seeds(2) == [10, 11]
    assert a.rounds == 16 and a.round_seeds(16) == [38, 39]
    b = ad.parse_adaptive({"adaptive": {"start": 3, "step": 2, "max": 8, "split": "test_large"}})
    assert [b.round_seeds(r) for r in range(1, b.rounds + 1)] == [[0, 1, 2], [3, 4], [5, 6], [7]]
    assert b.split == ("test_large",)


@pytest.mark.parametrize("start, step, max_", [(10, 2, 30), (3, 2, 8), (2, 5, 2), (4, 3, 11)])
def test_the_rounds_are_the_looks_of_the_simulations(start, step, max_):
    """One look schedule: a round ends where `analysis.sequences.looks` looks."""
    from analysis.sequences import looks

    a = ad.AdaptiveSeeds(start=start, step=step, max=max_)
    ends = [a.round_seeds(r)[-1] + 1 for r in range(1, a.rounds + 1)]
    assert ends == looks(start, step, max_).tolist()
    assert sum((a.round_seeds(r) for r in range(1, a.rounds + 1)), []) == list(range(max_))


@pytest.mark.parametrize("opts, words", [
    ({"start": 1}, "start must be an integer >= 2"), ({"step": 0}, "step must be an integer >= 1"),
    ({"start": 5, "max": 4}, "max (4) must be >= start (5)"), ({"alpha": 1.5}, "alpha must be in (0, 1)"),
    ({"alpha": 0}, "alpha must be in (0, 1)"), ({"metric": "loss"}, "metric must be one of"),
    ({"sequence": "naive"}, "sequence must be one of"), ({"maxx": 3}, "unknown key(s) ['maxx']"),
    ({"sequence": "beting"}, "did you mean 'betting'?"),
    ({"sequence": "exact"}, "'exact' is now called 'prpl_eb'"),
    ({"sequence": "asymptotic", "start": 5}, "start (5) is below what sequence asymptotic "
                                             "supports: it says nothing before 10 seeds"),
    ({"equivalence": 0}, "equivalence must be in (0, 1)"),
    ({"equivalence": -0.01}, "equivalence must be in (0, 1)"),
    ({"split": None}, "split must be a split name or a list of them"),
    ({"split": 5}, "split must be a split name or a list of them"),
    ({"split": ["test_large", 5]}, "split must be a split name or a list of them"),
])
def test_bad_options_are_one_line(opts, words):
    with pytest.raises(ConfigError) as e:
        ad.parse_adaptive({"adaptive": opts})
    assert words in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("seeds, words", [
    ("{adaptive: {start: 1}}", "start must be an integer >= 2"),
    ("{adaptive: {split: test_noisy}}", "dataset colors produces"),
    ("{adaptive: {split: ~}}", "split must be a split name or a list of them"),
    # a misspelt split beside a valid one is named, not dropped
    ("{adaptive: {split: [test_largec, test_lrge]}}", "did you mean 'test_large'?"),
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


def test_an_auc_study_leaves_out_rows_without_attention(studies, tmp_path, capsys):
    """metric=auc: a global-pool row has no attention AUC (NaN), so its comparisons are left
    out (not open to max, not in the Bonferroni split) and named; a study where none remain
    is refused before Ray."""
    study, _ = build_study(studies("{adaptive: {metric: auc}}"))
    a = study.spec.adaptive
    plan = ad.plan_rows(study.trials)
    dec = ad.initial_decisions(a, plan)
    assert [k[:2] for k in dec] == [("GIN sup", "GIN unsup")]
    [out] = ad.left_out(a, plan)
    assert (out.row, out.baseline, out.why) == ("GIN unsup", "GIN global pool",
                                                "GIN global pool has no attention layer")
    rounds = Rounds.start(a, study.trials)
    rounds.write(tmp_path / "adaptive.json")
    doc = json.loads((tmp_path / "adaptive.json").read_text())
    assert doc["alpha_per_comparison"] == 0.05 and doc["left_out"][0]["row"] == "GIN unsup"
    folder = tmp_path / "studies"
    (folder / "noauc.yaml").write_text(TINY.format(seeds="{adaptive: {metric: auc}}").replace(
        "  - {supervision: sup}\n", ""))
    assert main(["study=noauc", "dry_run=true", f"results_dir={tmp_path / 'r'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "none of this study's 1 comparison(s) can have it on both rows (GIN global pool " \
           "has no attention layer); use metric=accuracy" in err and "\n" not in err


def test_a_tu_study_has_no_auc_to_compare():
    plan = ad.PlanRows({}, [("B", "A", "x")], {"A": ["proteins"], "B": ["proteins"]},
                       {("A", "proteins"), ("B", "proteins")})
    a = ad.AdaptiveSeeds(metric="auc")
    assert ad.initial_decisions(a, plan) == {}
    assert ad.left_out(a, plan)[0].why == "proteins has no ground-truth attention"
    assert len(ad.initial_decisions(ad.AdaptiveSeeds(), plan)) == 1  # accuracy: compared


def test_the_trial_limit_holds_for_every_round_together(studies, tmp_path, capsys):
    """3 rounds of 3 trials: 9 trials, over a limit of 5 that each round alone is under."""
    name = studies("{adaptive: {start: 2, step: 1, max: 4}}", extra="trial_limit: 5\n")
    assert main([f"study={name}", "dry_run=true", f"results_dir={tmp_path / 'r'}"]) == 2
    err = capsys.readouterr().err
    assert "expands to 9 trials (3 rounds of adaptive seeds up to max=4" in err
    assert "trial_limit=9" in err


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
    """A clear difference (85 points) is decided by the first look the sequence allows and its
    rows stop, while a null comparison stays open until no seeds up to max could decide it
    (then it asks for none: `stopped`); deciding again from the same store gives the same
    decisions round by round (what a rerun does)."""
    a = ad.AdaptiveSeeds(start=10, step=2, max=20, equivalence=0.001)
    plan = ad.PlanRows({}, [("B", "A", "x"), ("C", "A", "y")],
                       {"A": ["colors"], "B": ["colors"], "C": ["colors"]})
    values = _values({"A": -0.5, "B": 0.35, "C": -0.5}, 20, np.random.default_rng(0))

    def replay():
        dec = ad.initial_decisions(a, plan)
        seen = []
        for r in range(1, a.rounds + 1):
            upto = max(a.round_seeds(r)) + 1
            ad.decide_round(a, plan, values, upto, r, dec)
            seen.append(sorted(row for row, _ in ad.active_pairs(dec)))
        return dec, seen

    dec, seen = replay()
    b_vs_a = dec[("B", "A", "colors", "test_largec")]
    c_vs_a = dec[("C", "A", "colors", "test_largec")]
    assert b_vs_a.decision == "greater" and b_vs_a.round == 1 and b_vs_a.seeds == 10
    assert c_vs_a.decision in ("open", "equivalent") and c_vs_a.decision != "greater"
    assert seen[0] == ["A", "C"]  # B stops after round 1; A stays for its open comparison
    again, seen2 = replay()
    assert seen2 == seen and [d.decision for d in again.values()] == [d.decision for d in dec.values()]
    assert c_vs_a.decision == "open" and c_vs_a.stopped > 1
    assert c_vs_a.at == list(range(10, 2 * c_vs_a.stopped + 9, 2)) and len(c_vs_a.lo) == len(c_vs_a.at)
    assert seen[c_vs_a.stopped - 1:] == [[]] * (a.rounds - c_vs_a.stopped + 1)  # nothing more
    x = (values.set_index(["row", "seed"])["value"].unstack(0))
    d = (x["C"] - x["A"]).loc[c_vs_a.order].to_numpy()
    alpha = ad.sequence_alpha(a, 2)
    n = len(c_vs_a.order)  # the look that stopped it could not reach a decision by max ...
    assert not betting.can_still_decide(d, a.max - n, alpha, a.equivalence)
    # ... the look before could
    assert betting.can_still_decide(d[:n - 2], a.max - n + 2, alpha, a.equivalence)


def _on(shifts: dict[tuple[str, str], float], n: int, seed: int = 0) -> pd.DataFrame:
    """Values of (row, dataset) at seeds 0..n-1 on each dataset's default split: 0.6 + shift
    + noise (sd 0.03)."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame([{"row": row, "dataset": ds, "split": ad.DATASET_SPLITS[ds][0],
                          "seed": s, "value": float(np.clip(0.6 + shift + rng.normal(0, 0.03), 0, 1))}
                         for (row, ds), shift in shifts.items() for s in range(n)])


ROWS = ("GIN global pool", "GIN unsup", "GIN sup")
# COLORS: 92 points between each compared pair (decided at once: at alpha 0.05 / 4 the betting
# sequence's capital reaches (1 + 0.75 * 0.92)^10 = 190 > 2 / alpha = 160); TRIANGLES: none
SPLIT_BY_DATASET = {**{(r, "colors"): (-0.55, 0.37, -0.55)[i] for i, r in enumerate(ROWS)},
                    **{(r, "triangles"): 0.0 for r in ROWS}}


def _run_rounds(monkeypatch, tmp_path, study, values, outcomes=()):
    """`run_adaptive` with each round's run stood in for: round r's Summary gets the fields
    `outcomes[r - 1](trials)` returns (every trial ok otherwise); the runs and lines seen."""
    from ablate.runner.execute import driver
    from ablate.runner.execute.rounds import run_adaptive

    runs, lines = [], []

    def run_study(part, results_dir, **kw):
        runs.append(part)
        extra = outcomes[len(runs) - 1](part.trials) if len(runs) <= len(outcomes) else {}
        return Summary(part.name, len(part.trials), ok=len(part.trials) - len(extra.get(
            "failed", [])) - len(extra.get("remaining", [])), **extra)

    monkeypatch.setattr(driver, "run_study", run_study)
    monkeypatch.setattr(ad, "store_values", lambda *a: values)
    summary = run_adaptive(study, str(tmp_path / "r"), say=lines.append)
    return summary, runs, lines


def test_a_row_stops_on_the_datasets_where_it_is_decided(studies, tmp_path, monkeypatch):
    """A row label spans COLORS and TRIANGLES: decided on COLORS after round 1, it gets more
    seeds on TRIANGLES only; plan.json names every round run; the seed runs are counted per
    (row, dataset) once each round has run."""
    study, _ = build_study(studies("{adaptive: {start: 10, step: 2, max: 14, "
                                   "sequence: asymptotic}}", template=TWO))
    summary, runs, lines = _run_rounds(monkeypatch, tmp_path, study, _on(SPLIT_BY_DATASET, 14))
    assert len(runs) == 3 and summary.exit_code == 0
    assert {t.config.dataset for t in runs[0].trials} == {"colors", "triangles"}
    for part in runs[1:]:
        assert {t.config.dataset for t in part.trials} == {"triangles"}
    assert runs[2].planned == [t.trial_id for part in runs for t in part.trials]
    assert "round 2: seed(s) 10-11 for 3 of 6 (row, dataset) pairs" in lines[1]
    doc = json.loads((tmp_path / "r" / study.name / ad.DECISIONS_FILE).read_text())
    assert (doc["seed_runs"], doc["seed_runs_max"], doc["finished"]) == (6 * 10 + 3 * 4, 6 * 14, True)
    assert "72 of 84 seed runs (12 saved)" in lines[-1]


def test_failed_trials_do_not_stop_the_study(studies, tmp_path, monkeypatch):
    """A round whose trials failed after their retries is decided on the seeds the rows share
    and the study goes on to its last round; exit 1 at the end."""
    study, _ = build_study(studies("{adaptive: {start: 10, step: 2, max: 14, sequence: asymptotic}}"))
    first = lambda trials: {"failed": [trials[0].trial_id]}  # noqa: E731
    summary, runs, _ = _run_rounds(monkeypatch, tmp_path, study,
                                   _on({(r, "colors"): 0.0 for r in ROWS}, 14), [first])
    assert len(runs) == 3 and summary.exit_code == 1 and len(summary.failed) == 1


def test_an_interrupted_round_stops_the_study_and_saves_nothing_yet(studies, tmp_path,
                                                                     monkeypatch):
    """Round 2 interrupted: the study stops there (a rerun resumes); its seed runs are not
    counted, and the rounds not run are "not run yet", not saved."""
    study, _ = build_study(studies("{adaptive: {start: 10, step: 2, max: 14, sequence: asymptotic}}"))
    stop = lambda trials: {"remaining": [t.trial_id for t in trials], "signal": "SIGINT"}  # noqa: E731
    values = _on({(r, "colors"): 0.0 for r in ROWS}, 14)
    summary, runs, lines = _run_rounds(monkeypatch, tmp_path, study, values, [lambda t: {}, stop])
    assert len(runs) == 2 and summary.exit_code == 130
    doc = json.loads((tmp_path / "r" / study.name / ad.DECISIONS_FILE).read_text())
    assert (doc["round"], doc["seed_runs"], doc["finished"]) == (1, 30, False)
    assert "30 of at most 42 seed runs so far (0 saved, 12 not run yet)" in lines[-1]


def test_verify_plans_the_rounds_the_decisions_called_for(studies, tmp_path, monkeypatch, capsys):
    """Every comparison decided after round 1: round 1 is the whole plan, complete (exit 0),
    not 'incomplete' against every round up to max."""
    from ablate.run import verify
    from ablate.runner.execute.store import Store, StoreCheck

    study, _ = build_study(studies("{adaptive: {start: 10, step: 2, max: 14}}"))
    monkeypatch.setattr(ad, "store_values", lambda *a: _on(
        {k: v for k, v in SPLIT_BY_DATASET.items() if k[1] == "colors"}, 10))
    first = [t for t in study.trials if max(t.config.seeds) < 10]
    status = {t.trial_id: "ok" for t in first}
    monkeypatch.setattr(Store, "inspect", lambda self: StoreCheck(status, [], {}, {}, len(status)))
    assert verify(study, {"results_dir": str(tmp_path / "r")}) == 0
    assert f"{len(first)} of {len(first)} planned trials complete" in capsys.readouterr().out
    del status[first[0].trial_id]  # round 1 not complete: it is what a rerun goes on with
    assert verify(study, {"results_dir": str(tmp_path / "r")}) == 4


def test_the_store_is_read_for_values_or_refused_in_one_line(studies, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    study, _ = build_study(studies("adaptive"))
    plan, a = ad.plan_rows(study.trials), study.spec.adaptive
    assert ad.store_values(a, plan, tmp_path / "r", study.name).empty  # no result file yet
    trials = tmp_path / "r" / study.name / "trials"
    trials.mkdir(parents=True)
    pq.write_table(pa.table({"x": [1]}), trials / "foreign.parquet")
    with pytest.raises(ConfigError) as e:
        ad.store_values(a, plan, tmp_path / "r", study.name)
    assert "foreign.parquet" in str(e.value) and "verify=true" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_split_the_recipe_does_not_make_is_closed_as_absent():
    """TU's test_orig exists only when small graphs are left over: rows with values on the
    dataset but none on the split close the comparison instead of training it to max."""
    a = ad.AdaptiveSeeds(start=10, step=2, max=14, split=("test_large", "test_orig"))
    plan = ad.PlanRows({}, [("B", "A", "x")], {"A": ["proteins"], "B": ["proteins"]})
    dec = ad.initial_decisions(a, plan)
    assert sorted(k[3] for k in dec) == ["test_large", "test_orig"]
    ad.decide_round(a, plan, _on({("A", "proteins"): 0.0, ("B", "proteins"): 0.0}, 10), 10, 1,
                    dec)
    assert dec[("B", "A", "proteins", "test_orig")].decision == "absent"
    assert dec[("B", "A", "proteins", "test_large")].decision != "absent"


def test_run_study_records_the_adaptive_plan(studies, tmp_path):
    """plan.json names what the caller plans (every round run so far), not one round's part."""
    from ablate.runner.execute.driver import run_study
    from ablate.runner.study.expand import Study
    from analysis.synthetic import trial_record, write_trials

    study, _ = build_study(studies("{adaptive: {start: 2, step: 1, max: 4}}"))
    part = [t for t in study.trials if t.config.seeds == (0, 1)]
    write_trials(tmp_path / "r", study.name, [
        trial_record(study=study.name, trial_id=t.trial_id, seed=s, seeds=",".join(map(str, t.config.seeds)))
        for t in part for s in t.config.seeds])
    ids = [t.trial_id for t in study.trials]
    summary = run_study(Study(study.spec, part, planned=ids), str(tmp_path / "r"), progress="none")
    assert summary.skipped == len(part)
    doc = json.loads((tmp_path / "r" / study.name / "plan.json").read_text())
    assert doc["trial_ids"] == ids


def test_the_progress_line_counts_each_round_from_zero():
    import io

    from ablate.runner.execute.progress import Progress

    p = Progress("s", mode="lines", stream=io.StringIO())
    p.trials(3, 0)
    for t in "abc":
        p.start(t)
        p.finish(t, "ok")
    p.retry("d")
    p.trials(2, 0)  # the next round
    assert p.text().startswith("[s] 0/2 finished: 0 ok, 0 failed, 0 running")
    p.start("e")
    p.finish("e", "ok")
    p.start("f")
    p.finish("f", "ok")
    assert "2/2 finished" in p.text() and "-" not in p.text().rsplit("ETA", 1)[1]


def test_the_splits_are_what_the_generators_make(tmp_path):
    """DATASET_SPLITS: the splits every dataset always makes, on small data; TU's test_orig
    only with small graphs left over (CONDITIONAL_SPLITS). NO_GROUND_TRUTH: no gt > 0."""
    from test_data_real import _blob_images, _write_mnist, _write_tu

    from ablate.data import DATASETS, colors, mnist, triangles, tu

    imgs, labels = _blob_images(12, seed=0)
    _write_mnist(tmp_path / "mnist", {"train_images": imgs[:8], "train_labels": labels[:8],
                                      "test_images": imgs[8:], "test_labels": labels[8:]}, gz=False)
    for name, labelled in (("PROTEINS", True), ("DD", True), ("COLLAB", False)):
        _write_tu(tmp_path / name, name, node_labels=labelled)
    small = dict(n_train=6, n_val=2, n_test=4)
    made = {"colors": colors.generate(**small, n_max_large=30),
            "triangles": triangles.generate(**small, n_max_large=30),
            "mnist_sp": mnist.generate_mnist(str(tmp_path / "mnist"), n_train=4, n_val=2, n_test=4),
            "digits_sp": mnist.generate_digits(**small)}
    kept = {}  # TU: every small graph trains (no test_orig), and some left over
    for d in ("proteins", "dd", "collab"):
        made[d] = getattr(tu, d)(str(tmp_path), max_train_nodes=25, n_train_val=8, val_fraction=0.25)
        kept[d] = getattr(tu, d)(str(tmp_path), max_train_nodes=10, n_train_val=4, val_fraction=0.25)
    assert set(ad.DATASET_SPLITS) == set(DATASETS)
    for d, splits in made.items():
        tests = {s for s in splits if s.startswith("test")}
        assert tests == set(ad.DATASET_SPLITS[d]), d
        assert {s for s in kept.get(d, splits) if s.startswith("test")} == set(ad.made_splits(d)), d
        assert (d in ad.NO_GROUND_TRUTH) == (not any((gs.gt > 0).any() for gs in splits.values())), d
@pytest.mark.slow
def test_an_adaptive_study_runs_in_rounds_and_a_rerun_replays_them(studies, tmp_path, capsys,
                                                                   monkeypatch):
    """Through the CLI on an embedded Ray: rounds of seeds, the store holding every round's
    seeds of every row still compared, the decisions file, and a rerun that skips it all. One
    Ray serves every round, and is stopped (its session folder removed) at the end."""
    import ray

    from ablate.runner.execute import ray_env
    from ablate.runner.execute.reap import ray_temp_dir

    starts = []
    real_start = ray_env.start_ray
    monkeypatch.setattr(ray_env, "start_ray", lambda *a: starts.append(1) or real_start(*a))
    sessions = set(ray_temp_dir().glob("session_2*"))
    # prpl_eb: a sequence without the betting default's stop for comparisons no seeds left can
    # decide (none can here, at 2-4 seeds), so all three rounds run
    name = studies("{adaptive: {start: 2, step: 1, max: 4, equivalence: 0.05, sequence: prpl_eb}}")
    res = tmp_path / "r"
    assert main([f"study={name}", f"results_dir={res}", "progress=none"]) == 0
    assert len(starts) == 1 and not ray.is_initialized()  # three rounds, one Ray
    assert set(ray_temp_dir().glob("session_2*")) <= sessions
    err = capsys.readouterr().err
    assert "round 1: seed(s) 0-1 for 3 of 3 (row, dataset) pairs" in err
    assert "round 3: seed(s) 3" in err
    doc = json.loads((res / name / ad.DECISIONS_FILE).read_text())
    assert doc["round"] == 3 and len(doc["comparisons"]) == 2 and doc["finished"]
    for c in doc["comparisons"]:  # no exact sequence decides at 2-4 seeds
        assert c["decision"] == "open" and c["at"] == [2, 3, 4] and c["seeds"] == 4
    from ablate import read_trials

    df = read_trials(str(res), name)
    assert sorted(df["seed"].unique()) == [0, 1, 2, 3]
    plan = json.loads((res / name / "plan.json").read_text())["trial_ids"]
    assert sorted(plan) == sorted(t.trial_id for t in build_study(name)[0].trials)
    assert main([f"study={name}", f"results_dir={res}", "progress=none"]) == 0
    out = capsys.readouterr()
    assert "9 skipped (already done)" in out.out
    assert json.loads((res / name / ad.DECISIONS_FILE).read_text())["comparisons"] == doc["comparisons"]
    assert main([f"study={name}", f"results_dir={res}", "verify=true"]) == 0


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
    write_trials(tmp_path / "res", "fixed", rows)
    a = ad.AdaptiveSeeds(start=10, step=2, max=12)
    d = ad.Decision("GIN sup", "GIN global pool", "pool_layers", "colors", "test_largec",
                    seeds=10, decision="greater", round=1, lo=[0.4], hi=[0.6], at=[10])
    trials = [SimpleNamespace(trial_id=f"{v}{s}", config=SimpleNamespace(seeds=(s,), dataset="colors"))
              for v in "ab" for s in range(12)]
    rounds = Rounds(a, trials, ad.PlanRows({}, []), {d.key: d}, [], round=1, seed_runs=20,
                    saved=4)
    rounds.write(tmp_path / "res" / "ad" / ad.DECISIONS_FILE)
    titles = []
    from analysis import figure_style

    save = figure_style.save

    def keep_titles(fig, out, stem):
        titles.extend(ax.get_title() for ax in fig.axes)
        return save(fig, out, stem)

    import unittest.mock

    with unittest.mock.patch.object(figure_style, "save", keep_titles):
        write_report(tmp_path / "res", tmp_path / "out", figures=True)
    md = (tmp_path / "out" / "tables" / "ad__adaptive.md").read_text()
    assert "| GIN sup | GIN global pool | pool_layers | COLORS / test_largec | higher than its " \
           "baseline | 1 | 10 | [+40.0, +60.0] points |" in md
    assert "Bonferroni" in md and "hedged-capital betting confidence sequence" in md
    assert "exact at every number of seeds" in md and "20 of 24 seed runs (4 saved)" in md
    assert (tmp_path / "out" / "figures" / "ad__adaptive.png").exists()
    assert "GIN sup vs GIN global pool\nCOLORS test_largec: greater" in titles
    report = (tmp_path / "out" / "report.md").read_text()
    assert report.count("Adaptive seeds: decisions") == 1  # the fixed-seed study has none
    assert not list((tmp_path / "out" / "tables").glob("fixed__adaptive*"))


def test_a_report_of_a_study_stopped_early_claims_no_saving(tmp_path):
    """Interrupted after round 1 of 2: the seeds of round 2 are not run yet, not saved."""
    from analysis.report import write_report
    from analysis.synthetic import trial_record, write_trials

    write_trials(tmp_path / "res", "ad", [trial_record(trial_id="t0")])
    d = ad.Decision("B", "A", "x", "colors", "test_largec", seeds=10)
    trials = [SimpleNamespace(trial_id=f"{v}{s}", config=SimpleNamespace(seeds=(s,), dataset="colors"))
              for v in "ab" for s in range(12)]
    rounds = Rounds(ad.AdaptiveSeeds(start=10, step=2, max=12), trials, ad.PlanRows({}, []),
                    {d.key: d}, [ad.LeftOut("C", "A", "x", "colors", "A has no attention layer")],
                    round=1, seed_runs=20)
    rounds.write(tmp_path / "res" / "ad" / ad.DECISIONS_FILE)
    write_report(tmp_path / "res", tmp_path / "out", figures=False)
    md = (tmp_path / "out" / "tables" / "ad__adaptive.md").read_text()
    assert "20 of at most 24 seed runs so far (0 saved, 4 not run yet" in md and "saved)" not in md
    assert "Left out (1, not counted in the Bonferroni split): C vs A on COLORS (A has no " \
           "attention layer)" in md


def test_the_report_reads_the_file_the_runner_writes():
    from analysis import adaptive_section

    assert adaptive_section.DECISIONS_FILE == ad.DECISIONS_FILE


def _gap(n: int, drop: set[int] = frozenset(), top: float = 0.9) -> pd.DataFrame:
    """Colors values of TINY's rows at seeds 0..n-1: the global pool at 0.1, unsup and sup at
    `top` (at 0.9: unsup vs global pool +80 points, decided at 10 seeds at alpha 0.05 / 2,
    1.6^10 = 110 >= 80 > 1.6^9; sup vs unsup: 0, open); the unsup row lacks the seeds in
    `drop` (its trial failed)."""
    level = {"GIN global pool": 0.1, "GIN unsup": top, "GIN sup": top}
    return pd.DataFrame([{"row": r, "dataset": "colors", "split": "test_largec", "seed": s,
                          "value": v} for r, v in level.items() for s in range(n)
                         if not (r == "GIN unsup" and s in drop)])


def test_a_retried_failure_counts_in_the_next_round_and_a_rerun_writes_the_same_file(
        studies, tmp_path, monkeypatch):
    """The unsup row's round-1 trial fails: round 1 is open, rounds 2-3 train. The rerun
    retries it (all seeds now in the store) and replays the stored decisions: adaptive.json is
    the same, not rewritten as if the study had decided unsup vs global pool in round 1."""
    study, _ = build_study(studies("{adaptive: {start: 10, step: 2, max: 14}}"))
    failed = [t for t in study.trials if max(t.config.seeds) < 10
              and "unsup" in str(t.config.supervision) and t.config.pool_layers]
    lost = {s for t in failed for s in t.config.seeds}
    fail = lambda trials: {"failed": [t.trial_id for t in failed]}  # noqa: E731
    summary, runs, _ = _run_rounds(monkeypatch, tmp_path, study, _gap(14, lost), [fail])
    path = tmp_path / "r" / study.name / ad.DECISIONS_FILE
    before = path.read_text()
    doc = json.loads(before)
    assert summary.exit_code == 1 and doc["round"] == 3
    _, runs, lines = _run_rounds(monkeypatch, tmp_path, study, _gap(14))
    assert path.read_text() == before
    assert "replaying the stored decisions of round(s) 1-3" in lines[0]
    assert len(runs) == 3  # the same rounds, each rerun (its stored trials skipped by the store)


def test_a_retried_seed_joins_the_sequence_after_the_seeds_it_had():
    a = ad.AdaptiveSeeds(start=10, step=2, max=14)
    plan = ad.PlanRows({}, [("GIN unsup", "GIN global pool", "x")],
                       {"GIN unsup": ["colors"], "GIN global pool": ["colors"]})
    dec = ad.initial_decisions(a, plan)
    # +60 points, one comparison: K+ = 1.45^t reaches 2 / 0.05 = 40 at 10 seeds, not at 9
    ad.decide_round(a, plan, _gap(10, {3}, top=0.7), 10, 1, dec)
    [d] = dec.values()
    assert d.order == [0, 1, 2, 4, 5, 6, 7, 8, 9] and d.decision == "open"
    ad.decide_round(a, plan, _gap(12, top=0.7), 12, 2, dec)
    assert d.order == [0, 1, 2, 4, 5, 6, 7, 8, 9, 3, 10, 11] and d.decision == "greater"
    assert (d.round, d.at) == (2, [9, 12])


def test_force_says_which_stored_decisions_it_drops(studies, tmp_path, monkeypatch):
    from ablate.runner.execute import driver
    from ablate.runner.execute.rounds import run_adaptive

    study, _ = build_study(studies("{adaptive: {start: 10, step: 2, max: 14}}"))
    _run_rounds(monkeypatch, tmp_path, study, _gap(14))
    lines = []
    monkeypatch.setattr(driver, "run_study", lambda part, *a, **k: Summary(
        part.name, len(part.trials), ok=len(part.trials)))
    run_adaptive(study, str(tmp_path / "r"), force=True, say=lines.append)
    # round 1 decides unsup vs global pool; sup vs unsup (every difference 0) can then not be
    # decided within the 4 seeds left (1.75^4 < 2 / alpha): the study ends after round 1
    assert "force=true drops the stored decisions of round(s) 1-1 (1 decided: GIN unsup vs " \
           "GIN global pool (colors test_largec): greater in round 1)" in lines[0]


@pytest.mark.parametrize("where", ["write", "read"])
def test_a_decisions_file_or_store_that_cannot_be_used_is_the_exit_3_line(
        studies, tmp_path, monkeypatch, where):
    """Issue 53: an OSError writing adaptive.json or reading the store ends the study with
    the storage line and exit 3, not a traceback."""
    study, _ = build_study(studies("{adaptive: {start: 10, step: 2, max: 14}}"))
    err = OSError(28, "No space left on device", str(tmp_path / "r" / "x"))
    if where == "write":
        def boom(self, path):
            raise err
        monkeypatch.setattr(Rounds, "write", boom)
        summary, runs, _ = _run_rounds(monkeypatch, tmp_path, study, _gap(14))
    else:
        from ablate.runner.execute import driver
        from ablate.runner.execute.rounds import run_adaptive

        def store(*a):
            raise err
        monkeypatch.setattr(driver, "run_study", lambda part, *a, **k: Summary(
            part.name, len(part.trials), ok=len(part.trials)))
        monkeypatch.setattr(ad, "store_values", store)
        summary, runs = run_adaptive(study, str(tmp_path / "r"), say=lambda s: None), [1]
    assert summary.exit_code == 3 and len(runs) == 1
    assert summary.storage_error == f"No space left on device writing {tmp_path / 'r' / 'x'}"


def test_a_comparison_no_seeds_left_can_decide_stops_asking_and_a_rerun_replays_it(
        studies, tmp_path, monkeypatch):
    """TINY at max 14: unsup vs global pool (+80 points) is decided in round 1; sup vs unsup
    (every difference 0) cannot be decided by the 4 seeds left (1.75^4 < 2 / (0.05 / 2)), so
    it is stopped in round 1 and no round 2 runs; the file says so, the last line counts it,
    and a rerun replays the same file."""
    study, _ = build_study(studies("{adaptive: {start: 10, step: 2, max: 14}}"))
    summary, runs, lines = _run_rounds(monkeypatch, tmp_path, study, _gap(14))
    assert len(runs) == 1 and summary.exit_code == 0
    path = tmp_path / "r" / study.name / ad.DECISIONS_FILE
    doc = json.loads(path.read_text())
    by = {(c["row"], c["baseline"]): c for c in doc["comparisons"]}
    sup = by[("GIN sup", "GIN unsup")]
    assert (sup["decision"], sup["stopped"], sup["seeds"]) == ("open", 1, 10)
    assert doc["finished"] and (doc["seed_runs"], doc["seed_runs_max"]) == (30, 42)
    assert "1 of 2 comparisons decided, 1 open (1 of them beyond deciding by max: no more " \
           "seeds)" in lines[-1]
    assert "30 of 42 seed runs (12 saved)" in lines[-1]
    before = path.read_text()
    _run_rounds(monkeypatch, tmp_path, study, _gap(14))
    assert path.read_text() == before
    from ablate.runner.plan.adaptive_rounds import replay_plan

    status = {t.trial_id: "ok" for t in study.trials}  # verify=true: round 1's trials only
    planned = replay_plan(study.spec.adaptive, study.trials, status, tmp_path / "r", study.name)
    assert {t.trial_id for t in planned} == {t.trial_id for t in runs[0].trials}
