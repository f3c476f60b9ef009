"""Axes and layout of the report's figures and HTML tables: distinct percentage ticks,
integer epoch ticks, visible markers, exponential fits only where the data carries one,
colour by the study's axis, and wide tables cut into parts instead of being cut off."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from analysis import figure_style, figures
from analysis.report import write_report
from analysis.synthetic import trial_record, write_trials
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
