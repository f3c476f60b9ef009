"""`Table`, a laid-out table, and how it is written: Markdown, LaTeX (booktabs), HTML and CSV.

A `Table` holds header rows of (text, colspan), body rows of text, bold flags, notes and
the numbers behind it. `to_html` cuts a table wider than `MAX_HTML_COLUMNS` value
columns into parts between its column groups; `save` writes stem.md, stem.tex and
stem.csv.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.formatting import DOWN, UP

MAX_HTML_COLUMNS = 8  # value columns per HTML table part: wider tables are cut into parts


@dataclass
class Table:
    """A rendered table: header rows of (text, colspan), body rows, bold flags, notes."""

    name: str  # file stem
    title: str
    header: list[list[tuple[str, int]]]
    body: list[list[str]]
    bold: list[list[bool]]
    data: pd.DataFrame  # the numbers, saved as CSV
    notes: list[str] = field(default_factory=list)
    align: str = ""  # LaTeX column spec; default l + r...

    def to_markdown(self) -> str:
        width = len(self.body[0]) if self.body else sum(s for _, s in self.header[-1])
        names = [""] * width
        for hrow in self.header:
            i = 0
            for text, span in hrow:
                for j in range(i, i + span):
                    names[j] = (names[j] + " " + text).strip() if text else names[j]
                i += span
        spec = self.align if len(self.align) == width else "l" + "r" * (width - 1)
        lines = ["| " + " | ".join(_md_escape(n) for n in names) + " |",
                 "|" + "|".join(":---" if a == "l" else "---:" for a in spec) + "|"]
        for cells, bolds in zip(self.body, self.bold):
            lines.append("| " + " | ".join(f"**{_md_escape(c)}**" if b and c else _md_escape(c)
                                           for c, b in zip(cells, bolds)) + " |")
        out = "\n".join(lines)
        if self.notes:
            out += "\n\n" + "\n".join(f"*{n}*  " for n in self.notes)
        return out

    def to_latex(self, label: str = "") -> str:
        width = len(self.body[0]) if self.body else sum(s for _, s in self.header[-1])
        spec = self.align or "l" + "r" * (width - 1)
        lines = [r"\begin{table}[t]", r"\centering", r"\small",
                 rf"\caption{{{_tex(self.title)}}}"]
        if label:
            lines.append(rf"\label{{{label}}}")
        lines += [rf"\begin{{tabular}}{{{spec}}}", r"\toprule"]
        for k, hrow in enumerate(self.header):
            cells, rules, i = [], [], 1
            for text, span in hrow:
                if span > 1:
                    cells.append(rf"\multicolumn{{{span}}}{{c}}{{{_tex(text)}}}")
                    if k < len(self.header) - 1 and text:
                        rules.append(rf"\cmidrule(lr){{{i}-{i + span - 1}}}")
                else:
                    cells.append(_tex(text))
                i += span
            lines.append(" & ".join(cells) + r" \\")
            if rules:
                lines.append(" ".join(rules))
        lines.append(r"\midrule")
        for cells, bolds in zip(self.body, self.bold):
            lines.append(" & ".join(rf"\textbf{{{_tex(c)}}}" if b and c else _tex(c)
                                    for c, b in zip(cells, bolds)) + r" \\")
        lines += [r"\bottomrule", r"\end{tabular}"]
        if self.notes:
            lines.append(r"\par\smallskip\footnotesize " + " ".join(_tex(n) for n in self.notes))
        lines.append(r"\end{table}")
        return "\n".join(lines) + "\n"

    def to_html(self, max_cols: int = MAX_HTML_COLUMNS) -> str:
        """HTML tables: one, or several parts of at most `max_cols` value columns (each
        repeating the key columns) when the table is wider, so nothing is cut off."""
        out = []
        for part in self.column_parts(max_cols):
            out += ['<table class="t">', "<thead>"]
            for hrow in part.header:
                out.append("<tr>" + "".join(
                    f'<th colspan="{s}">{html.escape(t)}</th>' if s > 1
                    else f"<th>{html.escape(t)}</th>" for t, s in hrow) + "</tr>")
            out.append("</thead><tbody>")
            for cells, bolds in zip(part.body, part.bold):
                out.append("<tr>" + "".join(
                    f"<td><b>{html.escape(c)}</b></td>" if b and c else f"<td>{html.escape(c)}</td>"
                    for c, b in zip(cells, bolds)) + "</tr>")
            out.append("</tbody></table>")
        if self.notes:
            out.append("".join(f'<p class="note">{html.escape(n)}</p>' for n in self.notes))
        return "\n".join(out)

    def column_parts(self, max_cols: int = MAX_HTML_COLUMNS) -> list[Table]:
        """The table cut between its column groups (the first header row's spans) into
        parts of at most `max_cols` value columns, each repeating the leading key columns
        (those with an empty group header). A table with one header row stays whole."""
        top = self.header[0]
        keys = 0
        while keys < len(top) and top[keys] == ("", 1):
            keys += 1
        groups = [(t, n) for t, n in top[keys:]]
        if len(self.header) < 2 or sum(n for _, n in groups) <= max_cols \
                or any(len(h) != keys + sum(n for _, n in groups) for h in self.header[1:]):
            return [self]
        pieces: list[tuple[str, int, int]] = []  # (group text, first value column, width)
        start = keys
        for text, n in groups:
            for off in range(0, n, max_cols):
                pieces.append((text, start + off, min(max_cols, n - off)))
            start += n
        parts, cur = [], []
        for piece in pieces:
            if cur and sum(w for _, _, w in cur) + piece[2] > max_cols:
                parts.append(cur)
                cur = []
            cur.append(piece)
        parts.append(cur)
        out = []
        for part in parts:
            cols = list(range(keys)) + [c for _, c0, w in part for c in range(c0, c0 + w)]
            header = [top[:keys] + [(t, w) for t, _, w in part]]
            header += [[h[c] for c in cols] for h in self.header[1:]]
            out.append(Table(self.name, self.title, header, [[r[c] for c in cols] for r in self.body],
                             [[b[c] for c in cols] for b in self.bold], self.data))
        return out

    def save(self, folder: Path, stem: str) -> list[Path]:
        """Write stem.md, stem.tex and stem.csv into `folder`; returns the paths."""
        folder.mkdir(parents=True, exist_ok=True)
        paths = [folder / f"{stem}.md", folder / f"{stem}.tex", folder / f"{stem}.csv"]
        paths[0].write_text(f"### {self.title}\n\n{self.to_markdown()}\n", encoding="utf-8")
        paths[1].write_text(self.to_latex(label=f"tab:{stem}"), encoding="utf-8")
        self.data.to_csv(paths[2], index=False)
        return paths


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|")


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
        "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}",
        "±": r"$\pm$", UP: r"$^{\uparrow}$", DOWN: r"$^{\downarrow}$", "Δ": r"$\Delta$",
        "−": "-", "–": "--", "≤": r"$\le$", "≥": r"$\ge$", "²": r"$^2$", "·": r"$\cdot$",
        "α": r"$\alpha$", "†": r"$^\dagger$", "→": r"$\rightarrow$",
        "<": r"$<$", ">": r"$>$", "§": r"\S{}", "≈": r"$\approx$", "×": r"$\times$",
        "∞": r"$\infty$"}


def _tex(s: str) -> str:
    return "".join(_TEX.get(ch, ch) for ch in s)
