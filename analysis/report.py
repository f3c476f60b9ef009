"""Write the tables, figures, findings and a self-contained HTML report of an ablate result store.

`python -m analysis.report RESULTS_DIR [--study NAME ...] [--out DIR]`. For every study of
the store: what varied, how many trials and runs are ok, failed or missing, then the
sections that apply to its rows (a registry: `register_section`), each contributing
tables (Markdown, LaTeX, CSV), figures (PNG, SVG), findings and, when the store has too
few seeds for claims, a banner saying so. Writes `DIR/report.md`, a self-contained
`DIR/report.html` (images embedded), and `DIR/tables/`, `DIR/figures/`,
`DIR/summary.json`. The store is only read. `DIR` defaults to `report/` beside the store
(`results/` -> `./report`, which `.gitignore` lists; `default_out`). Bad input exits with
code 2 and a one-line message; foreign or damaged files are all named at once, one line
each, with what to do (as the runner's `verify=true`).

This module runs a report end to end (`write_report`, `build_study`) and holds the
command line (`main`). The pieces: the section registry `analysis.sections`, the built-in
sections `analysis.builtin_sections` and the adaptive-seed decisions
`analysis.adaptive_section`, the study overview `analysis.overview`,
the pages `analysis.render`, phase timings `analysis.timings`. The names that were
defined here before the module was split stay importable from here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from analysis import stats
from analysis.adaptive_decisions import default_seeds, expected_seeds, read_decisions
from analysis.adaptive_section import adaptive_section  # registers gnn, sdc, then adaptive
from analysis.builtin_sections import gnn_section, sdc_section
from analysis.load import StoreError, Study, load_store
from analysis.overview import DESCRIBED_AXES, Overview, overview, rows_missing_seeds
from analysis.render import CSS, METHOD, StudyReport, render_html, render_markdown, summarise
from analysis.sections import SECTIONS, Context, Section, SectionFn, SectionSpec, register_section
from analysis.timings import LAST_TIMINGS, timed
from analysis.variants import add_data_axes, add_rows, add_variant, row_axes, row_order

__all__ = [
    "CSS", "DESCRIBED_AXES", "DESCRIPTION", "LAST_TIMINGS", "METHOD", "SECTIONS", "Context",
    "Overview", "Section", "SectionFn", "SectionSpec", "StudyReport", "adaptive_section",
    "build_study", "gnn_section", "main", "overview", "register_section", "render_html", "render_markdown",
    "sdc_section", "write_report",
]

DESCRIPTION = ("Read an ablate result store (read-only) and write, per study, paper tables "
               "(Markdown, LaTeX, CSV), figures (PNG, SVG), statistics with one-axis paired "
               "comparisons, findings, report.md and a self-contained report.html.")


def build_study(study: Study, out: Path, n_boot: int, figures: bool,
                jobs: int = 1) -> StudyReport:
    """Every applicable section of one study, tables and figures written under `out`."""
    with timed("overview"):
        ov = overview(study)
    ok_all = study.ok
    if not ok_all.empty and "accuracy" not in ok_all.columns and not any(
            c.startswith("attn_auc") for c in ok_all.columns):
        raise StoreError(f"{study.path / 'trials'}: rows with status ok but no metric columns "
                         "(missing column(s) accuracy, attn_auc_l0)")
    sections: list[Section] = []
    rows_missing: list[str] = []
    labelled: dict[bytes, tuple] = {}  # the rows a section reads -> their labels, made once
    for spec in SECTIONS.values():
        if ok_all.empty:
            continue
        mask = spec.rows(ok_all).to_numpy(dtype=bool)
        if not mask.any():
            continue
        if mask.tobytes() not in labelled:
            with timed("labels"):
                ok = add_data_axes(add_variant(ok_all[mask]))
                axes = row_axes(ok)
                ok = add_rows(ok, axes)
                labelled[mask.tobytes()] = (ok, axes, row_order(ok))
                rows_missing += rows_missing_seeds(ok, *_adaptive_seeds(study))
        ctx = Context(study, *labelled[mask.tobytes()], out / "tables", out / "figures", n_boot,
                      figures, jobs)
        sec = spec.build(ctx)
        if not (sec.tables or sec.figures or sec.findings or sec.notes or sec.banner):
            continue  # nothing to say on this study (the adaptive section of fixed seeds)
        with timed("write tables"):
            for t in sec.tables:
                sec.files += t.save(ctx.tables_dir, f"{study.name}__{t.name}")
        sections.append(sec)
    return StudyReport(study, ov, sections, rows_missing)


def _adaptive_seeds(study: Study) -> tuple[dict | None, int]:
    """The seeds each (row, dataset) pair of an adaptive-seed study was meant to get, and
    round 1's for the rest; (None, 0) for a study of fixed seeds."""
    doc = read_decisions(study.path)
    return (expected_seeds(doc), default_seeds(doc)) if doc else (None, 0)


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
    with timed("load"):
        loaded = load_store(results_dir, studies, out / ".cache" if cache else None)
    out.mkdir(parents=True, exist_ok=True)
    reports = [build_study(s, out, n_boot, figures, jobs) for s in loaded]
    elapsed = time.perf_counter() - t0
    with timed("write report"):
        (out / "report.md").write_text(render_markdown(reports, results_dir, out, elapsed),
                                       encoding="utf-8")
        (out / "report.html").write_text(render_html(reports, results_dir, elapsed),
                                         encoding="utf-8")
    summary = summarise(reports)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str),
                                      encoding="utf-8")
    LAST_TIMINGS["total"] = time.perf_counter() - t0
    (out / "timings.json").write_text(json.dumps(LAST_TIMINGS, indent=1), encoding="utf-8")
    return summary


def default_out(results_dir: str | Path) -> Path:
    """`report/` beside the result store (for one study's folder, beside the store holding
    it): never inside the store, and `./report` for the README's `results/`."""
    root = Path(results_dir).expanduser().resolve()
    if (root / "trials").is_dir():  # one study's folder
        root = root.parent
    return root.parent / "report"


def _shown(path: Path) -> str:
    """`path` relative to the working folder when it is under it, else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit code (2 on bad input)."""
    p = argparse.ArgumentParser(prog="python -m analysis.report", description=DESCRIPTION)
    p.add_argument("results_dir", help="result store (RESULTS_DIR/<study>/trials/*.parquet)")
    p.add_argument("--study", nargs="+", action="extend", metavar="NAME",
                   help="only these studies (default: all)")
    p.add_argument("--out", default=None,
                   help="output folder (default: report/ beside RESULTS_DIR, so ./report for "
                   "results/)")
    p.add_argument("--n-boot", type=int, default=stats.N_BOOT,
                   help="random sign patterns of a sign-flip test beyond 16 pairs")
    p.add_argument("--no-figures", action="store_true", help="tables and report only")
    p.add_argument("--jobs", type=int, default=1,
                   help="processes drawing figures (default 1; more helps on idle multi-core "
                   "machines)")
    p.add_argument("--no-cache", action="store_true",
                   help="read every file (default: reuse OUT/.cache for unchanged files)")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    out = Path(a.out) if a.out is not None else default_out(a.results_dir)
    try:
        summary = write_report(a.results_dir, out, a.study, a.n_boot, not a.no_figures,
                               not a.no_cache, a.jobs)
    except StoreError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    n_t = sum(len(v["tables"]) for v in summary.values())
    n_f = sum(len(v["figures"]) for v in summary.values())
    print(f"wrote {_shown(out / 'report.html')} and report.md: {len(summary)} study(ies), "
          f"{n_t} table files, {n_f} figure files in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
