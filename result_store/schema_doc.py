"""The declared schema as Markdown tables, the ones docs/runner.md shows between markers.

`markdown(part)` renders `result_store.schema.COLUMNS` of one part (trials or curves);
`fill(text)` replaces what stands between ``<!-- schema:PART -->`` and
``<!-- /schema:PART -->`` in a document with it. tests/test_store_schema.py checks that
docs/runner.md holds exactly these tables; to regenerate them after a schema change:

    python -m result_store.schema_doc docs/runner.md
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pyarrow as pa

from result_store import schema


def type_name(t: pa.DataType) -> str:
    """A column type as the docs write it (`list<struct<t: double, ...>>`)."""
    if pa.types.is_list(t):
        return f"list<{type_name(t.value_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ", ".join(f"{f.name}: {type_name(f.type)}" for f in t) + ">"
    return str(t)


def markdown(part: str = "trials") -> str:
    """One row per declared column of `part`: name, type, nullability, kinds, meaning."""
    lines = ["| column | type | null | kinds | meaning |", "|---|---|---|---|---|"]
    for c in schema.COLUMNS:
        if c.part != part:
            continue
        name = c.name  # a family (`_l{k}`): one column per pooling layer k
        lines.append(f"| `{name}` | {type_name(c.type)} | {'yes' if c.nullable else 'no'} | "
                     f"{', '.join(c.kinds)} | {c.meaning} |")
    return "\n".join(lines)


def _markers(part: str) -> tuple[str, str]:
    return f"<!-- schema:{part} -->", f"<!-- /schema:{part} -->"


def section(text: str, part: str) -> str | None:
    """What `text` holds between the markers of `part` (stripped), or None without them."""
    begin, end = _markers(part)
    m = re.search(re.escape(begin) + r"\n(.*?)" + re.escape(end), text, re.S)
    return m.group(1).strip() if m else None


def fill(text: str) -> str:
    """`text` with the tables of every part put between their markers."""
    for part in schema.PARTS:
        begin, end = _markers(part)
        block = f"{begin}\n{markdown(part)}\n{end}"
        text = re.sub(re.escape(begin) + r"\n.*?" + re.escape(end), lambda _, b=block: b, text,
                      flags=re.S)
    return text


if __name__ == "__main__":
    for name in sys.argv[1:]:
        path = Path(name)
        path.write_text(fill(path.read_text()))
