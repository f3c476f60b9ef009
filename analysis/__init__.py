"""Analysis of an `ablate` result store: paper tables, figures, statistics and a report.

`python -m analysis.report RESULTS_DIR [--study NAME ...] [--out DIR]` reads the
Parquet store read-only (`analysis.load`), summarises every study with Student-t
confidence intervals and paired comparisons of rows that differ in one axis
(`analysis.variants`; exact sign-flip test, Holm-corrected: `analysis.stats`,
`analysis.cells`; laid out by `analysis.tables`), draws the papers' figures
(`analysis.figures`), states a few automatically computed findings only where enough
seeds back them, else shows a banner (`analysis.findings`), and writes Markdown, LaTeX,
CSV, PNG/SVG, `report.md` and a self-contained `report.html` (`analysis.report`).
"""

from analysis.load import StoreError, Study, load_store

__all__ = ["StoreError", "Study", "load_store"]
