"""The report of an adaptive-seed study (issue 54 item 5): markers from the stored decisions of
its confidence sequence, not from fixed-n tests after optional stopping; a row the sequence
stopped early is not "missing seeds"; metric=auc decides on the AUC the report shows."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from ablate.runner.plan import adaptive as ad
from ablate.runner.plan.adaptive_rounds import Rounds
from analysis import adaptive_decisions
from analysis.report import write_report
from analysis.synthetic import trial_record, write_trials

GLOBAL, UNSUP, SUP = "ChebyGIN global pool", "ChebyGIN unsup", "ChebyGIN sup"
OPTS = ad.AdaptiveSeeds(start=10, step=2, max=14)


def _rows(missing: set[int] = frozenset()) -> list[dict]:
    """Global pool and unsup at 14 seeds (their comparison open to the end), sup at 10 (its
    comparison with unsup decided in round 1). Unsup beats the global pool by 5 points on
    every seed of LARGE-C, sup beats unsup by 3 on every seed of ORIG: a fixed-n sign-flip test
    marks both; on LARGE-C sup and unsup differ by ±0.1. The global pool lacks `missing`."""
    out = []
    for tid, pool, sup, n in (("g", "", "unsup", 14), ("u", "1", "unsup", 14),
                              ("s", "1", "sup", 10)):
        for s in range(n):
            if tid == "g" and s in missing:
                continue
            jitter = 0.01 * ((s * 7) % 5)
            largec = {"g": 0.50, "u": 0.55, "s": 0.55 + (0.001 if s % 2 else -0.001)}[tid]
            orig = {"g": 0.90, "u": 0.90, "s": 0.93}[tid]
            for split, acc in (("test_orig", orig + jitter), ("test_largec", largec + jitter)):
                out.append(trial_record(trial_id=f"{tid}{s}", seed=s, split=split, accuracy=acc,
                                        pool_layers=pool, supervision=sup, seeds=str(s),
                                        attn_auc_pooled_l0=0.8))
    return out


def _decisions(path, metric: str = "accuracy") -> None:
    """The file the runner writes after round 3 of 3: unsup vs global pool open, sup vs unsup
    equivalent in round 1."""
    opts = ad.AdaptiveSeeds(start=10, step=2, max=14, metric=metric)
    d_open = ad.Decision(UNSUP, GLOBAL, "pool_layers", "colors", "test_largec", seeds=14,
                         lo=[-0.2, -0.1, -0.05], hi=[0.3, 0.2, 0.15], at=[10, 12, 14],
                         order=list(range(14)))
    d_eq = ad.Decision(SUP, UNSUP, "supervision", "colors", "test_largec", seeds=10,
                       decision="equivalent", round=1, lo=[-0.005], hi=[0.005], at=[10],
                       order=list(range(10)))
    trials = [SimpleNamespace(trial_id=f"{v}{s}", config=SimpleNamespace(seeds=(s,)))
              for v in "gus" for s in range(14)]
    rounds = Rounds(opts, trials, ad.PlanRows({}, []), {d.key: d for d in (d_open, d_eq)}, [],
                    round=3, seed_runs=38)
    rounds.write(path)


@pytest.fixture
def adaptive_report(tmp_path):
    def make(missing: set[int] = frozenset(), decisions: bool = True, metric: str = "accuracy"):
        root = tmp_path / "res"
        write_trials(root, "ad", _rows(missing))
        if decisions:
            _decisions(root / "ad" / ad.DECISIONS_FILE, metric)
        out = tmp_path / "out"
        summary = write_report(root, out, figures=False)
        return out, summary["ad"]
    return make


def _main(out) -> dict[tuple[str, str], str]:
    """(row, column) -> the main table's cell text."""
    md = (out / "tables" / "ad__main.md").read_text().splitlines()
    head = [c.strip() for c in md[2].strip("|").split("|")]
    cells = {}
    for line in md[4:]:
        if not line.startswith("|"):
            break
        vals = [c.strip().strip("*") for c in line.strip("|").split("|")]
        cells.update({(vals[0], h): v for h, v in zip(head, vals)})
    return cells


def test_fixed_seeds_mark_by_sign_flip(adaptive_report):
    """The same store without a decisions file: the fixed-n test marks both differences."""
    out, _ = adaptive_report(decisions=False)
    cells = _main(out)
    assert cells[(UNSUP, "COLORS LARGE-C")].endswith("↑")
    assert cells[(SUP, "COLORS ORIG")].endswith("↑")


def test_markers_come_from_the_sequences_decisions(adaptive_report):
    out, _ = adaptive_report()
    cells = _main(out)
    assert not cells[(UNSUP, "COLORS LARGE-C")].endswith("↑")  # the sequence left it open
    assert not cells[(SUP, "COLORS ORIG")].endswith("↑")  # a split the sequence did not decide
    assert cells[(SUP, "COLORS LARGE-C")].endswith("≈")  # decided equivalent
    md = (out / "tables" / "ad__main.md").read_text()
    assert "markers are the decisions of the study's confidence sequence" in md
    assert "significantly higher/lower" not in md
    stats = pd.read_csv(out / "tables" / "ad__stats.csv")
    seq = dict(zip(zip(stats["row"], stats["column"]), stats["sequence"].fillna("")))
    assert seq[(UNSUP, "test_largec")] == "open" and seq[(SUP, "test_largec")] == "equivalent"
    assert seq[(SUP, "test_orig")] == ""
    assert "do not hold their level after that optional stopping" in \
        (out / "tables" / "ad__stats.md").read_text()
    report = (out / "report.md").read_text()
    assert "sign-flip p" not in report.split("### Findings")[1].split("###")[0]


def test_a_row_stopped_early_is_not_missing_seeds(adaptive_report):
    _, summary = adaptive_report()
    assert not [m for m in summary["missing"] if "seeds" in m], summary["missing"]


def test_a_seed_the_rounds_called_for_is_still_missing(adaptive_report):
    _, summary = adaptive_report(missing={3})
    assert f"{GLOBAL} on colors: 13 of the 14 seeds its adaptive rounds called for " \
           "(missing 3)" in summary["missing"]
    assert not [m for m in summary["missing"] if m.startswith(SUP)]


def test_the_seeds_each_pair_was_meant_to_get():
    doc = {"options": {"start": 10, "step": 2, "max": 14}, "round": 3, "comparisons": [
        {"row": "B", "baseline": "A", "dataset": "colors", "decision": "greater", "round": 2},
        {"row": "C", "baseline": "A", "dataset": "colors", "decision": "open", "round": 0},
        {"row": "D", "baseline": "A", "dataset": "triangles", "decision": "absent", "round": 1}],
        "left_out": [{"row": "E", "baseline": "A", "dataset": "colors"}]}
    assert adaptive_decisions.expected_seeds(doc) == {
        ("B", "colors"): 12, ("A", "colors"): 14, ("C", "colors"): 14,
        ("D", "triangles"): 10, ("A", "triangles"): 10, ("E", "colors"): 10}
    assert adaptive_decisions.expected_seeds({**doc, "round": 0})[("A", "colors")] == 10
    # C vs A stopped in round 1 (no seeds up to max could decide it): C got round 1's seeds
    # only, and A as many as its other comparison (B, decided in round 2) called for
    doc["comparisons"][1]["stopped"] = 1
    got = adaptive_decisions.expected_seeds(doc)
    assert (got[("C", "colors")], got[("A", "colors")]) == (10, 12)


def test_auc_decisions_mark_the_auc_column(adaptive_report):
    out, _ = adaptive_report(metric="auc")
    cells = _main(out)
    assert cells[(SUP, "COLORS AUC")].endswith("≈")
    assert not cells[(SUP, "COLORS LARGE-C")].endswith("≈")
    md = (out / "tables" / "ad__adaptive.md").read_text()
    assert "COLORS / AUC (all test graphs)" in md and "the main table's AUC column" in md


TINY = """\
description: tiny adaptive on the AUC
fixed: {dataset: colors, backbone: gin, epochs: 2}
data: {n_train: 40, n_val: 20, n_test: 30, n_max_large: 30}
variants:
  - {supervision: unsup}
  - {supervision: sup}
seeds: {adaptive: {metric: auc}}
seeds_per_trial: 2
"""


@pytest.mark.parametrize("pooled", [0.9, np.nan])
def test_metric_auc_decides_on_the_pooled_auc_the_report_shows(tmp_path, monkeypatch, pooled):
    """The AUC column of the report is the first layer's AUC over all test graphs of a seed
    (attn_auc_pooled_l0); metric=auc reads that, not the per-split attn_auc_l0 (0.5 here),
    which it takes only where a store has no pooled value."""
    from ablate.runner.study.expand import build_study

    (tmp_path / "tiny.yaml").write_text(TINY)
    monkeypatch.setenv("ABLATE_STUDIES", str(tmp_path))
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    study, _ = build_study("tiny")
    plan = ad.plan_rows(study.trials)
    rows = [trial_record(trial_id=t.trial_id, seed=s, split=split, accuracy=0.7,
                         supervision=t.config.supervision, attn_auc_l0=0.5,
                         attn_auc_pooled_l0=pooled, seeds=",".join(map(str, t.config.seeds)))
            for t in study.trials if max(t.config.seeds) < 10 for s in t.config.seeds
            for split in ("test_orig", "test_largec")]
    write_trials(tmp_path / "r", study.name, rows)
    values = ad.store_values(study.spec.adaptive, plan, tmp_path / "r", study.name)
    assert len(values) == 2 * 10  # two rows, ten seeds: one value a seed, not one a split
    assert set(values["split"]) == {ad.AUC_DECIDED}
    want = 0.5 if np.isnan(pooled) else pooled
    assert values["value"].to_numpy() == pytest.approx(np.full(len(values), want))


def test_the_decisions_module_reads_the_runners_file_name():
    assert adaptive_decisions.DECISIONS_FILE == ad.DECISIONS_FILE


def test_a_file_that_is_not_a_decisions_file_is_ignored(tmp_path):
    (tmp_path / ad.DECISIONS_FILE).write_text(json.dumps([1, 2]))
    assert adaptive_decisions.read_decisions(tmp_path) is None
    (tmp_path / ad.DECISIONS_FILE).write_text("{not json")
    assert adaptive_decisions.read_decisions(tmp_path) is None


def test_the_adaptive_figure_shares_its_seeds_axis_and_draws_a_first_look(tmp_path,
                                                                          monkeypatch):
    """A comparison decided at its first look is a point with its interval on the same
    start..max seeds axis as one that went on, coloured by its decision; the margin's edges
    are drawn."""
    from analysis import adaptive_section, figure_style

    drawn = []
    real = figure_style.save
    monkeypatch.setattr(figure_style, "save",
                        lambda fig, out, stem: (drawn.append(fig), real(fig, out, stem))[1])
    opts = {"start": 10, "step": 2, "max": 14, "equivalence": 0.01, "metric": "accuracy"}
    comps = [{"row": "B", "baseline": "A", "dataset": "colors", "split": "test_largec",
              "decision": "greater", "round": 1, "seeds": 10, "lo": [0.4], "hi": [0.6],
              "at": [10]},
             {"row": "C", "baseline": "A", "dataset": "colors", "split": "test_largec",
              "decision": "open", "round": 0, "seeds": 14, "lo": [-0.2, -0.1, -0.05],
              "hi": [0.3, 0.2, 0.15], "at": [10, 12, 14]}]
    adaptive_section._figure(comps, [[0.45], None], opts, tmp_path, "ad__adaptive")
    first, later = [ax for ax in drawn[0].axes if ax.get_visible()]
    dots = [line for line in first.lines if line.get_marker() == "o"]
    assert [d.get_ydata().tolist() for d in dots] == [pytest.approx([45.0])]  # the mean, not 50
    assert not [line for line in later.lines if line.get_marker() == "o"]  # no mean: no dot
    comps[1]["stopped"] = 3  # no seeds up to max could decide it: the title says where it stopped
    drawn.clear()
    adaptive_section._figure(comps, [[0.45], None], opts, tmp_path, "ad__adaptive")
    later = [ax for ax in drawn[0].axes if ax.get_visible()][1]
    assert later.get_title().endswith("open, undecidable by 14: stopped at 14")
    assert first.get_xlim() == later.get_xlim() == (8.5, 15.5)
    lo, hi = first.get_ylim()
    assert lo < 0 < 40 < 60 < hi  # 0 and the interval [40, 60] in view, not -100..100
    [bars] = [c for c in first.collections if c.get_segments()
              and len(c.get_segments()[0]) == 2 and c.get_segments()[0][0][0] == 10]
    assert bars.get_segments()[0][:, 1].tolist() == pytest.approx([40.0, 60.0])
    assert first.title.get_color() == adaptive_section.DECISION_COLOURS["greater"]
    dashed = [line.get_ydata()[0] for line in first.lines if line.get_linestyle() == "--"]
    assert sorted(dashed) == pytest.approx([-1.0, 1.0])


def test_the_figures_dot_is_the_mean_paired_difference_of_the_seeds_each_look_took():
    """Look k's dot: the mean of row - baseline over the first at[k] seeds of the decision's
    `order` (a retried seed taken late counts where it was taken), from the report's ok rows;
    None where a seed a look took is not in the store."""
    import pandas as pd

    from analysis.adaptive_section import look_means

    acc = {("B", 0): 0.9, ("B", 1): 0.5, ("B", 2): 0.7, ("A", 0): 0.1, ("A", 1): 0.5,
           ("A", 2): 0.4}
    ok = pd.DataFrame([{"row": r, "seed": s, "dataset": "colors", "split": sp,
                        "accuracy": v if sp == "test_largec" else 0.0}
                       for (r, s), v in acc.items() for sp in ("test_largec", "val")])
    c = {"row": "B", "baseline": "A", "dataset": "colors", "split": "test_largec",
         "order": [1, 0, 2], "at": [2, 3]}
    assert look_means(ok, c, "accuracy") == pytest.approx([(0.0 + 0.8) / 2, (0.0 + 0.8 + 0.3) / 3])
    assert look_means(ok[ok["seed"] != 2], c, "accuracy") is None
    assert look_means(ok, {**c, "at": []}, "accuracy") is None


def test_the_figure_reads_each_metric_where_the_runner_decides_on_it():
    from ablate.runner.plan import adaptive_options as o
    from analysis import adaptive_section as a

    assert a.AUC_ROW_SPLIT == o.AUC_ROW_SPLIT
    assert a.METRIC_COLUMNS == {m: tuple(x for x in (o.METRICS[m], o.FALLBACK.get(m)) if x)
                                for m in o.METRICS}
