"""The pages of a report: a self-contained `report.html` (inline CSS, figures as data URIs,
no scripts), `report.md` (figures linked from figures/), the Methods paragraph both
share, and the per-study summary written to `summary.json`.
"""

from __future__ import annotations

import base64
import html
import math
import time
from dataclasses import dataclass
from pathlib import Path

from analysis import stats
from analysis.formatting import column_name
from analysis.load import Study
from analysis.overview import Overview
from analysis.reference import AUC_SPLIT
from analysis.sections import Section


@dataclass
class StudyReport:
    """One study as the pages show it: its overview, sections and rows short of seeds."""

    study: Study
    overview: Overview
    sections: list[Section]
    rows_missing: list[str]


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
    "95% CI of a mean: Student-t, mean ± t(n − 1, 0.975)·s/√n over the n runs, shown from "
    f"{stats.MIN_PAIRED_SEEDS} runs on. Simulated at 5 and 10 runs it covers the true mean 95% "
    "of the time on normal data and 92-93% on skewed, bounded accuracy-like data (Beta(8, 2)); "
    "the percentile bootstrap of earlier versions covered 82-90%. Sign-flip tests beyond 16 "
    f"pairs draw {stats.N_BOOT:,} random sign patterns (fewer, at least {stats.MIN_BOOT:,}, "
    f"when n x B would exceed {stats.MAX_DRAWS:,}), fixed seed {stats.SEED}.",
    "Paired comparisons: each row against every row that differs from it in exactly one of the "
    "study's varied axes and holds that axis's reference value (softmax, unsup, threshold "
    "selection, global pooling; else the value most rows share), over the seeds both have; "
    "runs of one seed are averaged. One test: the exact paired sign-flip (permutation) test of "
    "the mean difference (random sign patterns beyond 16 pairs), whose inversion is the 95% CI "
    "of the difference, so p < 0.05 exactly when the CI excludes 0. Holm-Bonferroni adjustment "
    "over all tested comparisons of a study; ↑/↓ mark Holm p < 0.05 against the row's first "
    "comparison.",
    "Under k-fold cross-validation (data.protocol: cv; both rows' runs folds of the same "
    "k-fold CV) the unit is the fold, not the seed: per fold the mean over the seeds both "
    "rows ran on it (they share its test graphs), paired over the folds both rows have, and "
    "the corrected resampled t-test of Nadeau & Bengio (2003): the k per-fold differences' "
    "mean, variance (1/k + 1/(K − 1))·s² for K-fold CV (the folds' training sets overlap, so "
    "the plain paired t over folds is too liberal), t with k − 1 degrees of freedom, p and "
    "the 95% CI from it; the statistics table's test column names the test of each line, "
    "and a comparison needs ≥ "
    f"{stats.MIN_PAIRED_SEEDS} shared folds.",
    "On a study run with adaptive seeds (its adaptive.json) the ↑/↓ markers, and ≈ for "
    "'equivalent', are the stored decisions of its anytime-valid confidence sequence, on the "
    "column it decided; the sign-flip p-values of its statistics table are fixed-n numbers on "
    "the seeds the adaptive rounds happened to run, descriptive only (optional stopping), and "
    "mark nothing.",
    "Robust aggregates (Agarwal et al., NeurIPS 2021): the interquartile mean (floor(n/4) runs "
    "cut from each end) with a percentile bootstrap 95% interval (scipy.stats.bootstrap, "
    "stratified by trial where a row pools several), and P(row > baseline) over shared seeds, "
    "ties counted half, with a bootstrap interval over the seed pairs; descriptive. Beside each "
    "dataset's IQM bars, every run is a dot, far runs (beyond 3 IQR outside the quartiles and "
    "5 points from the median) in red.",
    f"Minimum data for claims: a comparison needs ≥ {stats.MIN_PAIRED_SEEDS} shared seeds for a "
    "p-value, a CI of its difference, a marker or a finding; best-model and paper sentences use "
    f"cells with ≥ {stats.MIN_PAIRED_SEEDS} seeds; a correlation is stated with ≥ "
    f"{stats.MIN_CORRELATION_POINTS} runs from ≥ {stats.MIN_PAIRED_SEEDS} seeds. A banner names "
    "what falls short.",
    "The paper's AUC column is compared with the AUC of the first pooling layer pooled over the "
    "nodes of all test graphs, as the papers report it (COLORS ORIG + LARGE + LARGE-C, TRIANGLES "
    f"ORIG + LARGE; stores without that column: {column_name(AUC_SPLIT)}); models without "
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


def summarise(reports: list[StudyReport]) -> dict:
    """summary.json: per study its counts, missing pieces, banner, findings, files and fits."""

    def clean(v: object) -> object:
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
