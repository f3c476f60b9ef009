"""JSON-string columns of the store (`acc_by_size`, `gt_mass_curve`) parsed for the figures.

`json_table` parses a whole column at once with pyarrow's C++ JSON reader; it gives None
when some value is not strict JSON (e.g. NaN), and `json_value` then parses values one
by one with the standard library.
"""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.json as pj


def json_table(values: list, wrap: str | None = None) -> pa.Table | None:
    """Parse a column of JSON strings with pyarrow (C++): one object per row, or each value
    wrapped as {wrap: value}. None when some value is not strict JSON (e.g. NaN)."""
    empty = "[]" if wrap else "{}"
    lines = [v if isinstance(v, str) and v.strip() else empty for v in values]
    if wrap:
        lines = [f'{{"{wrap}":{v}}}' for v in lines]
    try:
        return pj.read_json(io.BytesIO("\n".join(lines).encode()),
                            read_options=pj.ReadOptions(block_size=1 << 24))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


def json_value(s: object) -> object:
    """One JSON string parsed; None when it is empty, not a string or not JSON."""
    if not isinstance(s, str) or not s:
        return None
    try:
        return json.loads(s)
    except ValueError:
        return None
