"""Read the Parquet result store, read-only: studies, trial rows, per-epoch curves.

Layout (written by the runner): `RESULTS_DIR/<study>/trials/<trial_id>.parquet`, one
row per (trial, seed, split), and `RESULTS_DIR/<study>/curves/<trial_id>.parquet`,
one row per (trial, seed, evaluated epoch). `RESULTS_DIR` may also be one study's
folder (it holds `trials/`).

Files are read by the store's one reader (`result_store.reader`, shared with the
runner): a `pyarrow.dataset` over the folder with a column projection, so only the
columns the report uses are decoded; files written before the declared schema are
converted to it in memory. Nested columns (`acc_by_size`, `gt_mass_curve`) stay Arrow
lists of structs (`pd.ArrowDtype`). Bad input raises `StoreError` with a one-line
message; every foreign or damaged file of the store is named at once (`BadFiles`, one
line per file, with the runner's `verify=true` advice); a file of a newer schema version
ends the read with one line naming it; nothing is ever written under `RESULTS_DIR`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from result_store import reader
from result_store.reader import FILE

# identity columns every trial file must have (split defaults to "test" when absent)
TRIAL_REQUIRED = ("trial_id", "seed", "status", "dataset")
CURVE_REQUIRED = ("seed", "epoch")

IDENTITY = ("trial_id", "seed", "split", "status", "error", "attempt")
# Axes added to the trial config after results were stored (mirrors
# ablate.config.CHANGED_DEFAULTS["axes"]), with the value that reproduces what ran before: rows
# written earlier read as that value.
ADDED_AXES = {"scorer_relu": False, "lr_timing": "early"}
# lr_timing of a row whose trial drops no LR: its timing changed nothing (the trial id leaves
# it out, `ablate.config.lr_drops`), so its rows read as one value, whatever each one stored
# (rows of before issue 41 read as "early", later ones store "published")
NO_LR_DROP = ""
AXES = ("dataset", "data_params", "backbone", "K", "aggregation", "hidden", "filters", "readout",
        "dropout", "pool_layers", "scorer", "scorer_input", "scorer_relu", "selection", "threshold", "ratio",
        "normalizer", "supervision", "kl_weight", "init_dist", "init_scale", "epochs",
        "lr_decay_epochs", "lr_timing", "lr", "weight_decay", "batch_size", "seeds", "extra",
        # selective-dependence (ablate.trial.sdc) trials
        "task", "average_at", "entropy_lambda", "focus_hidden", "classify_hidden")
METRICS = ("accuracy", "ft", "acc_by_size", "gt_mass_curve", "cos_p_init", "nnz", "dist", "ent")
COST = ("train_s", "git_sha", "git_dirty", "device", "gpu_name", "cuda_version", "gpu_driver",
        "peak_gpu_mb")  # compute and provenance lines of the report
# per-layer metric families: AUC per graph averaged, AUC pooled over a seed's test graphs (the
# papers' AUC column, `analysis.reference.POOLED_AUC`), share of nodes kept
PER_LAYER = re.compile(r"^(attn_auc|attn_auc_pooled|ratio_kept)_l(\d+)$")
CURVE_COLUMNS = ("trial_id", "seed", "epoch", "train_loss", "val_accuracy", "val_loss", "val_auc",
                 "val_ft", "ftpt", "ffpt", "ftpf", "ffpf")
CACHE_VERSION = 2  # bump when the cached projection changes meaning (2: nested columns)
PLAN_FILES = ("plan.parquet", "plan.csv", "plan.json")  # optional list of planned trial ids


class StoreError(Exception):
    """Bad input (no results, a foreign or unreadable file, missing columns): one line."""


class BadFiles(StoreError):
    """Foreign or damaged result files, every one of them: one line per file, each saying
    what to do with it (as the runner's `verify=true`)."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        if len(self.problems) == 1:
            text = self.problems[0]
        else:
            text = (f"{len(self.problems)} bad files in the result store (no report was "
                    "written):\n  " + "\n  ".join(self.problems))
        super().__init__(text)


@dataclass
class Study:
    """One study of the store: its trial rows (every status) and its curves."""

    name: str
    path: Path
    trials: pd.DataFrame  # one row per (trial, seed, split), latest attempt only
    curves: pd.DataFrame  # one row per (trial, seed, epoch); may be empty
    n_files: int  # trial files read
    planned: list[str] | None = None  # trial ids of a plan file, when the runner left one
    notes: list[str] = field(default_factory=list)  # what the loader had to assume
    failed_attempts: int = 0  # lines of failures.jsonl (the runner's log of failed attempts)

    @property
    def ok(self) -> pd.DataFrame:
        """Rows of runs that finished (status ok)."""
        return self.trials[self.trials["status"] == "ok"]


def find_studies(results_dir: str | Path) -> dict[str, Path]:
    """Study name -> folder, for every folder of `results_dir` that holds `trials/`."""
    root = Path(results_dir)
    if not root.exists():
        raise StoreError(f"{root}: no such directory")
    if not root.is_dir():
        raise StoreError(f"{root}: not a directory (give the results folder, e.g. results/)")
    if (root / "trials").is_dir():
        return {root.resolve().name: root}
    found = {p.name: p for p in sorted(root.iterdir())
             if p.is_dir() and (p / "trials").is_dir() and not p.name.startswith((".", "_"))}
    if not found:
        raise StoreError(f"{root}: no results (expected {root}/<study>/trials/*.parquet)")
    return found


def _scan(files: list[Path], required: tuple[str, ...], wanted, what: str) -> pa.Table:
    """Projected rows of `files`, with the source file in a `_file` column."""
    part = "curves" if what == "curves" else "trials"
    try:
        got = reader.read(files, part, required,
                          lambda c: c in wanted or bool(PER_LAYER.match(c)))
    except reader.NewerSchema as e:
        raise StoreError(str(e)) from None
    if got.problems:
        raise BadFiles(got.problems)
    if not got.table.num_columns:  # only empty files
        return pa.table({FILE: pa.array([], pa.string())})
    return got.table


def _cache_paths(cache_dir: Path, folder: Path) -> tuple[Path, Path]:
    key = hashlib.sha1(str(folder.resolve()).encode()).hexdigest()[:12]
    stem = f"{folder.parent.name}-{folder.name}-{key}"
    return cache_dir / f"{stem}.parquet", cache_dir / f"{stem}.json"


def _read(folder: Path, files: list[Path], required: tuple[str, ...], wanted: set[str],
          what: str, cache_dir: Path | None) -> pd.DataFrame:
    """Rows of `files` (projected); with `cache_dir`, only files new or changed since the
    last report are read, the others come from a consolidated copy kept in `cache_dir`."""
    stat = {str(f.resolve()): f.stat() for f in files}
    sig = {p: [st.st_size, st.st_mtime_ns] for p, st in stat.items()}
    spec = {"version": CACHE_VERSION, "wanted": sorted(wanted), "per_layer": PER_LAYER.pattern}
    cached, reuse, cached_files = None, set(), set()
    if cache_dir is not None:
        table_p, manifest_p = _cache_paths(cache_dir, folder)
        try:
            manifest = json.loads(manifest_p.read_text())
            if manifest["spec"] == spec:
                cached = pq.read_table(table_p)
                if cached.num_rows != manifest["rows"]:
                    raise ValueError("stale cache")
                cached_files = set(manifest["files"])
                reuse = {p for p, v in manifest["files"].items() if sig.get(p) == v}
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
            cached, reuse, cached_files = None, set(), set()
    todo = [f for f in files if str(f.resolve()) not in reuse]
    parts = []
    if cached is not None and reuse:
        parts.append(cached.filter(pc.is_in(cached[FILE], value_set=pa.array(sorted(reuse)))))
    if todo:
        parts.append(_scan([Path(p) for p in sorted(str(f.resolve()) for f in todo)], required,
                           wanted, what))
    table = parts[0] if len(parts) == 1 else pa.concat_tables(parts, promote_options="permissive")
    if cache_dir is not None and (todo or cached is None or reuse != cached_files):
        _write_cache(cache_dir, folder, table, {"spec": spec, "rows": table.num_rows,
                                                "files": sig})
    df = table.to_pandas(types_mapper=_nested_as_arrow)
    df = df.sort_values(FILE, kind="stable").drop(columns=FILE).reset_index(drop=True)
    return df


def _nested_as_arrow(t: pa.DataType) -> pd.ArrowDtype | None:
    """Nested columns stay Arrow arrays in pandas (no Python object per row)."""
    return pd.ArrowDtype(t) if pa.types.is_nested(t) else None


def replace_file(path: Path, write) -> Path:
    """`write(temp path)` beside `path`, then rename it over `path` (readers see the old file
    or the whole new one). The analysis's one atomic writer: it imports nothing from
    `ablate`, whose writers use `ablate.atomic`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _write_cache(cache_dir: Path, folder: Path, table: pa.Table, manifest: dict) -> None:
    table_p, manifest_p = _cache_paths(cache_dir, folder)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        replace_file(table_p, lambda tmp: pq.write_table(table, tmp))
        replace_file(manifest_p, lambda tmp: tmp.write_text(json.dumps(manifest)))
    except OSError:
        pass  # a cache is an optimisation only


def _read_plan(folder: Path) -> list[str] | None:
    for name in PLAN_FILES:
        p = folder / name
        if not p.is_file():
            continue
        try:
            if name.endswith(".parquet"):
                ids = pd.read_parquet(p, columns=["trial_id"])["trial_id"]
            elif name.endswith(".csv"):
                ids = pd.read_csv(p, usecols=["trial_id"])["trial_id"]
            else:
                obj = json.loads(p.read_text())
                ids = obj["trial_ids"] if isinstance(obj, dict) else obj
            return sorted({str(i) for i in ids})
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
            return None
    return None


def _normalise(df: pd.DataFrame, notes: list[str]) -> pd.DataFrame:
    df = df.copy()
    if "split" not in df.columns:
        df["split"] = "test"
        notes.append("no split column: every row taken as split 'test'")
    for col, default in (("error", ""), ("attempt", 1)):
        if col not in df.columns:
            df[col] = default
    df["trial_id"] = df["trial_id"].astype(str)
    df["status"] = df["status"].astype("string").fillna("error").astype(str)
    df["error"] = df["error"].astype("string").fillna("").astype(str)
    df["seed"] = pd.to_numeric(df["seed"], errors="coerce").fillna(-1).astype(int)
    df["attempt"] = pd.to_numeric(df["attempt"], errors="coerce").fillna(1).astype(int)
    for col in ("dataset", "backbone", "pool_layers", "supervision", "selection", "split",
                "normalizer", "init_dist", "data_params", "seeds", "filters", "extra"):
        if col in df.columns:
            df[col] = df[col].astype("string").fillna("").astype(str)
    if "pool_layers" in df.columns:
        df["pool_layers"] = df["pool_layers"].str.replace(" ", "", regex=False)
    empty = [c for c in df.columns if PER_LAYER.match(c) and df[c].isna().all()]
    df = df.drop(columns=empty)  # a layer no row has (typed nulls in the declared schema)
    for col, before in ADDED_AXES.items():
        if col in df.columns:  # some files have it: the older ones ran with `before`
            df[col] = df[col].astype(object).where(df[col].notna(), before)
    n = len(df)
    df = df.sort_values("attempt", kind="stable").drop_duplicates(
        ["trial_id", "seed", "split"], keep="last")
    if len(df) < n:
        notes.append(f"{n - len(df)} row(s) of earlier attempts superseded by retries")
    if "lr_timing" in df.columns:
        df["lr_timing"] = df["lr_timing"].where(~timing_changed_nothing(df), NO_LR_DROP)
    return df.reset_index(drop=True)


def timing_changed_nothing(df: pd.DataFrame) -> pd.Series:
    """Rows whose trial drops no LR, so that its `lr_timing` changed nothing: no drop of its
    own and no model B (`ablate.config.lr_drops`, which the analysis cannot import); or a
    trial whose rows stored different timings, which its id (hashing the timing wherever a
    model drops, weak supervision's model B with the recipe's drops included) says is one."""
    blank = pd.Series("", index=df.index)
    own = df.get("lr_decay_epochs", blank).astype("string").fillna("").str.strip()
    quiet = (own == "") & (df.get("supervision", blank) != "weak")
    mixed = df.groupby("trial_id")["lr_timing"].transform("nunique") > 1
    return quiet | mixed


def load_study(name: str, path: str | Path, cache_dir: str | Path | None = None) -> Study:
    """Read one study folder (trials/ and, when present, curves/); see `_read` for the cache."""
    cache = Path(cache_dir) if cache_dir is not None else None
    path = Path(path)
    files = reader.result_files(path / "trials")
    if not files:
        raise StoreError(f"{path / 'trials'}: no result files (*.parquet)")
    notes: list[str] = []
    wanted = set(IDENTITY) | set(AXES) | set(METRICS) | set(COST)
    problems: list[str] = []
    try:
        raw = _read(path / "trials", files, TRIAL_REQUIRED, wanted, "trial", cache)
    except BadFiles as e:
        problems += e.problems
        raw = None
    curve_files = reader.result_files(path / "curves")  # [] without the folder
    try:
        curves = _read(path / "curves", curve_files, CURVE_REQUIRED, set(CURVE_COLUMNS),
                       "curves", cache) if curve_files else pd.DataFrame()
    except BadFiles as e:
        problems += e.problems
    if problems:  # every bad file of the study at once (trials and curves)
        raise BadFiles(problems)
    if raw.empty:
        raise StoreError(f"{path / 'trials'}: the result files hold no rows")
    trials = _normalise(raw, notes)
    if not curves.empty:
        if "trial_id" not in curves.columns:
            curves["trial_id"] = ""
            notes.append("curves have no trial_id column: not matched to trials")
        curves["trial_id"] = curves["trial_id"].astype(str)
        curves["seed"] = pd.to_numeric(curves["seed"], errors="coerce").fillna(-1).astype(int)
    else:
        curves = pd.DataFrame(columns=list(CURVE_COLUMNS))
    failed = 0
    if (path / "failures.jsonl").is_file():
        try:
            with open(path / "failures.jsonl", "rb") as f:
                failed = sum(1 for line in f if line.strip())
        except OSError:
            pass
    return Study(name, path, trials, curves, len(files), _read_plan(path), notes, failed)


def load_store(results_dir: str | Path, studies: list[str] | None = None,
               cache_dir: str | Path | None = None) -> list[Study]:
    """Every study under `results_dir` (or only `studies`), read-only. `cache_dir` (outside
    the store) keeps a consolidated copy so that later calls read only new files."""
    found = find_studies(results_dir)
    if studies:
        unknown = [s for s in studies if s not in found]
        started = [s for s in unknown if (Path(results_dir) / s).is_dir()]
        if started:  # its folder is there (a run began, or was refused), no trial finished yet
            raise StoreError(f"study {', '.join(started)} has no finished trial in {results_dir} "
                             f"yet (python -m ablate.run study={started[0]} runs it); "
                             f"studies with results: {', '.join(found) or 'none'}")
        if unknown:
            raise StoreError(f"unknown study {', '.join(unknown)} in {results_dir}; "
                             f"available: {', '.join(found)}")
        found = {s: found[s] for s in studies}
    out, problems = [], []
    for name, p in found.items():
        try:
            out.append(load_study(name, p, cache_dir))
        except BadFiles as e:  # go on: every bad file of every study is named at once
            problems += e.problems
    if problems:
        raise BadFiles(problems)
    return out


def layer_columns(df: pd.DataFrame, kind: str) -> list[str]:
    """The per-layer columns of `kind` ('attn_auc' or 'ratio_kept') in layer order."""
    cols = [(int(m.group(2)), c) for c in df.columns
            if (m := PER_LAYER.match(c)) and m.group(1) == kind]
    return [c for _, c in sorted(cols)]
