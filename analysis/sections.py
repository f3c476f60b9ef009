"""The section registry: what a section of a study's report gets and gives, and how one
is registered.

A section is a function `Context -> Section` registered with `register_section(name,
rows)`, where `rows(df)` picks the ok rows it reads; the report runs the registered
sections in registration order and skips one whose rows are empty. `Context` carries
the study, its labelled ok rows and where to write; `Section` collects tables, figures,
findings, notes and the banner. The built-in sections are in `analysis.builtin_sections`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from analysis import stats
from analysis.load import Study
from analysis.table_render import Table
from analysis.variants import RowAxes

if TYPE_CHECKING:  # matplotlib and seaborn are imported only when figures are drawn
    from analysis.figure_style import Figure


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
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)  # analysis.figure_style.Figure
    findings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    banner: list[str] = field(default_factory=list)  # shown above the findings: too few seeds


@dataclass(frozen=True)
class SectionSpec:
    """A registered section: its name, which rows it reads and its builder."""

    name: str
    rows: Callable[[pd.DataFrame], pd.Series]  # which ok rows the section reads
    build: Callable[[Context], Section]


SECTIONS: dict[str, SectionSpec] = {}  # name -> spec, in registration order


SectionFn = Callable[["Context"], "Section"]


def register_section(name: str, rows: Callable[[pd.DataFrame], pd.Series]
                     ) -> Callable[[SectionFn], SectionFn]:
    """Register a section builder for the rows `rows(df)` selects (a boolean Series).

    Used as a decorator: `@register_section("sdc", lambda df: df.dataset.str.startswith("sdc"))`.
    Sections run in registration order; one whose rows are empty, or that builds nothing, is
    skipped.
    """
    def deco(fn: SectionFn) -> SectionFn:
        SECTIONS[name] = SectionSpec(name, rows, fn)
        return fn
    return deco
