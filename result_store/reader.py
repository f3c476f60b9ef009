"""The one reader of the result store: a `pyarrow.dataset` over a folder's Parquet files.

`read(files, part)` parses every file's footer once (a dataset fragment), sorts the files
by the schema version they declare, scans each version's fragments as one dataset with a
column projection (and the source file as a column), converts version-0 rows to the
declared types (`result_store.legacy`) and returns one table. The runner's resume scan and
`verify=true` (`ablate.runner.execute.store`) and the analysis (`analysis.load`) call it.

A file that is not a result file of either version (foreign), cannot be parsed, or holds a
damaged page becomes one line in `Scan.problems`, saying what to do with it
(`bad_file_advice`); a file of a newer schema version raises `NewerSchema`. Nothing is
ever written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from result_store import legacy, schema

FILE = "_file"  # the source file's path (`file_key`), a column where the caller asks for it
_TRIAL_ID = re.compile(r"^[0-9a-f]{12}$")  # the runner's trial file names


class NewerSchema(Exception):
    """A file written by a newer version of the code (its schema version is above ours)."""

    def __init__(self, path: Path, version: int):
        self.path, self.version = path, version
        super().__init__(f"{path}: written with result schema v{version}, newer than this "
                         f"code reads (v{schema.VERSION}); upgrade ablate to read it")


@dataclass
class Scan:
    """What `read` found: the rows, each file's schema version, the bad files."""

    table: pa.Table
    versions: dict[Path, int] = field(default_factory=dict)  # every readable result file
    problems: list[str] = field(default_factory=list)  # one line per foreign or damaged file
    bad: list[Path] = field(default_factory=list)  # the files those lines name


def file_key(path: Path | str) -> str:
    """A file's name in the `FILE` column: its absolute path (symbolic links not resolved)."""
    return os.path.abspath(path)


def bad_file_advice(path: Path, part: str = "trials") -> str:
    """What to do with a result file that cannot be used (the runner's `verify=true` and the
    report say the same): a file not named like a trial is foreign (move it out); a damaged
    trial's file can be deleted to rerun it (a curves file together with its trial file)."""
    if not _TRIAL_ID.match(path.stem):
        return f"not written by ablate: move it out of {path.parent}"
    if part == "curves":
        return f"delete it and {path.parent.parent / 'trials' / path.name} to rerun that trial"
    return "delete it to rerun that trial"


def result_files(folder: Path) -> list[Path]:
    """The result files of a store folder: `*.parquet`, not hidden (temp files are)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.parquet")
                  if p.is_file() and not p.name.startswith((".", "_")))


def read(files: Sequence[Path], part: str = "trials", required: Collection[str] = (),
         columns: Callable[[str], bool] | Collection[str] | None = None, whole: bool = False,
         file_column: bool = True) -> Scan:
    """Rows of `files` (`part`: "trials" or "curves"), in one table.

    `required`: columns a version-0 file must have to be a result file (a versioned one has
    its declared columns). `columns`: the columns to return (a set of names or a predicate;
    None = all); with `whole`, every column is read anyway, so that a damaged page anywhere
    is found. `file_column`: add `FILE`, each row's source file. Raises `NewerSchema`.
    """
    want = columns if callable(columns) or columns is None else set(columns).__contains__
    fmt = ds.ParquetFileFormat(
        default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=False))
    fs = pa.fs.LocalFileSystem()
    scan = Scan(pa.table({}))
    groups: dict[int, list] = {}
    seen: list[tuple[pa.Schema, tuple[int | None, str]]] = []  # the files of a store share few
    for f in files:
        try:
            frag = fmt.make_fragment(file_key(f), fs)
            phys = frag.physical_schema  # parses the footer once; the scan reuses it
        except (OSError, pa.ArrowException) as e:
            _problem(scan, f, f"not a readable Parquet file ({_first(e)}); "
                     f"{bad_file_advice(Path(f), part)}")
            continue
        known = next((got for sch, got in seen if sch.equals(phys, check_metadata=True)), None)
        version, why = known or _classify(phys, part, required)
        if known is None and len(seen) < 16:
            seen.append((phys, (version, why)))
        if version is not None and version > schema.VERSION:
            raise NewerSchema(Path(f), version)
        if why:
            _problem(scan, f, f"not an ablate {part[:-1]} file: {why}; move it out of "
                     f"{Path(f).parent}")
            continue
        scan.versions[Path(f)] = version
        if frag.metadata.num_rows:  # an empty file (a trial whose seeds all failed: no curves)
            groups.setdefault(version, []).append((f, frag, phys))
    tables = []
    for version, members in sorted(groups.items(), reverse=True):
        got = _scan(members, fmt, fs, want, whole, part, scan)
        if got is None:
            continue
        if version == 0:
            got = _upgrade(got, members, part, scan)
        if got is not None:
            tables.append(got)
    if tables:
        table = tables[0] if len(tables) == 1 else pa.concat_tables(
            tables, promote_options="permissive")
        scan.table = table if file_column else table.drop_columns([FILE])
    return scan


def _classify(phys: pa.Schema, part: str, required: Collection[str]) -> tuple[int | None, str]:
    """(schema version, why it is foreign or '')."""
    version = schema.version_of(phys)
    if version is None:
        return None, "its metadata declares a schema version that is not a number"
    if version > schema.VERSION:
        return version, ""
    if version == 0:
        missing = [c for c in required if c not in phys.names]
        if missing:
            return 0, (f"neither schema v{schema.VERSION} (no version in its metadata) nor v0 "
                       f"(missing column(s) {', '.join(missing)})")
        return 0, ""
    declared = schema.kind_of(phys)
    if declared is None or declared[0] not in schema.KINDS or declared[1] != part:
        return version, f"schema v{version} of kind/part {declared}, not a {part} file"
    names = set(phys.names)
    missing = [c.name for c in schema.columns(declared[0], part)
               if not c.per_layer and c.since <= version and c.name not in names]
    bad = schema.mismatches(phys, part)
    if missing or bad:
        return version, (f"declares schema v{version} but its columns differ "
                         f"({'; '.join([*(f'no {m}' for m in missing), *bad][:3])})")
    return version, ""


def _scan(members: list, fmt, fs, want, whole: bool, part: str, scan: Scan) -> pa.Table | None:
    """One version's fragments as one dataset; projected rows with the file column."""
    try:
        unified = pa.unify_schemas([p for _, _, p in members], promote_options="permissive")
    except (pa.ArrowException, TypeError) as e:
        for f, _, _ in members:
            _problem(scan, f, f"its column types disagree with the other files' ({_first(e)})")
        return None
    dataset = ds.FileSystemDataset([fr for _, fr, _ in members], unified, fmt, fs)
    keep = [c for c in unified.names if want is None or want(c)]
    read_cols = list(unified.names) if whole else keep
    try:
        table = dataset.to_table(columns=[*read_cols, "__filename"])
    except pa.ArrowException:  # a damaged page: name every file that holds one
        good = []
        for f, frag, phys in members:
            try:
                frag.to_table(columns=read_cols)
                good.append((f, frag, phys))
            except pa.ArrowException as err:
                _problem(scan, f, f"corrupt Parquet data ({_first(err)[:120]}); "
                         f"{bad_file_advice(Path(f), part)}")
        if len(good) == len(members):
            raise
        return _scan(good, fmt, fs, want, whole, part, scan) if good else None
    table = table.select([*keep, "__filename"])
    return table.rename_columns([*keep, FILE])


def _upgrade(table: pa.Table, members: list, part: str, scan: Scan) -> pa.Table | None:
    """Version-0 rows converted; when a column does not convert, the files that hold such
    values are named and the others kept."""
    try:
        return legacy.upgrade(table, part)
    except ValueError:
        pass
    good = []
    for f, _, _ in members:
        rows = table.filter(pc.equal(table[FILE], file_key(f)))
        try:
            good.append(legacy.upgrade(rows, part))
        except ValueError as e:
            _problem(scan, f, f"schema v0 file whose {e}; {bad_file_advice(Path(f), part)}")
    return pa.concat_tables(good, promote_options="permissive") if good else None


def _problem(scan: Scan, f, line: str) -> None:
    scan.problems.append(f"{f}: {line}")
    scan.bad.append(Path(f))


def _first(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__
