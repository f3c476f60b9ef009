"""Files written before the declared schema (version 0), converted to it in memory.

Version 0 is what the store held before `result_store.schema`: each file's types were
whatever pandas inferred from its rows (an all-NaN column typed double or null, strings
as large_string), and the per-size accuracies and GT-mass curves were JSON text:
``acc_by_size`` a list of ``[lo, hi, accuracy, graphs]``, ``gt_mass_curve`` an object
``{"0.05": fraction, ...}`` (``{}`` without attention). `upgrade` casts a version-0 table's
declared columns to their declared types and parses the JSON into the nested types;
`native_value` does the same for one value (the writer accepts the old encodings too).
Nothing here writes: stores are converted when read, never rewritten.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from result_store import schema
from result_store.encodings import native_value  # noqa: F401  (re-exported: its home before)


def upgrade(table: pa.Table, part: str = "trials") -> pa.Table:
    """A version-0 table with every declared column in its declared type (other columns as
    they are). Raises ValueError naming a column that does not convert."""
    cols, names = [], []
    for name, col in zip(table.column_names, table.columns):
        c = schema.column(name, part)
        if c is not None and col.type != c.type:
            try:
                col = _nested(name, col) if name in schema.NESTED else _cast(col, c.type)
            except (pa.ArrowException, ValueError, TypeError, OverflowError) as e:
                first = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise ValueError(f"column {name!r} ({col.type}) does not convert to {c.type}: "
                                 f"{first}") from None
        cols.append(col)
        names.append(name)
    return pa.table(cols, names=names)


def _cast(col: pa.ChunkedArray, to: pa.DataType) -> pa.ChunkedArray:
    if pa.types.is_null(col.type):
        return pa.chunked_array([pa.nulls(len(col), to)])
    if pa.types.is_floating(col.type) and pa.types.is_integer(to):  # NaN stood for "none"
        col = pc.if_else(pc.is_nan(col), pa.scalar(None, col.type), col)
    return col.cast(to)


def _nested(name: str, col: pa.ChunkedArray) -> pa.ChunkedArray:
    """JSON text -> the nested type, parsed by pyarrow's JSON reader (C++) when every value
    is strict JSON, else value by value."""
    if pa.types.is_null(col.type):
        return pa.chunked_array([pa.nulls(len(col), schema.column(name).type)])
    values = col.to_pylist()
    fast = (_acc_by_size if name == "acc_by_size" else _mass_curve)(values)
    if fast is not None:
        return pa.chunked_array([fast])
    return pa.chunked_array([pa.array([native_value(name, v) for v in values],
                                      type=schema.column(name).type)])


def _parse(lines: list[str]) -> pa.Table | None:
    try:
        return pj.read_json(io.BytesIO("\n".join(lines).encode()),
                            read_options=pj.ReadOptions(block_size=1 << 24))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None  # not strict JSON (e.g. NaN): the caller parses value by value


def _text(v: object) -> str | None:
    return v if isinstance(v, str) and v.strip() else None


def _acc_by_size(values: list) -> pa.Array | None:
    texts = [_text(v) for v in values]
    tab = _parse([f'{{"b":{t or "null"}}}' for t in texts])
    if tab is None or "b" not in tab.column_names:
        return None
    outer = tab.column("b").combine_chunks()
    if not pa.types.is_list(outer.type) or not pa.types.is_list(outer.type.value_type):
        return None
    inner = pc.list_flatten(outer)
    if len(inner) and set(pc.list_value_length(inner).to_numpy(zero_copy_only=False)) != {4}:
        return None
    v = pc.list_flatten(inner).cast(pa.float64()).to_numpy(zero_copy_only=False).reshape(-1, 4)
    bins = pa.StructArray.from_arrays(
        [pa.array(v[:, 0].astype(np.int64)), pa.array(v[:, 1].astype(np.int64)),
         pa.array(v[:, 2]), pa.array(v[:, 3].astype(np.int64))],
        fields=list(schema.ACC_BY_SIZE.value_type))
    lengths = pc.fill_null(pc.list_value_length(outer), 0).to_numpy(zero_copy_only=False)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    return pa.ListArray.from_arrays(offsets, bins, type=schema.ACC_BY_SIZE,
                                    mask=pa.array([t is None for t in texts]))


def _mass_curve(values: list) -> pa.Array | None:
    texts = [_text(v) for v in values]
    tab = _parse([t or "{}" for t in texts])
    if tab is None:
        return None
    try:
        keys = sorted(tab.column_names, key=float)
    except ValueError:
        return None
    n, k = len(values), len(keys)
    frac = np.full((n, k), np.nan)
    present = np.zeros((n, k), bool)
    for j, key in enumerate(keys):
        c = tab.column(key)
        if not (pa.types.is_floating(c.type) or pa.types.is_integer(c.type)):
            return None
        present[:, j] = c.is_valid().to_numpy(zero_copy_only=False)
        frac[:, j] = c.cast(pa.float64()).fill_null(math.nan).to_numpy(zero_copy_only=False)
    if (present.any(1) & ~present.all(1)).any():
        return None  # rows with different thresholds: value by value
    has = present.all(1) & (k > 0)
    t = np.tile(np.array([float(x) for x in keys]), int(has.sum()))
    points = pa.StructArray.from_arrays([pa.array(t), pa.array(frac[has].ravel())],
                                        fields=list(schema.MASS_CURVE.value_type))
    offsets = np.zeros(n + 1, np.int64)
    offsets[1:] = np.cumsum(np.where(has, k, 0))
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), points,
                                    type=schema.MASS_CURVE, mask=pa.array(~has))
