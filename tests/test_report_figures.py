"""Axes and layout of the report's figures and HTML tables: distinct percentage ticks,
integer epoch ticks, visible markers, exponential fits only where the data carries one,
colour by the study's axis, and wide tables cut into parts instead of being cut off; every
statistic drawn only with the tables' amount of data and with n and a 95% interval, no fit
through data that cannot carry one, runs left out named and captions true to what is drawn."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from analysis import figure_style, figures
from analysis.report import write_report
from analysis.synthetic import size_bins, trial_record, write_trials
from analysis.tables import MAX_HTML_COLUMNS
from analysis.variants import add_variant


@pytest.fixture
def drawn(monkeypatch) -> list:
    """Figures drawn by `analysis.figures`, rendered (tick labels set) before they are saved."""
    kept = []
    save = figure_style.save

    def keep(fig, out, stem):
        fig.canvas.draw()
        kept.append(fig)
        return save(fig, out, stem)

    monkeypatch.setattr(figure_style, "save", keep)
    return kept


def _runs(auc: np.ndarray, acc: np.ndarray, **axes) -> pd.DataFrame:
    rows = [trial_record(trial_id=f"t{i}", seed=i, split="test_orig", attn_auc_l0=float(a),
                         accuracy=float(y), **axes) for i, (a, y) in enumerate(zip(auc, acc))]
    return add_variant(pd.DataFrame(rows))


def _labels(axis) -> list[str]:
    lo, hi = sorted(axis.get_view_interval())
    return [t.get_text() for t, x in zip(axis.get_majorticklabels(), axis.get_majorticklocs())
            if lo - 1e-12 <= x <= hi + 1e-12]


def _visible_axes(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible()]


def test_percentage_ticks_never_repeat(drawn, tmp_path):
    """Accuracy between 0.4% and 1.2% (the screenshot's '1%, 1%, 1%, 0%, 0%, 0%')."""
    rng = np.random.default_rng(0)
    ok = _runs(0.5 + 0.012 * rng.random(16), 0.004 + 0.008 * rng.random(16))
    assert figures.acc_vs_auc(ok, tmp_path, "s", ["ChebyGIN unsup"])
    (fig,) = drawn
    for ax in _visible_axes(fig):
        for axis in (ax.xaxis, ax.yaxis):
            labels = _labels(axis)
            assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
            assert all(t.endswith("%") for t in labels)


def test_percent_ticks_label_exact_values():
    f = figures.PercentTicks()
    assert f.format_ticks([0.004, 0.006, 0.008, 0.010]) == ["0.4%", "0.6%", "0.8%", "1.0%"]
    assert f.format_ticks([0.0, 0.25, 0.5]) == ["0%", "25%", "50%"]
    assert f.format_ticks([0.5, 0.5025, 0.505]) == ["50.00%", "50.25%", "50.50%"]


def test_epoch_ticks_are_integers(drawn, tmp_path):
    ok = add_variant(pd.DataFrame([trial_record(trial_id="a", seed=s) for s in (0, 1)]))
    curves = pd.DataFrame([{"trial_id": "a", "seed": s, "epoch": e, "val_accuracy": 0.5 + 0.01 * e,
                            "val_auc": 0.6 + 0.001 * e} for s in (0, 1) for e in (1, 2, 3)])
    assert figures.dynamics(ok, curves, tmp_path, "s", ["ChebyGIN unsup"])
    (fig,) = drawn
    for ax in _visible_axes(fig):
        ticks = [x for x in ax.xaxis.get_majorticklocs()
                 if min(ax.get_xlim()) <= x <= max(ax.get_xlim())]
        assert ticks and all(float(x).is_integer() for x in ticks), ticks
        assert all(re.fullmatch(r"\d+", t) for t in _labels(ax.xaxis))
        labels = _labels(ax.yaxis)
        assert len(set(labels)) == len(labels), labels


def _fit_lines(fig) -> list:
    return [ln for ax in fig.axes for ln in ax.get_lines() if len(ln.get_xdata()) == 100]


@pytest.mark.parametrize("n, span, why", [(6, 0.5, "6 points"), (30, 0.03, "AUC spans 3.0")])
def test_no_exponential_fit_where_data_cannot_carry_it(drawn, tmp_path, n, span, why):
    auc = 0.6 + np.linspace(0, span, n)
    ok = _runs(auc, 0.02 * np.exp(3.5 * auc) + 0.1)
    (f,) = figures.acc_vs_auc(ok, tmp_path, "s", ["ChebyGIN unsup"])
    fit = f.info["fits"]["colors/test_orig"]
    assert fit["method"] == "none" and why in fit["reason"]
    assert _fit_lines(drawn[0]) == []
    assert why in " ".join(t.get_text() for ax in drawn[0].axes for t in ax.texts)


def test_exponential_fit_drawn_with_enough_spread(drawn, tmp_path):
    auc = np.linspace(0.5, 1.0, 20)
    ok = _runs(auc, 0.02 * np.exp(3.5 * auc) + 0.1)
    (f,) = figures.acc_vs_auc(ok, tmp_path, "s", ["ChebyGIN unsup"])
    fit = f.info["fits"]["colors/test_orig"]
    assert fit["reason"] == "" and fit["b"] == pytest.approx(3.5, rel=1e-3)
    assert len(_fit_lines(drawn[0])) == 1


def test_scatter_markers_are_visible_and_coloured_by_the_varied_axis(drawn, tmp_path):
    rows = []
    for norm in ("softmax", "sparsemax", "spherical"):
        for sup in ("unsup", "sup"):
            rows += [trial_record(trial_id=f"{norm}{sup}", seed=s, normalizer=norm, supervision=sup,
                                  attn_auc_l0=0.6 + 0.05 * s, accuracy=0.5 + 0.04 * s)
                     for s in range(3)]
    ok = add_variant(pd.DataFrame(rows))
    (f,) = figures.acc_vs_auc(ok, tmp_path, "s", ["ChebyGIN unsup", "ChebyGIN sup"],
                              hue="normalizer")
    assert f.info["hue"] == "normalizer"
    (ax,) = _visible_axes(drawn[0])
    sizes = np.concatenate([c.get_sizes() for c in ax.collections])
    assert sizes.min() >= 40
    faces = [tuple(np.round(c.get_facecolor()[0], 3)) for c in ax.collections]
    # one colour per normaliser, shared by its unsup and sup groups (two marker shapes)
    assert len(set(faces)) == 3 and all(faces.count(f) == 2 for f in faces)
    assert len({len(c.get_paths()[0].vertices) for c in ax.collections}) == 2
    legend = [t.get_text() for t in drawn[0].legends[0].get_texts()]
    assert {"normalizer=softmax", "normalizer=sparsemax", "normalizer=spherical"} <= set(legend)


def test_wide_layer_table_is_cut_into_parts_not_cut_off(tmp_path):
    """2 datasets x 2 splits x (AUC, kept) x 2 layers = 16 value columns: the HTML shows
    them in parts of at most MAX_HTML_COLUMNS, each with the model column, nothing lost."""
    rows = [trial_record(trial_id=f"{d}{v}", seed=s, split=sp, dataset=d, supervision=v,
                         pool_layers="1,2", attn_auc_l0=0.61, attn_auc_l1=0.72,
                         ratio_kept_l0=0.53, ratio_kept_l1=0.34)
            for d in ("colors", "triangles") for v in ("unsup", "sup") for s in range(2)
            for sp in ("test_orig", "test_large")]
    write_trials(tmp_path / "res", "wide", rows)
    write_report(tmp_path / "res", tmp_path / "out", figures=False, n_boot=200)
    page = (tmp_path / "out" / "report.html").read_text()
    start = page.index("<h4>Attention per pooling layer</h4>")
    section = page[start:page.index("<h", start + 5)]
    trs = re.findall(r"<tr>(.*?)</tr>", section)
    assert trs and max(len(re.findall(r"<t[dh][ >]", tr)) for tr in trs) <= 1 + MAX_HTML_COLUMNS
    assert section.count("<table") >= 2
    heads = re.findall(r"<th(?: colspan=\"\d+\")?>([^<]*)</th>", section)
    for group in ("COLORS ORIG", "COLORS LARGE", "TRIANGLES ORIG", "TRIANGLES LARGE"):
        assert group in heads
    for value in ("61.0", "72.0", "53.0", "34.0"):
        # every model row shows each value once per (dataset, split): 2 rows x 4 groups
        assert section.count(f"<td>{value}") == 8


# Issue 20, "Figures": every statistic drawn follows the tables' rules (enough data, n and a
# 95% interval), fits only where meaningful, what is left out named, captions true.

def _texts(fig) -> str:
    """Every text of a figure: titles, annotations, legends, suptitle."""
    out = [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        out += [ax.get_title(), *(t.get_text() for t in ax.texts)]
        if ax.get_legend():
            out += [t.get_text() for t in ax.get_legend().get_texts()]
    out += [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    return "\n".join(out)


def _init_runs(n_trials: int, n_seeds: int) -> pd.DataFrame:
    """Attention runs on COLORS whose AUC rises with cos(p_init, p_opt), two variants."""
    rng = np.random.default_rng(1)
    rows = []
    for t in range(n_trials):
        for s in range(n_seeds):
            cos = float(rng.uniform(-1, 1))
            rows.append(trial_record(trial_id=f"i{t}", seed=s, backbone=("gin", "chebygin")[t % 2],
                                     cos_p_init=cos, attn_auc_l0=0.7 + 0.2 * cos
                                     + float(rng.normal(0, 0.02)), accuracy=0.5 + 0.3 * cos))
    return add_variant(pd.DataFrame(rows))


def test_init_correlation_hidden_on_a_thin_store(drawn, tmp_path):
    """8 runs from 2 seeds (the smoke store): no r in the title, no line, the caption says why."""
    (f,) = figures.init_cos(_init_runs(4, 2), tmp_path, "s")
    text = _texts(drawn[0])
    assert "r = " not in text and "r =" not in drawn[0].axes[0].get_title()
    assert not [ln for ax in drawn[0].axes for ln in ax.get_lines()]
    assert "No r on COLORS AUC" in f.caption and "from 2 seeds" in f.caption
    assert "GIN unsup" in f.caption and "ChebyGIN unsup" in f.caption  # the variants pooled
    assert f.info["colors/auc"]["r_shown"] is False


def test_init_correlation_shown_with_n_and_interval(drawn, tmp_path):
    (f,) = figures.init_cos(_init_runs(4, 5), tmp_path, "s")
    c = f.info["colors/auc"]
    assert c["r_shown"] and c["n"] == 20 and c["n_seeds"] == 5
    assert c["pearson_lo"] < c["pearson_r"] < c["pearson_hi"]
    text = _texts(drawn[0])
    assert (f"r = {c['pearson_r']:.2f} (95% CI {c['pearson_lo']:.2f} to {c['pearson_hi']:.2f}), "
            f"n = 20 runs, 5 seeds") in text


def test_no_fit_on_a_thin_store_of_mostly_zeros(drawn, tmp_path):
    """The smoke store's panel: 16 runs from 2 seeds, mostly zero accuracy, AUC spread wide."""
    rng = np.random.default_rng(0)
    auc = np.linspace(0.4, 0.95, 16)
    acc = np.where(rng.random(16) < 0.7, 0.0, rng.uniform(0, 0.5, 16))
    rows = [trial_record(trial_id=f"t{i // 2}", seed=i % 2, attn_auc_l0=float(a), accuracy=float(y))
            for i, (a, y) in enumerate(zip(auc, acc))]
    (f,) = figures.acc_vs_auc(add_variant(pd.DataFrame(rows)), tmp_path, "s", ["ChebyGIN unsup"])
    fit = f.info["fits"]["colors/test_orig"]
    assert fit["method"] == "none" and "2 seeds" in fit["reason"]
    assert _fit_lines(drawn[0]) == [] and "a=" not in _texts(drawn[0])
    assert not fit["r_shown"] and "r = " not in _texts(drawn[0])
    assert "No fit on COLORS ORIG: 2 seeds" in f.caption and "No r on COLORS ORIG" in f.caption


def test_no_fit_when_most_runs_share_one_accuracy(drawn, tmp_path):
    """Enough runs, seeds and AUC spread, but 14 of 20 accuracies are 0: no curve."""
    auc = np.linspace(0.4, 0.95, 20)
    acc = np.where(np.arange(20) < 14, 0.0, 0.02 * np.exp(3.5 * auc))
    (f,) = figures.acc_vs_auc(_runs(auc, acc), tmp_path, "s", ["ChebyGIN unsup"])
    fit = f.info["fits"]["colors/test_orig"]
    assert fit["method"] == "none" and "14 of 20 runs at accuracy 0.0%" in fit["reason"]
    assert _fit_lines(drawn[0]) == [] and "14 of 20 runs" in f.caption


def test_fit_and_r_drawn_with_their_intervals(drawn, tmp_path):
    rng = np.random.default_rng(3)
    auc = np.linspace(0.5, 1.0, 20)
    ok = _runs(auc, 0.02 * np.exp(3.5 * auc) + 0.1 + rng.normal(0, 0.01, 20))
    (f,) = figures.acc_vs_auc(ok, tmp_path, "s", ["ChebyGIN unsup"])
    fit = f.info["fits"]["colors/test_orig"]
    assert fit["reason"] == "" and fit["b_lo"] < fit["b"] < fit["b_hi"]
    assert fit["b_lo"] < 3.5 < fit["b_hi"]
    text = _texts(drawn[0])
    assert f"r = {fit['pearson_r']:.2f} (95% CI {fit['pearson_lo']:.2f} to" in text
    assert f"b = {fit['b']:.3g} (95% CI {fit['b_lo']:.3g} to {fit['b_hi']:.3g}), n = 20" in text


def test_dynamics_names_the_runs_it_leaves_out(drawn, tmp_path):
    """COLORS attention runs have a cosine; TRIANGLES' GNN-scorer runs have none: they are
    not drawn as 'no attention' and the caption names them."""
    rows, curves = [], []
    for ds, pool, n in (("colors", "1", 18), ("triangles", "1", 6), ("colors", "", 3)):
        for s in range(n):
            tid = f"{ds}{pool}"
            cos = float(np.linspace(-1, 1, n)[s]) if ds == "colors" and pool else float("nan")
            rows.append(trial_record(trial_id=tid, seed=s, dataset=ds, pool_layers=pool,
                                     scorer="gnn" if ds == "triangles" else "fc", cos_p_init=cos))
            curves += [{"trial_id": tid, "seed": s, "epoch": e, "val_accuracy": 0.1 * e,
                        "val_auc": 0.6} for e in (1, 2, 3)]
    ok = add_variant(pd.DataFrame(rows))
    (f,) = figures.dynamics(ok, pd.DataFrame(curves), tmp_path, "s", ["ChebyGIN unsup"])
    assert f.info["grouped_by"] == "init quality"
    assert "Left out" in f.caption and "6 runs on TRIANGLES (ChebyGIN unsup)" in f.caption
    legend = [t.get_text() for lg in drawn[0].legends for t in lg.get_texts()]
    assert "no attention (n = 3 runs)" in legend
    assert not any("TRIANGLES" in ax.get_title() for ax in drawn[0].axes)


def _size_runs(bins_of: dict) -> pd.DataFrame:
    rows = [trial_record(trial_id="a", seed=s, split=sp, acc_by_size=size_bins(bins))
            for s in range(3) for sp, bins in bins_of.items()]
    return add_variant(pd.DataFrame(rows))


def test_acc_by_size_caption_describes_what_is_drawn(drawn, tmp_path):
    """One size bin per split: only markers, and the caption says so (no solid/dashed lines)."""
    ok = _size_runs({"test_orig": [[1, 25, 0.9, 40]], "test_large": [[26, 50, 0.4, 40]]})
    (f,) = figures.acc_by_size(ok, tmp_path, "s", ["ChebyGIN unsup"])
    assert all(len(ln.get_xdata()) == 1 for ax in drawn[0].axes for ln in ax.get_lines())
    assert "solid" not in f.caption and "dashed" not in f.caption and "dotted" not in f.caption
    assert "ORIG: circles only" in f.caption and "LARGE: squares only" in f.caption
    assert "n = 3 runs" in _texts(drawn[0])


def test_acc_by_size_caption_names_the_lines_it_draws(drawn, tmp_path):
    ok = _size_runs({"test_orig": [[1, 10, 0.9, 40], [11, 25, 0.8, 40]],
                     "test_large": [[26, 50, 0.4, 40]]})
    (f,) = figures.acc_by_size(ok, tmp_path, "s", ["ChebyGIN unsup"])
    assert "ORIG: solid lines with circles" in f.caption and "LARGE: squares only" in f.caption
    assert "dotted" not in f.caption


def _many_variants(n_variants: int, per: int = 3) -> pd.DataFrame:
    """`per` runs of each of `n_variants` variants; variant 'v0' has the most runs."""
    rows = []
    for v in range(n_variants):
        for s in range(per + (2 if v == 0 else 0)):
            rows.append(trial_record(trial_id=f"v{v}", seed=s, split="test_orig",
                                     attn_auc_l0=0.5 + 0.02 * s + 0.01 * v,
                                     accuracy=0.3 + 0.05 * s + 0.02 * v))
    ok = add_variant(pd.DataFrame(rows))
    return ok.assign(variant=ok["trial_id"])


def test_groups_beyond_the_legend_are_named_and_feed_no_statistic(drawn, tmp_path):
    """12 variants, 10 colours: the two not drawn are named in the caption, and the panel's
    r and fit are computed on the drawn runs only."""
    ok = _many_variants(figure_style.MAX_HUE + 2)
    order = [f"v{i}" for i in range(figure_style.MAX_HUE + 2)]
    (f,) = figures.acc_vs_auc(ok, tmp_path, "s", order)
    drawn_vs = figure_style.most_frequent(ok, "variant", order)
    left = sorted(set(order) - set(drawn_vs))
    assert len(left) == 2 and "Not drawn (2 colour groups" in f.caption
    assert all(v in f.caption.split("Not drawn")[1] for v in left)
    points = sum(len(c.get_offsets()) for ax in drawn[0].axes for c in ax.collections)
    assert points == len(ok[ok["variant"].isin(drawn_vs)])
    assert f"n = {points}" in _texts(drawn[0])
    curves = pd.DataFrame([{"trial_id": r.trial_id, "seed": r.seed, "epoch": e,
                            "val_accuracy": 0.1 * e, "val_auc": 0.6}
                           for r in ok.itertuples() for e in (1, 2)])
    (d,) = figures.dynamics(ok.assign(cos_p_init=np.nan), curves, tmp_path, "s", order)
    assert "Not drawn (2 variants" in d.caption and all(v in d.caption for v in left)
    assert figures.acc_vs_auc(_many_variants(3), tmp_path, "t", order)[0].caption.count(
        "Not drawn") == 0
