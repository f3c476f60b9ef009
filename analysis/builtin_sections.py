"""The two built-in sections of a study's report, registered in this order.

- `gnn` (every dataset not named `sdc*`): the main, paper, statistics, robust-aggregate
  and per-layer tables, the figures of `analysis.figures` and the per-seed strips of
  `analysis.figure_seeds`, the findings and the thin-store banner. On an adaptive-seed study
  the markers are its confidence sequence's decisions (`analysis.adaptive_decisions`).
- `sdc` (the `sdc_*` datasets): Table 2 of Pandey et al. per normaliser, the
  foreground-mass curve (their Figure 6) and the FTPT/FFPT/FTPF/FFPF dynamics, with
  their findings and banner.
"""

from __future__ import annotations

import json

import pandas as pd

from analysis import tables
from analysis.adaptive_decisions import apply_decisions, read_decisions
from analysis.cells import cell_stats
from analysis.findings import findings, sdc_findings, sdc_thin_banner, thin_banner
from analysis.formatting import dataset_name
from analysis.reference import follows_reference
from analysis.robust import robust_cells, robust_table
from analysis.sections import Context, Section, register_section
from analysis.timings import timed
from analysis.variants import colour_axis, comparisons


def _is_sdc(df: pd.DataFrame) -> pd.Series:
    return df["dataset"].astype(str).str.startswith("sdc")


@register_section("gnn", lambda df: ~_is_sdc(df))
def gnn_section(ctx: Context) -> Section:
    """Paper tables, statistics, figures and findings for graph-attention rows."""
    sec = Section("Graph attention and pooling")
    ok = ctx.ok
    comps = comparisons(ok, ctx.axes)
    decisions = read_decisions(ctx.study.path)  # an adaptive-seed study's, else None
    with timed("statistics"):
        cells = cell_stats(ok, comps, ctx.rows, n_boot=ctx.n_boot)
        if decisions is not None:
            cells = apply_decisions(cells, decisions)
        robust_lines = robust_cells(ok, comps, ctx.rows)
    runs = cells.groupby("row")["n"].max().to_dict() if not cells.empty else {}
    reduced = set()
    if "data_params" in ok.columns:
        dp = ok[["dataset", "data_params"]].drop_duplicates()
        reduced = {d for d, p in zip(dp["dataset"].tolist(), dp["data_params"].tolist())
                   if p not in ("", "{}") and not follows_reference(json.loads(p), d)}
    notes = []
    named = [f"{r} vs {c.baseline} ({c.axis})" for r in ctx.rows for c in comps.get(r, [])]
    if named:
        notes.append("Comparisons, each with the row that differs in that one axis only (the "
                     "markers refer to the first of each row): " + "; ".join(named) + ".")
    if ctx.axes.pooled:
        notes.append("Pooled over the continuous axes " + ", ".join(ctx.axes.pooled)
                     + " (see the figures).")
    if reduced:
        notes.append("Datasets with a non-default recipe (data_params): "
                     + ", ".join(dataset_name(d) for d in sorted(reduced)) + ".")
    if not cells.empty:
        sec.tables.append(tables.main_table(cells, [r for r in ctx.rows if r in runs], runs,
                                            notes, decisions))
        paper = tables.paper_table(cells, ctx.rows, reduced)
        if paper is not None:
            sec.tables.append(paper)
        sec.tables.append(tables.stats_table(cells))
        sec.tables.append(robust_table(robust_lines, adaptive=decisions is not None))
    layers = tables.layers_table(ok, ctx.rows)
    if layers is not None:
        sec.tables.append(layers)
    if ctx.figures:
        from analysis.figures import all_figures

        variants = _variant_order(ok)
        with timed("figures"):
            sec.figures = all_figures(ok, ctx.study.curves, ctx.figures_dir, ctx.study.name,
                                      variants, jobs=ctx.jobs, hue=colour_axis(ok, ctx.axes))
            if not cells.empty:
                from analysis.figure_seeds import seed_strips

                sec.figures += seed_strips(ok, ctx.figures_dir, ctx.study.name, ctx.rows,
                                           robust_lines)
    info = {f.name: f.info for f in sec.figures}
    sec.findings = findings(cells, info)
    banner = thin_banner(cells)
    if banner:
        sec.banner.append(banner)
    if cells.empty:
        sec.notes.append("No finished run has an accuracy or attention AUC on a test split.")
    return sec


def _variant_order(df: pd.DataFrame) -> list[str]:
    first = df.drop_duplicates("variant")
    return [v for _, v in sorted(zip(first["_vorder"], first["variant"]))]


@register_section("sdc", _is_sdc)
def sdc_section(ctx: Context) -> Section:
    """Selective dependence classification (Pandey et al.): Table 2 per normaliser, the
    foreground-mass curve (their Figure 6) and the FTPT/FFPT/FTPF/FFPF dynamics."""
    sec = Section("Selective dependence classification")
    by = ["normalizer", *[a for a in ctx.axes.split_by if a != "normalizer"]]
    t = tables.sdc_table(ctx.ok, by)
    if t is not None:
        sec.tables.append(t)
        banner = sdc_thin_banner(t.data)
        if banner:
            sec.banner.append(banner)
        sec.findings += sdc_findings(t.data)
    if ctx.figures:
        from analysis.figure_binned import gt_mass
        from analysis.figure_curves import sdc_dynamics

        present = [a for a in by if a in ctx.ok.columns]
        ok = ctx.ok.copy()
        label = ok[present[0]].astype(str) if present else pd.Series("all", index=ok.index)
        for a in present[1:]:
            label = label + f", {a}=" + ok[a].astype(str)
        ok["variant"] = label.to_numpy(dtype=object)
        order = sorted(ok["variant"].unique().tolist())
        with timed("figures"):
            stem = f"{ctx.study.name}__sdc"
            sec.figures += gt_mass(
                ok, ctx.figures_dir, stem, order,
                caption="Fraction of test mosaics whose foreground segment receives attention "
                "≥ t, median and interquartile band over runs (Figure 6 of Pandey et al.).",
                ylabel="mosaics with α_fg ≥ t", legend="normalizer")
            sec.figures += sdc_dynamics(ok, ctx.study.curves, ctx.figures_dir, stem, order)
    return sec
