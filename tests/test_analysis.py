"""Tests of `analysis`: numbers against hand computations, figures, report, bad input.

A synthetic store with known values is written by the tests (`analysis.synthetic`),
the report is generated once per module, and its CSV tables are checked against
means and standard deviations, paired p-values and CIs counted by hand, and Holm
adjustments of a family with known p-values. The statistics themselves are checked
against known answers in `test_analysis_stats.py`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import stats
from analysis.load import StoreError, load_store
from analysis.reference import reference
from analysis.report import main, write_report
from analysis.synthetic import mass_curve, size_bins, trial_record, write_curves, write_trials
from analysis.variants import variant_label

SEEDS = list(range(6))
B_CG = [0.40, 0.42, 0.45, 0.41, 0.43, 0.44]  # ChebyGIN global pool, TEST-LARGE
V_CG = [0.60, 0.55, 0.70, 0.58, 0.66, 0.61]  # ChebyGIN unsup, TEST-LARGE
G_GIN = [0.10, 0.12, 0.08, 0.11, 0.15, 0.09]  # GIN global pool, TEST-LARGE
D_GIN = [3, -1, 4, 2, -5, 6]  # GIN unsup minus GIN global pool, points
COS = [-0.5, -0.2, 0.0, 0.3, 0.6, 0.9]
FIGURES = ("acc_vs_auc", "init_cos", "dynamics", "ratio_kept", "acc_by_size", "gt_mass")


def _trial(tid: str, large: list[float], **axes) -> list[dict]:
    rows = []
    attn = axes.get("pool_layers", "1") != ""
    for s in SEEDS:
        for split in ("val", "test_orig", "test_large"):
            acc = large[s] if split == "test_large" else 0.90 + 0.01 * s
            auc = 0.70 + 0.04 * s + (0.05 if attn else 0.0)
            rows.append(trial_record(
                trial_id=tid, seed=s, split=split, seeds="0,1,2,3,4,5", accuracy=acc,
                attn_auc_l0=auc, cos_p_init=COS[s] if attn else float("nan"),
                ratio_kept_l0=(0.5 + 0.05 * s) if attn else float("nan"),
                acc_by_size=size_bins([(1, 25, acc, 100)] if split != "test_large"
                                      else [(26, 50, acc + 0.05, 50), (51, 200, acc - 0.05, 50)]),
                **axes))
    return rows


def _curves(tid: str) -> list[dict]:
    return [{"trial_id": tid, "seed": s, "epoch": e, "train_loss": 1.0 / e,
             "val_accuracy": min(1.0, 0.1 * e + 0.01 * s), "val_loss": 1.0 / e,
             "val_auc": 0.5 + 0.04 * e} for s in SEEDS for e in range(1, 11)]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("results")
    rows = []
    rows += _trial("cg_global", B_CG, backbone="chebygin", pool_layers="", supervision="unsup")
    rows += _trial("cg_unsup", V_CG, backbone="chebygin", pool_layers="1", supervision="unsup")
    rows += _trial("gin_global", G_GIN, backbone="gin", K=1, pool_layers="")
    rows += _trial("gin_unsup", [g + d / 100 for g, d in zip(G_GIN, D_GIN)], backbone="gin", K=1,
                   pool_layers="1")
    # a failed trial and a partial one (3 seeds packed, 1 written) with two pooling layers
    rows += [trial_record(trial_id="cg_fail", seed=s, split=sp, status="error",
                          error="RuntimeError: boom", supervision="weak", seeds="0,1")
             for s in (0, 1) for sp in ("val", "test_orig", "test_large")]
    rows += [trial_record(trial_id="cg_partial", seed=0, split=sp, supervision="gt",
                          pool_layers="1,2", seeds="0,1,2", attn_auc_l1=0.9, ratio_kept_l1=0.3)
             for sp in ("val", "test_orig", "test_large")]
    write_trials(root, "known", rows)
    write_curves(root, "known", [c for t in ("cg_global", "cg_unsup", "gin_global", "gin_unsup")
                                 for c in _curves(t)])
    sdc = [{"trial_id": f"sdc_{n}", "seed": s, "split": "test", "status": "ok", "error": "",
            "dataset": "sdc_cifar", "normalizer": n, "accuracy": 0.9 + 0.01 * s, "ft": f,
            "nnz": 0.3, "dist": 0.5, "ent": 1.2,
            "gt_mass_curve": mass_curve({0.1: f, 0.5: f / 2, 0.9: f / 4})}
           for n, f in (("softmax", 0.7), ("sparsemax", 0.9)) for s in range(3)]
    write_trials(root, "sdc_demo", sdc, kind="sdc")
    write_curves(root, "sdc_demo", [{"trial_id": f"sdc_{n}", "seed": s, "epoch": e,
                                     "ftpt": 0.1 * e, "ffpt": 0.2, "ftpf": 0.0, "ffpf": 0.1}
                                    for n in ("softmax", "sparsemax") for s in range(3)
                                    for e in range(1, 6)], kind="sdc")
    return root


@pytest.fixture(scope="module")
def report(store, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("report")
    return out, write_report(store, out, jobs=2)  # figures drawn by two forked processes


def _cell(out: Path, row: str, column: str, baseline: str | None = None) -> pd.Series:
    df = pd.read_csv(out / "tables" / "known__stats.csv")
    pick = (df["row"] == row) & (df["column"] == column)
    return df[pick & ((df["baseline"] == baseline) if baseline else df["primary"])].iloc[0]


# ----------------------------------------------------------------------------- numbers


def test_mean_std_match_hand_computation(report):
    out, _ = report
    main_csv = pd.read_csv(out / "tables" / "known__main.csv").set_index("row")
    for row, vals in (("ChebyGIN unsup", V_CG), ("ChebyGIN global pool", B_CG)):
        v = 100 * np.array(vals)
        assert main_csv.loc[row, "colors.test_large.mean"] == pytest.approx(v.mean())
        assert main_csv.loc[row, "colors.test_large.std"] == pytest.approx(v.std(ddof=1))


def test_bootstrap_ci_of_the_cell(report):
    """The cell's CI is the bootstrap CI of that cell's 6 runs in percent (the statistic is
    checked against known answers in test_analysis_stats.py): a CI of other runs, of
    fractions or of a different level would differ."""
    out, _ = report
    x = 100 * np.array(V_CG)
    c = _cell(out, "ChebyGIN unsup", "test_large")
    assert (c["ci_lo"], c["ci_hi"]) == pytest.approx(stats.bootstrap_ci(x))
    assert x.min() <= c["ci_lo"] < x.mean() < c["ci_hi"] <= x.max()
    assert (c["ci_lo"], c["ci_hi"]) != pytest.approx(stats.bootstrap_ci(x, level=0.9))


def test_paired_p_values_match_hand_computation(report):
    out, _ = report
    d = 100 * (np.array(V_CG) - np.array(B_CG))
    c = _cell(out, "ChebyGIN unsup", "test_large")
    assert c["baseline"] == "ChebyGIN global pool" and c["axis"] == "pool_layers"
    assert c["n_pairs"] == 6 and c["delta"] == pytest.approx(d.mean())
    assert c["p"] == pytest.approx(2 / 2 ** 6)  # every difference positive
    # every difference positive: the 95% CI of 6 pairs is [min d, max d] (p = 2/64 < 0.05)
    assert (c["delta_lo"], c["delta_hi"]) == pytest.approx((d.min(), d.max()))
    # mixed signs, |d| = 1..6 (total 21), sum = 9: a pattern reaches |sum| >= 9 iff the |d|
    # it negates add up to <= 6 (14 subsets of {1..6}) or >= 15 (14 more): p = 28/64
    c2 = _cell(out, "GIN unsup", "test_large")
    assert c2["baseline"] == "GIN global pool" and c2["axis"] == "pool_layers"
    assert c2["p"] == pytest.approx(28 / 64)
    # 6 pairs: p(delta) > 0.05 as soon as one pair's difference reaches delta, so the CI
    # is again [min d, max d]
    assert (c2["delta_lo"], c2["delta_hi"]) == pytest.approx((min(D_GIN), max(D_GIN)))
    # the other one-axis comparison of ChebyGIN unsup: the backbone, against GIN unsup
    c3 = _cell(out, "ChebyGIN unsup", "test_large", baseline="GIN unsup")
    assert c3["axis"] == "backbone" and not c3["primary"]


def test_holm_over_the_study(report):
    """One Holm family per study: every finite p of the study's stats table (Holm itself is
    checked by hand in test_analysis_stats.py); lines without a p keep none."""
    out, _ = report
    df = pd.read_csv(out / "tables" / "known__stats.csv")
    assert df["p"].notna().sum() > 2
    np.testing.assert_allclose(df["p_holm"], stats.holm(df["p"]), rtol=1e-12)
    assert df["p_holm"].isna().equals(df["p"].isna())


def test_holm_family_of_two_known_p_values(tmp_path):
    """global -> unsup -> sup over 6 seeds, each compared with the row one axis away:
    unsup - global all positive (p = 2/64), sup - unsup = D_GIN / 100 (p = 28/64). Holm:
    2/64 x 2 = 0.0625 and 28/64 x 1 = 0.4375, so unsup's raw p < 0.05 is not significant
    and gets no marker."""
    rows = [trial_record(trial_id=t, seed=s, split="test_large", accuracy=v[s],
                         attn_auc_l0=float("nan"), pool_layers=pool, supervision=sup)
            for t, v, pool, sup in (("g", B_CG, "", "unsup"), ("u", V_CG, "1", "unsup"),
                                    ("s", [a + d / 100 for a, d in zip(V_CG, D_GIN)], "1",
                                     "sup"))
            for s in SEEDS]
    write_trials(tmp_path / "res", "fam", rows)
    write_report(tmp_path / "res", tmp_path / "out", figures=False)
    df = pd.read_csv(tmp_path / "out" / "tables" / "fam__stats.csv").set_index("row")
    assert df["p"].notna().sum() == 2
    assert df.loc["ChebyGIN unsup", "baseline"] == "ChebyGIN global pool"
    assert df.loc["ChebyGIN sup", "baseline"] == "ChebyGIN unsup"
    assert df.loc["ChebyGIN unsup", ["p", "p_holm"]].tolist() == pytest.approx([2 / 64, 0.0625])
    assert df.loc["ChebyGIN sup", ["p", "p_holm"]].tolist() == pytest.approx([28 / 64, 0.4375])
    md = (tmp_path / "out" / "tables" / "fam__main.md").read_text()
    assert md.count("↑") + md.count("↓") == 2  # the legend's own arrows only


def test_stats_edge_cases():
    assert stats.mean_std([1.0, 2.0, 3.0]) == pytest.approx((2.0, 1.0))
    assert np.isnan(stats.mean_std([5.0])[1])
    assert stats.bootstrap_ci([3.0, 3.0, 3.0]) == (3.0, 3.0)
    assert stats.sign_flip([0.0, 0.0])[0] == 1.0
    assert stats.min_p(3) == pytest.approx(0.25)
    assert stats.n_resamples(10) == 10_000 and stats.n_resamples(100_000) == 1_000
    assert stats.n_resamples(200) == 2_500  # 500,000 draws


def test_exp_fit_recovers_parameters():
    x = np.linspace(0.5, 1.0, 40)
    y = 0.02 * np.exp(3.5 * x) + 0.1
    fit = stats.exp_fit(x, y)
    assert fit.method == "curve_fit"
    assert (fit.a, fit.b, fit.c) == pytest.approx((0.02, 3.5, 0.1), rel=1e-3)
    assert fit.r2 == pytest.approx(1.0)
    assert stats.exp_fit([1, 2], [1, 2]).method == "none"


def test_main_table_marks_best_and_significance(report):
    out, _ = report
    md = (out / "tables" / "known__main.md").read_text()
    top = 100 * np.mean(V_CG)
    assert f"**{top:.1f} ± {100 * np.std(V_CG, ddof=1):.1f}" in md  # best in TEST-LARGE
    df = pd.read_csv(out / "tables" / "known__stats.csv")
    assert not (df["p_holm"] < 0.05).any()  # 6 seeds, Holm over many tests: no marker
    assert md.count("↑") + md.count("↓") == 2  # the legend's own arrows
    tex = (out / "tables" / "known__main.tex").read_text()
    assert r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex
    assert r"\textbf{" in tex and r"$\pm$" in tex


def test_significance_marker_with_ten_seeds(tmp_path):
    """One comparison over 10 seeds, every difference positive: p = 2/2^10, marked ↑."""
    rows = [trial_record(trial_id=t, seed=s, split="test_large", accuracy=a + 0.01 * s + d * s / 1000,
                         attn_auc_l0=float("nan"), pool_layers=pool, supervision=sup)
            for t, a, d, pool, sup in (("g", 0.4, 0, "", "unsup"), ("s", 0.6, 1, "1", "unsup"))
            for s in range(10)]
    write_trials(tmp_path / "res", "sig", rows)
    write_report(tmp_path / "res", tmp_path / "out", figures=False)
    c = pd.read_csv(tmp_path / "out" / "tables" / "sig__stats.csv").dropna(subset=["p_holm"])
    assert len(c) == 1 and c["p_holm"].iloc[0] == pytest.approx(2 / 2 ** 10)
    md = (tmp_path / "out" / "tables" / "sig__main.md").read_text()
    assert "↑** |" in md  # best in its column and significantly higher


def test_paper_comparison(report):
    out, _ = report
    df = pd.read_csv(out / "tables" / "known__paper.csv")
    # this store's ChebyGIN is SPEC §2's (sum + MLP); the paper's COLORS rows ran the reference
    # script (mean, no MLP: backbone chebygin_ref), so no paper number stands beside it
    assert not ((df["row"] == "ChebyGIN unsup") & (df["column"] == "test_large")).any()
    assert reference("ChebyGIN (ref. script) unsup", "colors", "test_large").mean == 14.4
    assert reference("ChebyGIN unsup", "colors", "test_large") is None
    assert reference("ChebyGIN (ref. script) unsup", "triangles", "test_large").mean == 26.0
    assert reference("ChebyGIN sup", "triangles", "test_large").source == "final"
    assert reference("GIN global pool", "colors", "auc").mean == 98.0
    assert reference("ChebyGIN + GT attention", "colors", "test_orig") is None
    # our mean comes with its bootstrap CI where there are enough runs to have one
    assert {"ci_lo", "ci_hi"} <= set(df.columns)
    ci = df.dropna(subset=["ci_lo", "ci_hi"])
    assert len(ci) and ((ci.ci_lo <= ci["mean"] + 1e-9) & (ci["mean"] <= ci.ci_hi + 1e-9)).all()
    md = (out / "tables" / "known__paper.md").read_text()
    assert "Ours, 95% CI of the mean" in md and f"[{ci.ci_lo.iloc[0]:.1f}, " in md


def test_variant_labels():
    assert variant_label("gin", "", "unsup", "threshold") == "GIN global pool"
    assert variant_label("gin", "1", "unsup", "topk") == "GIN unsup top-k"
    assert variant_label("chebygin", "1", "unsup", "threshold") == "ChebyGIN unsup"
    assert variant_label("chebygin", "1,2", "gt", "threshold") == "ChebyGIN + GT attention"
    assert variant_label("chebygin", "1", "weak", "threshold") == "ChebyGIN weak"


# ----------------------------------------------------------------------------- outputs


def test_every_figure_written_and_non_empty(report):
    out, summary = report
    for name in FIGURES:
        png, svg = out / "figures" / f"known__{name}.png", out / "figures" / f"known__{name}.svg"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000, name
        assert b"<svg" in svg.read_bytes()[:2000] and svg.stat().st_size > 5000, name
    png = out / "figures" / "known__seeds__colors.png"  # the per-seed strips beside the bars
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    assert len(summary["known"]["figures"]) == 2 * (len(FIGURES) + 1)


def test_tables_written_in_three_formats(report):
    out, summary = report
    for name in ("main", "paper", "stats", "layers"):
        for ext in ("md", "tex", "csv"):
            assert (out / "tables" / f"known__{name}.{ext}").stat().st_size > 100
    for name in ("gt_mass", "dynamics"):
        assert (out / "figures" / f"sdc_demo__sdc__{name}.png").stat().st_size > 5000
    sdc = pd.read_csv(out / "tables" / "sdc_demo__sdc.csv").set_index("normalizer")
    assert sdc.loc["sparsemax", "ft_mean"] == pytest.approx(90.0)
    assert sdc.loc["softmax", "accuracy_mean"] == pytest.approx(91.0)


def test_report_says_what_failed_and_what_is_missing(report):
    out, summary = report
    k = summary["known"]
    assert k["counts"]["trials failed"] == 1 and k["counts"]["runs failed"] == 2
    assert k["counts"]["runs missing"] == 2
    assert any("cg_partial: seeds 1, 2" in m for m in k["missing"])
    assert 3 <= len(k["findings"]) <= 5
    md = (out / "report.md").read_text()
    assert "RuntimeError: boom" in md and "## Study: sdc_demo" in md


def test_html_is_self_contained(report):
    out, summary = report
    page = (out / "report.html").read_text()
    low = page.lower()
    for bad in ('src="http', "src='http", 'href="http', "href='http", "<script", "<link",
                "@import", "url(http"):
        assert bad not in low, bad
    n_png = sum(1 for v in summary.values() for f in v["figures"] if f.endswith(".png"))
    assert page.count("data:image/png;base64,") == n_png


def test_study_selection_and_cli(store, tmp_path, capsys):
    out = tmp_path / "r"
    assert main([str(store), "--study", "sdc_demo", "--out", str(out), "--no-figures"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary) == ["sdc_demo"]
    assert "wrote" in capsys.readouterr().out


# ----------------------------------------------------------------------------- bad input


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "dir" for p in sorted(root.rglob("*"))}


@pytest.mark.parametrize("case", ["missing", "empty", "foreign", "not_parquet", "unknown_study",
                                  "out_inside", "no_metrics", "a_file"])
def test_bad_input_exits_2_and_leaves_store_untouched(case, tmp_path, capsys):
    root = tmp_path / "results"
    write_trials(root, "ok", [trial_record(trial_id="a", seed=0)])
    args = [str(root)]
    if case == "missing":
        args = [str(tmp_path / "nope")]
    elif case == "empty":
        (tmp_path / "empty").mkdir()
        args = [str(tmp_path / "empty")]
    elif case == "foreign":
        pd.DataFrame({"a": [1], "b": ["x"]}).to_parquet(root / "ok" / "trials" / "zz.parquet")
    elif case == "not_parquet":
        (root / "ok" / "trials" / "zz.parquet").write_text("not parquet")
    elif case == "unknown_study":
        args += ["--study", "nosuch"]
    elif case == "out_inside":
        args += ["--out", str(root / "report")]
    elif case == "no_metrics":
        pd.DataFrame({"trial_id": ["z"], "seed": [0], "split": ["val"], "status": ["ok"],
                      "dataset": ["colors"]}).to_parquet(root / "ok" / "trials" / "z.parquet")
        (root / "ok" / "trials" / "a.parquet").unlink()
    elif case == "a_file":
        args = [str(root / "ok" / "trials" / "a.parquet")]
    before = _snapshot(root)
    if case != "out_inside":
        args += ["--out", str(tmp_path / "out")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert _snapshot(root) == before
    if case == "foreign":
        assert "zz.parquet" in err and "trial_id" in err and "status" in err
    if case == "no_metrics":
        assert "accuracy" in err


def test_loader_unifies_schemas_and_keeps_latest_attempt(tmp_path):
    rows = [trial_record(trial_id="a", seed=0, threshold=0),  # int threshold, one layer
            trial_record(trial_id="b", seed=0, attn_auc_l1=0.5, ratio_kept_l1=0.2)]
    write_trials(tmp_path, "s", rows)
    write_trials(tmp_path, "s", [trial_record(trial_id="c", seed=0, attempt=1, accuracy=0.1),
                                 trial_record(trial_id="c", seed=0, attempt=2, accuracy=0.2)])
    (study,) = load_store(tmp_path)
    df = study.trials.set_index("trial_id")
    assert df.loc["a", "attn_auc_l1"] != df.loc["a", "attn_auc_l1"]  # NaN where absent
    assert df.loc["c", "accuracy"] == 0.2 and len(df) == 3
    with pytest.raises(StoreError, match="unknown study"):
        load_store(tmp_path, ["x"])
    (tmp_path / "started").mkdir()  # a run began (its plan written), no trial finished yet
    (tmp_path / "started" / "plan.json").write_text('{"trial_ids": ["a"]}')
    with pytest.raises(StoreError) as e:
        load_store(tmp_path, ["started"])
    assert str(e.value).startswith("study started has no finished trial in ")
    assert "study=started" in str(e.value) and "studies with results: s" in str(e.value)


def test_module_entry_point(store, tmp_path):
    r = subprocess.run([sys.executable, "-m", "analysis.report", str(tmp_path / "none")],
                       capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert r.returncode == 2 and r.stderr.startswith("error:")


# ----------------------------------------------------------------------------- browser


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_report_renders_offline_in_chromium(report, tmp_path):
    """Headless Chromium, all network off, renders the page with its images."""
    out, summary = report
    shot = tmp_path / "shot.png"
    cmd = ["chromium", "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
           "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=http://127.0.0.1:9",
           "--hide-scrollbars", "--window-size=1280,10000", f"--screenshot={shot}",
           (out / "report.html").resolve().as_uri()]
    subprocess.run(cmd, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    assert shot.exists() and shot.stat().st_size > 20_000
    import matplotlib.image as mpimg

    rgb = (mpimg.imread(shot)[::2, ::2, :3] * 255).astype(np.int32)
    packed = (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]
    # the same page without figures renders ~900 distinct colours (anti-aliased text); with
    # its plots decoded from the embedded data URIs, ~3,800
    assert len(np.unique(packed)) > 2000


@pytest.mark.parametrize("pooled", [True, False])
def test_the_tables_auc_is_pooled_over_the_test_graphs_where_stored(pooled, tmp_path):
    """The main table's AUC column is the trainer's `attn_auc_pooled_l0` (all test graphs of a
    seed pooled, as the papers report it and the table's note says); stores written before it
    existed fall back to the first layer's AUC on TEST-ORIG. The loader dropped the pooled
    column, so every report showed the per-graph value under the pooled note."""
    extra = {"attn_auc_pooled_l0": 0.99} if pooled else {}
    rows = [trial_record(trial_id="t1", seed=s, split=sp, attn_auc_l0=0.5, seeds="0,1,2", **extra)
            for s in range(3) for sp in ("val", "test_orig")]
    write_trials(tmp_path / "results", "pooled", rows)
    write_report(tmp_path / "results", tmp_path / "report", figures=False)
    main_table = pd.read_csv(tmp_path / "report" / "tables" / "pooled__main.csv")
    auc = main_table[[c for c in main_table.columns if "auc" in c.lower()][0]]
    assert auc.iloc[0] == pytest.approx(99.0 if pooled else 50.0), main_table


def test_cache_reads_only_new_files_and_matches_a_cold_read(store, tmp_path, monkeypatch):
    import analysis.load as load

    root = tmp_path / "res"
    shutil.copytree(store, root)
    (root / "known" / "failures.jsonl").write_text('{"trial_id": "cg_fail"}\n' * 3)
    cache = tmp_path / "cache"
    seen: list[str] = []
    scan = load._scan
    monkeypatch.setattr(load, "_scan", lambda files, *a: seen.extend(map(str, files))
                        or scan(files, *a))
    cold = load_store(root, ["known"])[0]
    load_store(root, ["known"], cache)  # fills the cache
    seen.clear()
    warm = load_store(root, ["known"], cache)[0]
    assert seen == []  # nothing re-read
    pd.testing.assert_frame_equal(cold.trials, warm.trials)
    pd.testing.assert_frame_equal(cold.curves, warm.curves)
    assert warm.failed_attempts == 3
    write_trials(root, "known", [trial_record(trial_id="new", seed=0, supervision="weak")])
    (root / "known" / "trials" / "gin_unsup.parquet").unlink()
    again = load_store(root, ["known"], cache)[0]
    assert seen == [str((root / "known" / "trials" / "new.parquet").resolve())]
    ids = set(again.trials["trial_id"])
    assert "new" in ids and "gin_unsup" not in ids


def test_the_paper_tables_zero_note_names_only_the_cells_it_shows(tmp_path):
    """Both rows read 0.0 ± 0.0 on TRIANGLES; only ChebyGIN has a paper number, so the paper
    table shows only it and its note names only it (the main table names both)."""
    rows = [trial_record(trial_id=b, seed=s, split=sp, dataset="triangles", backbone=b,
                         K=1 if b == "gcn" else 2, accuracy=0.1 if sp == "val" else 0.0)
            for b in ("chebygin", "gcn") for s in (0, 1)
            for sp in ("val", "test_orig", "test_large")]
    write_trials(tmp_path / "res", "zero", rows)
    write_report(tmp_path / "res", tmp_path / "out", figures=False, n_boot=100)

    def note(table: str) -> str:
        text = (tmp_path / "out" / "tables" / f"zero__{table}.md").read_text()
        return next(line for line in text.splitlines() if "not a failure" in line)

    assert "GCN unsup on TRIANGLES" in note("main")
    paper = (tmp_path / "out" / "tables" / "zero__paper.md").read_text()
    assert "| GCN unsup |" not in paper and "| ChebyGIN unsup |" in paper
    assert "ChebyGIN unsup on TRIANGLES" in note("paper")
    assert "GCN unsup on TRIANGLES" not in note("paper")


def test_a_config_without_lr_drops_is_one_row_whatever_timing_its_rows_stored(tmp_path):
    """Rows stored before the lr_timing axis (read as "early") and later rows ("published") of a
    config that drops no LR (its id leaves the timing out) are one table row; so are a weak
    trial's rows that stored both (its id says the timing changed nothing: model B drops no
    LR either). A config that drops keeps its timing."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    trials = tmp_path / "res" / "t" / "trials"

    def rows(tid: str, seeds, **axes) -> list[dict]:
        return [trial_record(trial_id=tid, seed=s, split=sp, dataset="colors", epochs=5,
                             accuracy=0.2 + 0.1 * s, **axes)
                for s in seeds for sp in ("val", "test_orig", "test_large")]

    write_trials(tmp_path / "res", "t", rows("nodrop", (1, 2), lr_decay_epochs="",
                                            lr_timing="published")
                 + rows("weak", (1, 2), lr_decay_epochs="", supervision="weak",
                        lr_timing="published")
                 + rows("drop", (1, 2), lr_decay_epochs="3", normalizer="sparsemax",
                        lr_timing="published"))
    old = rows("nodrop", (0,), lr_decay_epochs="") + rows("weak", (0,), lr_decay_epochs="",
                                                           supervision="weak")
    pq.write_table(pa.Table.from_pylist([{k: v for k, v in r.items()
                                          if k not in ("acc_by_size", "gt_mass_curve")}
                                         for r in old]), trials / "before-issue-41.parquet")
    (study,) = load_store(tmp_path / "res")
    timing = study.trials.groupby("trial_id")["lr_timing"].unique().map(list).to_dict()
    assert timing == {"nodrop": [""], "weak": [""], "drop": ["published"]}
    write_report(tmp_path / "res", tmp_path / "out", figures=False, n_boot=100)
    main_rows = pd.read_csv(tmp_path / "out" / "tables" / "t__main.csv")["row"].tolist()
    assert len(main_rows) == 3 and not any("early" in r for r in main_rows), main_rows
