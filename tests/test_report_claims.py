"""The report claims only what its data carries: minimum seeds, one coherent paired test,
one-axis baselines, and a real `--help` (issue "A report that does not overclaim").

Stores are written with `analysis.synthetic`; expected values are known by construction
(a constant effect on every seed, sign patterns enumerated by hand), not recomputed with
the code under test.
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import findings, stats
from analysis.report import main, write_report
from analysis.synthetic import trial_record, write_trials
from analysis.variants import add_rows, add_variant, comparisons, row_axes

NORMALIZERS = ("softmax", "sparsemax", "spherical")


def _rows(tid: str, seeds: range, large: float, auc: float = math.nan, **axes) -> list[dict]:
    """One trial: TEST-ORIG 0.9, TEST-LARGE `large` + 0.01 * seed, AUC `auc` + 0.01 * seed."""
    return [trial_record(trial_id=tid, seed=s, split=sp, seeds=",".join(map(str, seeds)),
                         accuracy=(large if sp == "test_large" else 0.9) + 0.01 * s,
                         attn_auc_l0=auc + 0.01 * s, cos_p_init=-0.9 + 0.1 * s, **axes)
            for s in seeds for sp in ("test_orig", "test_large")]


def _normalizer_rows(seeds: range) -> list[dict]:
    """2 supervisions x 3 normalisers; supervision adds 60 points, each normaliser 3 more."""
    rows = []
    for sup, base in (("unsup", 0.1), ("sup", 0.7)):
        for k, norm in enumerate(NORMALIZERS):
            rows += _rows(f"{sup}_{norm}", seeds, base + 0.03 * k, 0.6 + 0.1 * k, supervision=sup,
                          normalizer=norm, threshold=0.03 if sup == "unsup" else 0.05)
    return rows


# ----------------------------------------------------------------------------- thin stores


def test_thin_store_shows_a_banner_and_no_claims(tmp_path):
    """2 seeds, a 50-point effect: numbers, but no p, no marker, no finding, a banner."""
    rows = _rows("g", range(2), 0.4, 0.7, pool_layers="")
    rows += _rows("u", range(2), 0.9, 0.95, pool_layers="1")
    write_trials(tmp_path / "res", "thin", rows)
    summary = write_report(tmp_path / "res", tmp_path / "out", n_boot=200)
    s = summary["thin"]
    assert s["findings"] == []
    (banner,) = s["banner"]
    assert "too thin" in banner and "fewer than 5 seeds" in banner and "2 seeds" in banner
    html = (tmp_path / "out" / "report.html").read_text()
    assert "class='banner'" in html and "too thin for claims" in html
    assert "too thin for claims" in (tmp_path / "out" / "report.md").read_text()
    cells = pd.read_csv(tmp_path / "out" / "tables" / "thin__stats.csv")
    tested = cells.dropna(subset=["baseline"])
    assert len(tested) and (tested["n_pairs"] == 2).all()
    assert tested["p"].isna().all() and tested["p_holm"].isna().all()
    assert tested["delta"].notna().all()  # the number is still shown
    main_md = (tmp_path / "out" / "tables" / "thin__main.md").read_text()
    assert main_md.count("↑") + main_md.count("↓") == 2  # the legend's own arrows only


def test_enough_seeds_give_a_finding_and_a_marker(tmp_path):
    """8 seeds, every paired difference +50 points: p = 2/2^8, one test, marked and stated."""
    rows = _rows("g", range(8), 0.4, pool_layers="")
    rows += _rows("u", range(8), 0.9, pool_layers="1")
    write_trials(tmp_path / "res", "rich", rows)
    summary = write_report(tmp_path / "res", tmp_path / "out", figures=False, n_boot=200)
    s = summary["rich"]
    assert s["banner"] == []
    cells = pd.read_csv(tmp_path / "out" / "tables" / "rich__stats.csv")
    large = cells[(cells["column"] == "test_large") & cells["baseline"].notna()].iloc[0]
    assert large["p"] == pytest.approx(2 / 2 ** 8) and large["delta"] == pytest.approx(50.0)
    assert (large["delta_lo"], large["delta_hi"]) == pytest.approx((50.0, 50.0))
    effect = [f for f in s["findings"] if f.startswith("Changing pool_layers")]
    assert effect and "from none to 1" in effect[0] and "LARGE accuracy by 50.0 points" in effect[0]
    assert "; significant)" in effect[0]
    table = (tmp_path / "out" / "tables" / "rich__main.md").read_text().split("\n\n")[1]
    assert "| ChebyGIN unsup | 8 | **93.5 ± 2.4** | **93.5 ± 2.4↑** |" in table


def test_correlation_findings_need_ten_runs_from_five_seeds():
    def info(n: int, seeds: int) -> dict:
        return {"colors/auc": {"pearson_r": 0.77, "pearson_p": 0.003, "n": n, "n_seeds": seeds}}

    assert findings.init_findings(info(12, 2)) == []  # the smoke store: many runs, 2 seeds
    assert findings.init_findings(info(9, 9)) == []
    (line,) = findings.init_findings(info(30, 30))
    assert "r = 0.77" in line and "n = 30" in line
    fit = {"a": 1.0, "b": 1.0, "c": 0.0, "r2": 0.9, "method": "curve_fit", "pearson_r": 0.9}
    assert findings.fit_findings({"colors/test_orig": {**fit, "n": 16, "n_seeds": 2}}) == []
    assert findings.fit_findings({"colors/test_orig": {**fit, "n": 16, "n_seeds": 8}})


# ----------------------------------------------------------------------------- one test


def _flip_share(d: np.ndarray) -> float:
    """Share of the 2^n sign patterns whose |sum| reaches the observed |sum|."""
    sums = [abs(np.dot(s, d)) for s in itertools.product((-1, 1), repeat=d.size)]
    return float(np.mean(np.array(sums) >= abs(d.sum()) - 1e-9))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_no_sign_pattern_of_five_or_fewer_pairs_is_significant(n):
    """Every sign pattern of n <= 5 distinct differences: p >= 2/2^n > 0.05 and the CI
    contains 0, so neither number can claim what the other denies."""
    for signs in itertools.product((-1, 1), repeat=n):
        d = np.array(signs) * np.arange(1, n + 1) * 1.5
        p, lo, hi = stats.sign_flip(d)
        assert p >= 2 / 2 ** n - 1e-12 and p == pytest.approx(_flip_share(d))
        assert lo <= 0 <= hi


def test_issue_example_two_positive_pairs_is_not_p_below_0001():
    """The issue's case: 2 seeds, both differences positive. The old bootstrap p was < 0.001
    beside Wilcoxon 0.5; the sign-flip test can only give 0.5 with 2 pairs."""
    pr = stats.paired([0.9, 0.95], [0.4, 0.42])
    assert pr.n == 2 and pr.p == pytest.approx(0.5)
    assert math.isinf(pr.ci_lo) and math.isinf(pr.ci_hi)


def test_p_below_alpha_exactly_when_the_ci_excludes_zero():
    rng = np.random.default_rng(7)
    seen = set()
    for n in (6, 7, 9, 12, 30, 60):  # 30 and 60: random sign patterns instead of all 2^n
        for shift in (0.0, 0.5, 1.0, 2.0):
            d = rng.normal(shift, 1.0, n)
            p, lo, hi = stats.sign_flip(d)
            assert (p < 0.05) == (not lo <= 0 <= hi), (n, shift, p, lo, hi)
            seen.add(p < 0.05)
    assert seen == {True, False}
    # 6 positive pairs: the exact CI is [min, max] and p = 2/64
    d = np.array([2.0, 3.0, 5.0, 7.0, 11.0, 13.0])
    assert stats.sign_flip(d) == pytest.approx((2 / 64, 2.0, 13.0))
    assert stats.sign_flip(np.array([3.0, -1, 4, 2, -5, 6]))[0] == pytest.approx(28 / 64)


# ----------------------------------------------------------------------------- baselines


def _labelled(rows: list[dict]) -> pd.DataFrame:
    df = add_variant(pd.DataFrame(rows))
    return add_rows(df, row_axes(df))


def test_rows_without_a_one_axis_neighbour_fall_back_to_their_global_pool_or_get_none():
    """GIN global pool, GIN unsup top-k and GIN sup differ pairwise in two axes each: the two
    attention rows are compared with global pooling along pool_layers (a global-pool row's
    attention settings mean nothing); without a global-pool row they get no comparison."""
    rows = [trial_record(trial_id="g", backbone="gin", pool_layers=""),
            trial_record(trial_id="t", backbone="gin", selection="topk"),
            trial_record(trial_id="s", backbone="gin", supervision="sup")]
    df = _labelled(rows)
    got = comparisons(df, row_axes(df))
    assert got["GIN global pool"] == []
    for row in ("GIN unsup top-k", "GIN sup"):
        assert [(c.baseline, c.axis) for c in got[row]] == [("GIN global pool", "pool_layers")]
    df = _labelled(rows[1:])
    assert comparisons(df, row_axes(df)) == {"GIN unsup top-k": [], "GIN sup": []}


def _axes_of(label: str) -> tuple[str, str]:
    sup = "sup" if label.startswith("ChebyGIN sup") else "unsup"
    return sup, re.search(r"normalizer=(\w+)", label).group(1)


def test_normalizer_study_pairs_rows_along_one_axis(tmp_path):
    """2 x 3 supervision x normaliser, 5 seeds: sparsemax-sup is compared with softmax-sup
    (normalizer) and sparsemax-unsup (supervision), never with softmax-unsup; the
    accuracy-AUC scatter is coloured by the normaliser."""
    write_trials(tmp_path / "res", "normalizer", _normalizer_rows(range(5)))
    summary = write_report(tmp_path / "res", tmp_path / "out", n_boot=200)
    cells = pd.read_csv(tmp_path / "out" / "tables" / "normalizer__stats.csv")
    row = "ChebyGIN sup (normalizer=sparsemax)"
    mine = cells[(cells["row"] == row) & (cells["column"] == "test_large")]
    first = mine[mine["primary"]].iloc[0]
    assert first["baseline"] == "ChebyGIN sup (normalizer=softmax)"
    assert first["axis"] == "normalizer" and first["delta"] == pytest.approx(3.0)
    assert set(mine["baseline"]) == {"ChebyGIN sup (normalizer=softmax)",
                                     "ChebyGIN unsup (normalizer=sparsemax)"}
    paired = cells.dropna(subset=["baseline"])
    for _, x in paired[paired["column"] == "test_large"].iterrows():
        a, b = _axes_of(x["row"]), _axes_of(x["baseline"])
        assert sum(u != v for u, v in zip(a, b)) == 1, (x["row"], x["baseline"])
        assert x["delta"] == pytest.approx(60.0 if x["axis"] == "supervision" else
                                           3.0 * (NORMALIZERS.index(a[1]) - NORMALIZERS.index(b[1])))
    headline = summary["normalizer"]["findings"][0]  # the largest effect: supervision
    row, base = re.search(r"\((ChebyGIN .*?\)) vs (ChebyGIN .*?\)), nothing else", headline).groups()
    assert headline.startswith("Changing supervision from unsup to sup")
    assert _axes_of(row)[1] == _axes_of(base)[1] and "by 60.0 points" in headline
    md = (tmp_path / "out" / "report.md").read_text()
    assert "colour = normalizer, marker = variant" in md


# ----------------------------------------------------------------------------- CLI


def test_help_describes_the_command(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "the report." not in out
    description = out.split("positional arguments")[0]
    assert "result store" in description and "report.html" in description


def test_module_help_runs_as_a_command():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "analysis.report", "--help"], capture_output=True,
                       text=True, cwd=Path(__file__).parents[1])
    assert r.returncode == 0 and "the report." not in r.stdout
    assert "self-contained report.html" in r.stdout.split("positional arguments")[0]
