"""Write the tables, figures, findings and a self-contained HTML report of an ablate result store.

`python -m analysis.report RESULTS_DIR [--study NAME ...] [--out DIR]`. For every study of
the store: what varied, how many trials and runs are ok, failed or missing, then the
sections that apply to its rows (a registry: `register_section`), each contributing
tables (Markdown, LaTeX, CSV), figures (PNG, SVG), findings and, when the store has too
few seeds for claims, a banner saying so. Writes `DIR/report.md`, a self-contained
`DIR/report.html` (images embedded), and `DIR/tables/`, `DIR/figures/`,
`DIR/summary.json`. The store is only read. Bad input exits with code 2 and a one-line
message.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import math
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from analysis import stats, tables
from analysis.findings import findings, thin_banner
from analysis.load import AXES, StoreError, Study, load_store
from analysis.reference import AUC_SPLIT
from analysis.variants import (
    MAX_ROW_VALUES,
    RowAxes,
    add_rows,
    add_variant,
    colour_axis,
    comparisons,
    row_axes,
    row_order,
)

if TYPE_CHECKING:  # matplotlib and seaborn are imported only when figures are drawn
    from analysis.figures import Figure

DESCRIBED_AXES = tuple(a for a in AXES if a != "seeds")
DESCRIPTION = ("Read an ablate result store (read-only) and write, per study, paper tables "
               "(Markdown, LaTeX, CSV), figures (PNG, SVG), statistics with one-axis paired "
               "comparisons, findings, report.md and a self-contained report.html.")


@dataclass
class Context:
    """What a section builder gets: the study, its ok rows with variant/row labels."""

    study: Study
    ok: pd.DataFrame  # status ok rows of this section's datasets, with variant and row
    axes: RowAxes
    rows: list[str]  # table rows in order
    tables_dir: Path
    figures_dir: Path
    n_boot: int = stats.N_BOOT
    figures: bool = True
    jobs: int = 1  # processes drawing figures


@dataclass
class Section:
    """A section's output."""

    title: str
    tables: list[tables.Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)  # analysis.figures.Figure
    findings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    banner: list[str] = field(default_factory=list)  # shown above the findings: too few seeds


@dataclass(frozen=True)
class SectionSpec:
    name: str
    rows: Callable[[pd.DataFrame], pd.Series]  # which ok rows the section reads
    build: Callable[[Context], Section]


SECTIONS: dict[str, SectionSpec] = {}
LAST_TIMINGS: dict[str, float] = {}  # seconds per phase of the last write_report (benchmarks)


@contextmanager
def _timed(name: str):
    t0 = time.perf_counter()
    try:
        yield
    finally:
        LAST_TIMINGS[name] = LAST_TIMINGS.get(name, 0.0) + time.perf_counter() - t0


SectionFn = Callable[["Context"], "Section"]


def register_section(name: str, rows: Callable[[pd.DataFrame], pd.Series]
                     ) -> Callable[[SectionFn], SectionFn]:
    """Register a section builder for the rows `rows(df)` selects (a boolean Series).

    Used as a decorator: `@register_section("sdc", lambda df: df.dataset.str.startswith("sdc"))`.
    Sections run in registration order; one whose rows are empty is skipped.
    """
    def deco(fn: SectionFn) -> SectionFn:
        SECTIONS[name] = SectionSpec(name, rows, fn)
        return fn
    return deco


def _is_sdc(df: pd.DataFrame) -> pd.Series:
    return df["dataset"].astype(str).str.startswith("sdc")


@register_section("gnn", lambda df: ~_is_sdc(df))
def gnn_section(ctx: Context) -> Section:
    """Paper tables, statistics, figures and findings for graph-attention rows."""
    sec = Section("Graph attention and pooling")
    ok = ctx.ok
    comps = comparisons(ok, ctx.axes)
    with _timed("statistics"):
        cells = tables.cell_stats(ok, comps, ctx.rows, n_boot=ctx.n_boot)
    runs = cells.groupby("row")["n"].max().to_dict() if not cells.empty else {}
    reduced = set()
    if "data_params" in ok.columns:
        dp = ok[["dataset", "data_params"]].drop_duplicates()
        reduced = {d for d, p in zip(dp["dataset"].tolist(), dp["data_params"].tolist())
                   if p not in ("", "{}")}
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
                     + ", ".join(tables.dataset_name(d) for d in sorted(reduced)) + ".")
    if not cells.empty:
        sec.tables.append(tables.main_table(cells, [r for r in ctx.rows if r in runs], runs,
                                            notes))
        paper = tables.paper_table(cells, ctx.rows, reduced)
        if paper is not None:
            sec.tables.append(paper)
        sec.tables.append(tables.stats_table(cells))
    layers = tables.layers_table(ok, ctx.rows)
    if layers is not None:
        sec.tables.append(layers)
    if ctx.figures:
        from analysis.figures import all_figures

        variants = _variant_order(ok)
        with _timed("figures"):
            sec.figures = all_figures(ok, ctx.study.curves, ctx.figures_dir, ctx.study.name,
                                      variants, jobs=ctx.jobs, hue=colour_axis(ok, ctx.axes))
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
        d = t.data
        thin = d[d["runs"] < stats.MIN_PAIRED_SEEDS]
        if len(thin):
            keys = list(d.columns[:d.columns.get_loc("runs")])
            ex = "; ".join(", ".join(f"{k}={x[k]}" for k in keys) + f": {x['runs']} runs"
                           for _, x in thin.head(6).iterrows())
            sec.banner.append(f"This store is too thin for claims: {len(thin)} of {len(d)} rows "
                              f"have fewer than {stats.MIN_PAIRED_SEEDS} runs ({ex}). Their "
                              "numbers are shown without findings.")
        d = d[d["runs"] >= stats.MIN_PAIRED_SEEDS]
        if {"ft_mean", "accuracy_mean"} <= set(d.columns) and len(d) > 1:
            keys = list(d.columns[:d.columns.get_loc("runs")])
            best = d.loc[d["ft_mean"].idxmax()]
            sec.findings.append(
                "Most selective attention (highest FT): "
                + ", ".join(f"{k}={best[k]}" for k in keys)
                + f", FT {best['ft_mean']:.1f}% at accuracy {best['accuracy_mean']:.1f}%.")
            gap = d["accuracy_mean"] - d["ft_mean"]
            worst = d.loc[gap.idxmax()]
            sec.findings.append(
                f"Accuracy does not imply interpretability: the largest accuracy − FT gap is "
                f"{gap.max():.1f} points (" + ", ".join(f"{k}={worst[k]}" for k in keys) + ").")
    if ctx.figures:
        from analysis.figures import gt_mass, sdc_dynamics

        present = [a for a in by if a in ctx.ok.columns]
        ok = ctx.ok.copy()
        label = ok[present[0]].astype(str) if present else pd.Series("all", index=ok.index)
        for a in present[1:]:
            label = label + f", {a}=" + ok[a].astype(str)
        ok["variant"] = label.to_numpy(dtype=object)
        order = sorted(ok["variant"].unique().tolist())
        with _timed("figures"):
            stem = f"{ctx.study.name}__sdc"
            sec.figures += gt_mass(
                ok, ctx.figures_dir, stem, order,
                caption="Fraction of test mosaics whose foreground segment receives attention "
                "≥ t, median and interquartile band over runs (Figure 6 of Pandey et al.).",
                ylabel="mosaics with α_fg ≥ t", legend="normalizer")
            sec.figures += sdc_dynamics(ok, ctx.study.curves, ctx.figures_dir, stem, order)
    return sec


# ----------------------------------------------------------------------------- study overview


@dataclass
class Overview:
    """Status counts, what varied, and what is missing."""

    varied: list[str]
    counts: dict[str, int]
    missing: list[str]
    errors: list[tuple[str, int]]
    provenance: list[str] = field(default_factory=list)


def _seed_list(s: object) -> list[int]:
    try:
        return [int(x) for x in str(s).split(",") if x.strip() != ""]
    except ValueError:
        return []


def overview(study: Study) -> Overview:
    """What varied, ok/failed/missing counts and the missing pieces of a study."""
    df = study.trials
    varied = []
    for a in DESCRIBED_AXES:
        if a in df.columns:
            vals = df[a].dropna().unique()
            if len(vals) > 1:
                if len(vals) > MAX_ROW_VALUES and pd.api.types.is_numeric_dtype(df[a]):
                    varied.append(f"{a}: {len(vals)} values in [{np.min(vals):g}, "
                                  f"{np.max(vals):g}] (continuous)")
                else:
                    shown = sorted(str(v) if str(v) != "" else "(none)" for v in vals)
                    more = f", … ({len(shown)} values)" if len(shown) > MAX_ROW_VALUES else ""
                    varied.append(f"{a}: " + ", ".join(shown[:MAX_ROW_VALUES]) + more)
    seeds = sorted(df["seed"].unique())
    if len(seeds) > 1:
        varied.append(f"seed: {len(seeds)} seeds ({seeds[0]}–{seeds[-1]})")
    run_status = df["status"].eq("ok").groupby([df["trial_id"], df["seed"]]).all()
    trial_all = run_status.groupby(level=0).all()
    trial_any = run_status.groupby(level=0).any()
    counts = {
        "trial files": study.n_files,
        "trials ok": int(trial_all.sum()),
        "trials partly failed": int((trial_any & ~trial_all).sum()),
        "trials failed": int((~trial_any).sum()),
        "runs ok": int(run_status.sum()),
        "runs failed": int((~run_status).sum()),
        "rows": len(df),
    }
    if study.failed_attempts:
        counts["failed attempts logged"] = study.failed_attempts
    missing: list[str] = []
    if study.planned is not None:
        absent = sorted(set(study.planned) - set(df["trial_id"].unique()))
        counts["trials planned"] = len(study.planned)
        counts["trials missing"] = len(absent)
        if absent:
            missing.append(f"{len(absent)} planned trial(s) have no result file yet: "
                           + ", ".join(absent[:8]) + (" …" if len(absent) > 8 else ""))
    if "seeds" in df.columns:
        declared = df.drop_duplicates("trial_id")[["trial_id", "seeds"]]
        have = df.groupby("trial_id")["seed"].agg(lambda s: set(s.tolist()))
        lost = {}
        for t, s in zip(declared["trial_id"].tolist(), declared["seeds"].tolist()):
            gone = sorted(set(_seed_list(s)) - have.get(t, set()))
            if gone:
                lost[t] = gone
        if lost:
            n = sum(len(s) for s in lost.values())
            counts["runs missing"] = n
            ex = "; ".join(f"{t}: seeds {', '.join(map(str, s))}" for t, s in list(lost.items())[:5])
            missing.append(f"{n} run(s) packed in {len(lost)} trial(s) have no rows: {ex}")
    ok = df[df["status"] == "ok"]
    if not ok.empty:
        n_split = ok.groupby(["dataset", "trial_id", "seed"])["split"].nunique()
        expected = ok.groupby("dataset")["split"].nunique()
        short = n_split[n_split.to_numpy() < expected.reindex(
            n_split.index.get_level_values(0)).to_numpy()]
        if len(short):
            d, t, sd = short.index[0]
            lacking = set(ok.loc[ok["dataset"] == d, "split"]) - set(
                ok.loc[(ok["trial_id"] == t) & (ok["seed"] == sd), "split"])
            missing.append(f"{len(short)} finished run(s) lack some splits, e.g. trial {t} "
                           f"seed {sd}: " + ", ".join(sorted(lacking)))
        if not study.curves.empty:
            runs = ok[["trial_id", "seed"]].drop_duplicates()
            have_c = study.curves[["trial_id", "seed"]].drop_duplicates()
            m = runs.merge(have_c, how="left", indicator=True)
            n_no = int((m["_merge"] == "left_only").sum())
            if n_no:
                missing.append(f"{n_no} finished run(s) have no training curves")
    errors = []
    bad = df[df["status"] != "ok"].drop_duplicates(["trial_id", "seed"])
    if not bad.empty:
        msg = (bad["status"] + ": " + bad["error"].str.slice(0, 160)).value_counts()
        errors = [(str(m), int(c)) for m, c in msg.head(5).items()]
    prov = []
    if "train_s" in df.columns:
        runs = df.drop_duplicates(["trial_id", "seed"])
        t = runs["train_s"].to_numpy(dtype=float)
        t = t[np.isfinite(t)]
        if t.size:
            total = t.sum()
            spent = (f"{total / 3600:.1f} h" if total >= 3600 else f"{total / 60:.1f} min"
                     if total >= 60 else f"{total:.0f} s")
            prov.append(f"training time: {spent} in total, median {np.median(t):.1f} s per run")
    if "git_sha" in df.columns:
        shas = [x for x in df["git_sha"].dropna().unique().tolist() if x]
        if shas:
            prov.append("code version(s): " + ", ".join(sorted(map(str, shas))[:5])
                        + (" …" if len(shas) > 5 else ""))
    return Overview(varied, counts, missing, errors, prov)


def _rows_missing_seeds(ok: pd.DataFrame) -> list[str]:
    seeds = ok.groupby("row")["seed"].agg(set)
    if seeds.empty:
        return []
    full = set().union(*seeds)
    out = [f"{r}: {len(s)} of {len(full)} seeds (missing {', '.join(map(str, sorted(full - s)))})"
           for r, s in seeds.items() if full - s]
    return out


# ----------------------------------------------------------------------------- writing


@dataclass
class StudyReport:
    study: Study
    overview: Overview
    sections: list[Section]
    rows_missing: list[str]


def build_study(study: Study, out: Path, n_boot: int, figures: bool,
                jobs: int = 1) -> StudyReport:
    """Every applicable section of one study, tables and figures written under `out`."""
    with _timed("overview"):
        ov = overview(study)
    ok_all = study.ok
    if not ok_all.empty and "accuracy" not in ok_all.columns and not any(
            c.startswith("attn_auc") for c in ok_all.columns):
        raise StoreError(f"{study.path / 'trials'}: rows with status ok but no metric columns "
                         "(missing column(s) accuracy, attn_auc_l0)")
    sections: list[Section] = []
    rows_missing: list[str] = []
    for spec in SECTIONS.values():
        ok = ok_all[spec.rows(ok_all).to_numpy(dtype=bool)] if not ok_all.empty else ok_all
        if ok.empty:
            continue
        with _timed("labels"):
            ok = add_variant(ok)
            axes = row_axes(ok)
            ok = add_rows(ok, axes)
            rows = row_order(ok)
            rows_missing += _rows_missing_seeds(ok)
        ctx = Context(study, ok, axes, rows, out / "tables", out / "figures", n_boot, figures,
                      jobs)
        sec = spec.build(ctx)
        with _timed("write tables"):
            for t in sec.tables:
                sec.files += t.save(ctx.tables_dir, f"{study.name}__{t.name}")
        sections.append(sec)
    return StudyReport(study, ov, sections, rows_missing)


CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0 auto;max-width:1180px;
padding:1.5em;color:#222;line-height:1.45}
h1{border-bottom:2px solid #335;padding-bottom:.2em}h2{margin-top:2em;border-bottom:1px solid #aab}
table.t{border-collapse:collapse;font-size:13px;margin:.6em 0;font-variant-numeric:tabular-nums}
table.t th,table.t td{padding:3px 8px;text-align:right;white-space:nowrap}
table.t td:first-child{white-space:normal;min-width:12em;max-width:24em}
table.t th{border-bottom:1px solid #333;background:#f4f5f8}table.t th[colspan]{text-align:center}
table.t td:first-child,
table.t th:first-child{text-align:left}table.t tr:nth-child(even) td{background:#fafbfc}
table.t thead tr:first-child th{border-top:2px solid #333}table.t tbody tr:last-child td{
border-bottom:2px solid #333}.note{font-size:12px;color:#555;margin:.2em 0}
.scroll{overflow-x:auto}figure{margin:1em 0}figure img{max-width:100%;border:1px solid #ddd}
figcaption{font-size:13px;color:#444}.findings li{margin:.3em 0}.kv td{padding:1px 10px 1px 0}
.warn{color:#a33}nav a{margin-right:1em}
.banner{background:#fff4ce;border:2px solid #d9a400;border-radius:4px;padding:.6em 1em;
margin:1em 0;font-weight:600}
"""


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def render_html(reports: list[StudyReport], results_dir: Path, elapsed: float) -> str:
    """One self-contained page: inline CSS, images as data URIs, no scripts, no links out."""
    e = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             "<title>Ablation report</title>", f"<style>{CSS}</style></head><body>",
             "<h1>Node attention and pooling in GNNs: ablation report</h1>",
             f"<p>Store: <code>{e(str(results_dir))}</code> · {len(reports)} stud"
             f"{'y' if len(reports) == 1 else 'ies'} · generated {e(time.strftime('%Y-%m-%d %H:%M'))}"
             f" in {elapsed:.1f} s</p>",
             "<nav>" + "".join(f'<a href="#{e(r.study.name)}">{e(r.study.name)}</a>'
                               for r in reports) + "</nav>"]
    for r in reports:
        s, ov = r.study, r.overview
        parts.append(f'<h2 id="{e(s.name)}">Study: {e(s.name)}</h2>')
        for b in [b for sec in r.sections for b in sec.banner]:
            parts.append(f"<div class='banner' role='alert'>⚠ {e(b)}</div>")
        allf = [f for sec in r.sections for f in sec.findings]
        if allf:
            parts.append("<h3>Findings</h3><ul class='findings'>"
                         + "".join(f"<li>{e(f)}</li>" for f in allf) + "</ul>")
        parts.append("<h3>What varied</h3><ul>" + ("".join(f"<li>{e(v)}</li>" for v in ov.varied)
                                                  or "<li>nothing (one configuration)</li>")
                     + "</ul>")
        parts.append("<h3>Status</h3><table class='kv'>" + "".join(
            f"<tr><td>{e(k)}</td><td><b>{v}</b></td></tr>" for k, v in ov.counts.items())
            + "</table>")
        for m in ov.provenance:
            parts.append(f"<p class='note'>{e(m)}</p>")
        for m in ov.missing + r.rows_missing + s.notes:
            parts.append(f"<p class='warn'>{e(m)}</p>")
        if ov.errors:
            parts.append("<p>Failures:</p><ul>" + "".join(
                f"<li><code>{e(m)}</code> × {c}</li>" for m, c in ov.errors) + "</ul>")
        for sec in r.sections:
            parts.append(f"<h3>{e(sec.title)}</h3>")
            for n in sec.notes:
                parts.append(f"<p class='note'>{e(n)}</p>")
            for t in sec.tables:
                parts.append(f"<h4>{e(t.title)}</h4><div class='scroll'>{t.to_html()}</div>")
            for f in sec.figures:
                parts.append(f"<figure><img alt='{e(f.name)}' src='data:image/png;base64,"
                             f"{_b64(f.png)}'><figcaption>{e(f.caption)}</figcaption></figure>")
        if not r.sections:
            parts.append("<p class='warn'>No finished runs to tabulate yet.</p>")
    parts.append(_method_html())
    parts.append("</body></html>")
    return "\n".join(parts)


METHOD = [
    "Accuracy and attention AUC are shown in percent, mean ± sample std (ddof = 1) over runs "
    "(one run = one seed of one trial).",
    f"95% CIs: percentile bootstrap of the mean, {stats.N_BOOT:,} resamples (fewer, at least "
    f"{stats.MIN_BOOT:,}, when n x B would exceed {stats.MAX_DRAWS:,}), fixed seed {stats.SEED}.",
    "Paired comparisons: each row against every row that differs from it in exactly one of the "
    "study's varied axes and holds that axis's reference value (softmax, unsup, threshold "
    "selection, global pooling; else the value most rows share), over the seeds both have; "
    "runs of one seed are averaged. One test: the exact paired sign-flip (permutation) test of "
    "the mean difference (random sign patterns beyond 16 pairs), whose inversion is the 95% CI "
    "of the difference, so p < 0.05 exactly when the CI excludes 0. Holm-Bonferroni adjustment "
    "over all tested comparisons of a study; ↑/↓ mark Holm p < 0.05 against the row's first "
    "comparison.",
    f"Minimum data for claims: a comparison needs ≥ {stats.MIN_PAIRED_SEEDS} shared seeds for a "
    "p-value, a CI of its difference, a marker or a finding; best-model and paper sentences use "
    f"cells with ≥ {stats.MIN_PAIRED_SEEDS} seeds; a correlation is stated with ≥ "
    f"{stats.MIN_CORRELATION_POINTS} runs from ≥ {stats.MIN_PAIRED_SEEDS} seeds. A banner names "
    "what falls short.",
    "The paper's AUC column is compared with the AUC of the first pooling layer pooled over the "
    "nodes of all test graphs, as the papers report it (COLORS ORIG + LARGE + LARGE-C, TRIANGLES "
    f"ORIG + LARGE; stores without that column: {tables.column_name(AUC_SPLIT)}); models without "
    "attention are scored by leave-one-node-out attention. Paper numbers appear only where the "
    "recipes match: the papers' ChebyGIN rows ran each dataset's reference script (backbone "
    "chebygin_ref); the workshop table's COLORS numbers come from an earlier recipe than the "
    "final version's LARGE-C column.",
    "Exponential fit: least squares of acc = a·exp(b·AUC) + c on fractions: b located on a grid "
    "(a, c solved linearly for each b), then refined by scipy curve_fit; drawn only with ≥ "
    f"{stats.MIN_FIT_POINTS} points, ≥ {stats.MIN_FIT_DISTINCT} distinct AUC values and an AUC "
    f"span ≥ {100 * stats.MIN_FIT_SPAN:.0f} points.",
]


def _method_html() -> str:
    return "<h2>Methods</h2><ul>" + "".join(f"<li>{html.escape(m)}</li>" for m in METHOD) \
        + "</ul>"


def render_markdown(reports: list[StudyReport], results_dir: Path, out: Path,
                    elapsed: float) -> str:
    """report.md: the same content, figures linked from figures/."""
    lines = ["# Node attention and pooling in GNNs: ablation report", "",
             f"Store: `{results_dir}` · {len(reports)} study(ies) · generated "
             f"{time.strftime('%Y-%m-%d %H:%M')} in {elapsed:.1f} s", ""]
    for r in reports:
        s, ov = r.study, r.overview
        lines += [f"## Study: {s.name}", ""]
        lines += [f"> **⚠ {b}**\n" for sec in r.sections for b in sec.banner]
        allf = [f for sec in r.sections for f in sec.findings]
        if allf:
            lines += ["### Findings", ""] + [f"- {f}" for f in allf] + [""]
        lines += ["### What varied", ""] + ([f"- {v}" for v in ov.varied]
                                           or ["- nothing (one configuration)"]) + [""]
        lines += ["### Status", "", "| | |", "|:---|---:|"]
        lines += [f"| {k} | {v} |" for k, v in ov.counts.items()] + [""]
        lines += [f"*{m}*  " for m in ov.provenance] + [""]
        lines += [f"> {m}" for m in ov.missing + r.rows_missing + s.notes]
        if ov.errors:
            lines += ["", "Failures:", ""] + [f"- `{m}` × {c}" for m, c in ov.errors]
        lines.append("")
        for sec in r.sections:
            lines += [f"### {sec.title}", ""] + [f"*{n}*" for n in sec.notes]
            for t in sec.tables:
                lines += [f"#### {t.title}", "", t.to_markdown(), ""]
            for f in sec.figures:
                rel = f.png.relative_to(out).as_posix()
                lines += [f"![{f.name}]({rel})", "", f"*{f.caption}* "
                          f"([SVG]({f.svg.relative_to(out).as_posix()}))", ""]
    lines += ["## Methods", ""] + [f"- {m}" for m in METHOD] + [""]
    return "\n".join(lines)


def _summary(reports: list[StudyReport]) -> dict:
    def clean(v):
        return None if isinstance(v, float) and not math.isfinite(v) else v

    return {r.study.name: {
        "counts": r.overview.counts, "missing": r.overview.missing + r.rows_missing,
        "banner": [b for s in r.sections for b in s.banner],
        "findings": [f for s in r.sections for f in s.findings],
        "tables": [str(p) for s in r.sections for p in s.files],
        "figures": [str(p) for s in r.sections for f in s.figures for p in (f.png, f.svg)],
        "fits": {k: {kk: clean(vv) for kk, vv in v.items()} for s in r.sections
                 for f in s.figures if f.name == "acc_vs_auc"
                 for k, v in f.info.get("fits", {}).items()},
    } for r in reports}


def write_report(results_dir: str | Path, out: str | Path = "report",
                 studies: list[str] | None = None, n_boot: int = stats.N_BOOT,
                 figures: bool = True, cache: bool = True, jobs: int = 1) -> dict:
    """Read the store, write every output under `out`; returns the summary (also JSON).

    With `cache`, `out/.cache/` keeps a consolidated copy of the rows read, so that the
    next report on a growing study reads only the new trial files. `jobs` > 1 draws the
    figures in that many forked processes (worth it on an idle multi-core machine only)."""
    t0 = time.perf_counter()
    LAST_TIMINGS.clear()
    results_dir, out = Path(results_dir), Path(out)
    if results_dir.exists() and out.resolve().is_relative_to(results_dir.resolve()):
        raise StoreError(f"--out {out} is inside the result store {results_dir}; "
                         "choose a folder outside it (the store is never written)")
    with _timed("load"):
        loaded = load_store(results_dir, studies, out / ".cache" if cache else None)
    out.mkdir(parents=True, exist_ok=True)
    reports = [build_study(s, out, n_boot, figures, jobs) for s in loaded]
    elapsed = time.perf_counter() - t0
    with _timed("write report"):
        (out / "report.md").write_text(render_markdown(reports, results_dir, out, elapsed),
                                       encoding="utf-8")
        (out / "report.html").write_text(render_html(reports, results_dir, elapsed),
                                         encoding="utf-8")
    summary = _summary(reports)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str),
                                      encoding="utf-8")
    LAST_TIMINGS["total"] = time.perf_counter() - t0
    (out / "timings.json").write_text(json.dumps(LAST_TIMINGS, indent=1), encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit code (2 on bad input)."""
    p = argparse.ArgumentParser(prog="python -m analysis.report", description=DESCRIPTION)
    p.add_argument("results_dir", help="result store (RESULTS_DIR/<study>/trials/*.parquet)")
    p.add_argument("--study", nargs="+", action="extend", metavar="NAME",
                   help="only these studies (default: all)")
    p.add_argument("--out", default="report", help="output folder (default: ./report)")
    p.add_argument("--n-boot", type=int, default=stats.N_BOOT, help="bootstrap resamples")
    p.add_argument("--no-figures", action="store_true", help="tables and report only")
    p.add_argument("--jobs", type=int, default=1,
                   help="processes drawing figures (default 1; more helps on idle multi-core "
                   "machines)")
    p.add_argument("--no-cache", action="store_true",
                   help="read every file (default: reuse OUT/.cache for unchanged files)")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    try:
        summary = write_report(a.results_dir, a.out, a.study, a.n_boot, not a.no_figures,
                               not a.no_cache, a.jobs)
    except StoreError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    n_t = sum(len(v["tables"]) for v in summary.values())
    n_f = sum(len(v["figures"]) for v in summary.values())
    print(f"wrote {Path(a.out) / 'report.html'} and report.md: {len(summary)} study(ies), "
          f"{n_t} table files, {n_f} figure files in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
