"""The result store's file format, shared by the runner (`ablate.runner.execute.store`) and the analysis.

- `result_store.schema`: every column of a trial or curves file per trial kind (graph, SDC),
  with its type, nullability and meaning; typed tables from rows; the version in each file.
- `result_store.legacy`: files written before the declared schema (version 0: JSON strings,
  types pandas inferred), converted to the declared types in memory when read.
- `result_store.writer`: how one file is written (its version in the footer).
- `result_store.reader`: the one reader, a `pyarrow.dataset` over a store folder's files.
- `result_store.schema_doc`: the schema as the Markdown table of docs/runner.md.

It imports pyarrow only, neither `ablate` nor `analysis`, so both may use it: the analysis
imports nothing from `ablate` (DESIGN.md, "Layers of the house").
"""
