"""Writing one result file: the table of a declared schema, its version in the footer.

`write(table, sink)` writes a table made by `result_store.schema.table` to a path or an
open binary file (the runner's atomic temp file). The file's key-value metadata holds the
schema's kind, part and version; the Arrow schema itself is not stored (every declared type
is plain Parquet: strings, int64, double, bool, lists of structs, read back as declared),
nor are column statistics (the reader never filters on them): both would only lengthen the
footer that every read of a store parses once per file.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq


def write(table: pa.Table, sink) -> None:
    """Write `table` (with its schema's metadata) to `sink`, a path or a binary file."""
    with pq.ParquetWriter(sink, table.schema, store_schema=False,
                          write_statistics=False) as w:
        w.write_table(table)
        if table.schema.metadata:
            w.add_key_value_metadata(table.schema.metadata)
