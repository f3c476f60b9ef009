"""Parquet result store: one file per finished trial, written atomically by the driver.

Layout (DESIGN.md "Result store")::

    RESULTS/<study>/trials/<trial_id>.parquet   one row per (seed, split)
    RESULTS/<study>/curves/<trial_id>.parquet   one row per (seed, evaluated epoch)
    RESULTS/<study>/failures.jsonl              one line per failed attempt (informational)

Every file has the declared schema of its trial kind (`result_store.schema`, its version
in the file's metadata); rows that do not fit fail the write, naming the column, before
anything is written. A trial file is the completion marker: its curves are written first,
and each file goes to a temp name in the same folder, is fsynced and renamed over the
final name, so a crash or SIGKILL never leaves a torn file. A trial is complete when its
file exists and every row has status ``ok``. Scanning reads every ``*.parquet`` of
``trials/`` and ``curves/`` with the store's one reader (`result_store.reader`; files
written before the schema are converted in memory) and rejects foreign or corrupt files
with a one-line `StoreError`, without modifying anything.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa

from ablate.atomic import atomic_write, temp_name
from ablate.errors import ConfigError
from result_store import reader, writer
from result_store import schema as declared

TRIALS, CURVES, FAILURES = "trials", "curves", "failures.jsonl"
STATUSES = ("ok", "error", "nan")
REQUIRED = ("study", "trial_id", "seed", "split", "status", "error", "attempt")
CURVE_KEYS = ("study", "trial_id", "attempt", "seed", "epoch")
_TMP = re.compile(r"^\..+\.tmp$")


PLAN = "plan.json"  # trial ids planned by the latest run of the study
# what a run writes before its first trial: a refused first run takes these away again
_BOOKKEEPING = re.compile(r"^(study-[0-9a-f]{12}\.yaml|\.lock|plan\.json)$")


class StoreError(ConfigError):
    """The result store holds something this program did not write, or is busy."""


class Store:
    """The result folder of one study."""

    def __init__(self, results_dir: str | os.PathLike, study: str):
        self.root = Path(results_dir).expanduser()
        self.study = study
        self.dir = self.root / study
        self.trials_dir = self.dir / TRIALS
        self.curves_dir = self.dir / CURVES
        self._lock_fd: int | None = None

    # ------------------------------------------------------------------ reading
    def trial_files(self) -> list[Path]:
        return reader.result_files(self.trials_dir)

    def scan(self) -> dict[str, str]:
        """trial_id -> 'ok' (every row ok) or the first failed status, for every trial file.

        Every trial and curves file is read whole; if any is foreign, unreadable or damaged
        a `StoreError` names them all (`verify` lists them one per line). Nothing is modified.
        """
        got = self.inspect()
        out, problems = got.status, got.problems
        if problems:
            first = "; ".join(problems[:3])
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            raise StoreError(f"{len(problems)} problem file(s) in {self.dir}: {first}{more}; "
                             f"list them all with verify=true")
        return out

    def verify(self) -> list[str]:
        """One line per problem file of the study (trials and curves); empty when all is well."""
        return self.inspect().problems

    def inspect(self) -> StoreCheck:
        """Every trial and curves file of the study read whole (`result_store.reader`): the
        trial statuses, one line per problem file, each readable file's schema version.
        A file of a newer schema version raises `StoreError` naming it and its version."""
        files = self.trial_files()
        try:
            trials = reader.read(files, TRIALS, REQUIRED, {"study", "trial_id", "status"},
                                 whole=True)
            curves = reader.read(reader.result_files(self.curves_dir), CURVES, CURVE_KEYS,
                                 (), whole=True, file_column=False)
        except reader.NewerSchema as e:
            raise StoreError(str(e)) from None
        rows: dict[str, list[tuple[str, str, str]]] = {}
        if trials.table.num_rows:
            t = trials.table
            for f, tid, study, status in zip(t[reader.FILE].to_pylist(), t["trial_id"].to_pylist(),
                                             t["study"].to_pylist(), t["status"].to_pylist()):
                rows.setdefault(f, []).append((tid, study, status))
        out: dict[str, str] = {}
        problems = list(trials.problems)
        for path in files:
            if path in trials.bad:
                continue
            got = rows.get(reader.file_key(path), [])
            ids, studies = {r[0] for r in got}, {r[1] for r in got}
            if got and (ids != {path.stem} or studies != {self.study}):
                problems.append(f"{path}: holds trial {sorted(ids)} of study {sorted(studies)}, "
                                f"not {path.stem} of {self.study}; move it out of "
                                f"{self.trials_dir}")
                continue
            statuses = [r[2] for r in got]
            bad = [x for x in statuses if x not in STATUSES]
            if bad:
                problems.append(f"{path}: unknown status {bad[0]!r}; delete it to rerun that trial")
                continue
            failed = [x for x in statuses if x != "ok"]
            out[path.stem] = failed[0] if failed else ("ok" if statuses else "error")
        versions = {p: v for p, v in trials.versions.items() if p.stem in out}
        return StoreCheck(out, problems + curves.problems, versions, curves.versions, len(files))

    def completed(self) -> set[str]:
        """Ids of trials whose every row has status ok."""
        return {k for k, s in self.scan().items() if s == "ok"}

    def read(self) -> pd.DataFrame:
        return read_trials(self.root, self.study)

    # ------------------------------------------------------------------ writing
    def write(self, trial_id: str, records: list[dict], curves: list[dict] = (),
              extra: dict | None = None, kind: str = "graph") -> Path:
        """Write a trial's rows (and curves) atomically; `extra` columns go on every row.

        Both files have the declared schema of `kind` (a registered trial kind's
        `store_kind`, plus its `store_columns`); rows that do not fit raise
        `result_store.schema.SchemaError` naming the column, and nothing is written.
        """
        from ablate.runner.study.kinds import trial_kind

        k = trial_kind(kind)
        extra = {"study": self.study, "trial_id": trial_id, "attempt": 1, **(extra or {})}
        rows = [{**r, **extra} for r in records]
        for r in rows:
            if r.get("status") not in STATUSES:
                raise ValueError(f"status must be one of {STATUSES}, got {r.get('status')!r}")
            r.setdefault("error", "")
        table = declared.table(rows, k.store_kind, TRIALS, dict(k.store_columns))
        curves_path = self.curves_dir / f"{trial_id}.parquet"
        if curves:
            cur = [{**{c: extra[c] for c in ("study", "trial_id", "attempt")}, **c}
                   for c in curves]
            write_parquet(declared.table(cur, k.store_kind, CURVES), curves_path)
        try:
            return write_parquet(table, self.trials_dir / f"{trial_id}.parquet")
        except BaseException:
            if curves:  # no curves without their trial file (the trial file commits both)
                curves_path.unlink(missing_ok=True)
            raise

    def write_plan(self, trial_ids: list[str]) -> Path:
        """Record the trial ids the current run plans (plan.json), so a report lists missing ones.

        Written atomically at the start of every run; it names the latest run's plan.
        """
        plan = {"study": self.study, "written_at": now_iso(), "trial_ids": list(trial_ids)}
        return atomic_write(self.dir / PLAN, lambda f: f.write(json.dumps(plan, indent=1).encode()))

    def keep_study_file(self, path: Path) -> Path:
        """Keep the study file a run was started from beside its trials, as
        `study-<sha256[:12]>.yaml`: every version a store was run with stays (an edited study
        adds a file, never replaces one); the same file again writes nothing."""
        import hashlib

        data = Path(path).read_bytes()
        target = self.dir / f"study-{hashlib.sha256(data).hexdigest()[:12]}.yaml"
        if not target.exists():
            atomic_write(target, lambda f: f.write(data))
        return target

    def log_failure(self, trial_id: str, attempt: int, status: str, error: str, node: str = "",
                    created_at: str = "") -> None:
        """Append one failed attempt to failures.jsonl (history; the trial file holds the
        latest), a grid and a search trial's alike: its node ('' where not known) and its
        rows' `created_at`."""
        self.dir.mkdir(parents=True, exist_ok=True)
        entry = {"trial_id": trial_id, "attempt": attempt, "status": status, "error": error,
                 "node": node, "created_at": created_at}
        line = json.dumps({"time": now_iso(), **entry}, default=str)
        with open(self.dir / FAILURES, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def clean_temp(self, older_than_s: float = 0.0) -> int:
        """Remove temp files left by a killed writer (ours only: '.NAME.*.tmp').

        Only the holder of `lock` writes here, so under the lock every temp file is a leftover.
        """
        n = 0
        for d in (self.trials_dir, self.curves_dir):
            if not d.is_dir():
                continue
            for p in d.iterdir():
                if _TMP.match(p.name) and time.time() - p.stat().st_mtime >= older_than_s:
                    p.unlink(missing_ok=True)
                    n += 1
        return n

    def lock(self) -> None:
        """Hold an exclusive lock on the study folder for this process (released on exit)."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise StoreError(f"cannot write to the result store {self.dir} ({e.strerror}); "
                             "choose a writable results_dir=") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreError(f"another run is writing to {self.dir}; wait for it to finish or "
                             "use another results_dir=") from None
        self._lock_fd = fd

    def writable(self, keep: bool = True) -> bool:
        """Whether the study folder exists or can be created, and a file can be written there.

        Raises `StoreError` when the folder does not exist and cannot be created. With
        `keep=False` (dry runs) the folders made for the check are removed again.
        """
        made = [d for d in (self.dir, *self.dir.parents) if not d.exists()]
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"results_dir={self.root}: cannot create {self.dir} "
                             f"({e.strerror}); choose a writable folder") from None
        probe = temp_name(self.dir / "probe")
        try:
            probe.write_bytes(b"")
            probe.unlink()
            return True
        except OSError:
            return False
        finally:
            if not keep:
                for d in made:  # deepest first
                    try:
                        d.rmdir()
                    except OSError:
                        break

    def check_space(self, nbytes: int = 1 << 16) -> None:
        """Write and fsync `nbytes` in the study folder, then remove them: a disk that is
        still full (or a quota reached) raises `OSError` here, before Ray starts."""
        self.dir.mkdir(parents=True, exist_ok=True)
        probe = temp_name(self.dir / "space")
        try:
            with open(probe, "wb") as f:
                f.write(b"\0" * nbytes)
                f.flush()
                os.fsync(f.fileno())
        finally:
            probe.unlink(missing_ok=True)

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def new_folders(self) -> list[Path]:
        """The study folder and those above it that do not exist yet, deepest first: what a
        first run will create (`discard_new` takes them away if the run is refused)."""
        return [d for d in (self.dir, *self.dir.parents) if not d.exists()]

    def discard_new(self, made: list[Path]) -> bool:
        """Undo a refused first run (bad data path, no network): remove the folders in `made`
        (`new_folders`, taken before the run) while the study folder holds only the run's own
        bookkeeping (its study file, lock and plan) and empty result folders. A folder that
        existed before, or holds anything else, or is locked by another run, is left as is.
        The check and the removal are made under the lock: a run of the same study that holds
        it is never undone, and one that takes it after keeps its study file again (the
        driver keeps it under its lock). Returns whether the study folder was removed."""
        if self.dir not in made or not self.dir.is_dir():
            return False
        try:
            self.lock()
        except StoreError:
            return False
        try:
            entries = list(self.dir.iterdir())
            for p in entries:
                empty_dir = p.name in (TRIALS, CURVES) and p.is_dir() and not any(p.iterdir())
                if not (empty_dir or (p.is_file() and _BOOKKEEPING.match(p.name))):
                    return False
            for p in entries:
                p.rmdir() if p.is_dir() else p.unlink(missing_ok=True)
        finally:
            self.unlock()
        for d in made:  # deepest first; stops at the first one something else now holds
            try:
                d.rmdir()
            except OSError:
                break
        return not self.dir.exists()


def write_error(e: OSError, where: Path) -> str:
    """The summary's words for a result write that failed (disk full, read-only, quota)."""
    return f"{e.strerror or type(e).__name__} writing {where}"


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def write_parquet(table: pa.Table, path: Path) -> Path:
    """Write `table` to `path` atomically (`ablate.atomic.atomic_write`), as every result
    file is written (`result_store.writer`)."""
    return atomic_write(path, lambda f: writer.write(table, f))


def _studies(results_dir: Path, study: str | None) -> list[Path]:
    if study is not None:
        return [results_dir / study]
    return sorted(p for p in results_dir.iterdir() if (p / TRIALS).is_dir()) \
        if results_dir.is_dir() else []


def read_trials(results_dir: str | os.PathLike = "results",
                study: str | None = None) -> pd.DataFrame:
    """Every trial row of one study (or of all studies under `results_dir`) as one DataFrame
    (nested columns as Python lists of dicts); a foreign or damaged file raises `StoreError`,
    and so does a `study` with no trial file there (not run yet, a misspelt name), naming the
    studies that have results under `results_dir`."""
    if study is not None:
        _check_has_results(Path(results_dir), study)
    return _read_all(Path(results_dir), study, TRIALS, REQUIRED)


def read_curves(results_dir: str | os.PathLike = "results",
                study: str | None = None) -> pd.DataFrame:
    """Every per-epoch curve row of one study (or of all studies) as one DataFrame."""
    return _read_all(Path(results_dir), study, CURVES, CURVE_KEYS)


def _check_has_results(results_dir: Path, study: str) -> None:
    """One `StoreError` line when `study` has no trial file under `results_dir`."""
    if reader.result_files(results_dir / study / TRIALS):
        return
    from ablate.errors import did_you_mean

    there = [p.name for p in _studies(results_dir, None)
             if reader.result_files(p / TRIALS)]
    where = (f"{str(results_dir)!r} does not exist" if not results_dir.is_dir() else
             f"no trial of it has finished under {str(results_dir)!r}"
             if (results_dir / study).is_dir() else f"no results under {str(results_dir)!r}")
    listed = (f"studies with results there: {', '.join(there)}{did_you_mean(study, there)}"
              if there else "no study has results there yet")
    raise StoreError(f"study {study!r}: {where} (run it first: python -m ablate.run "
                     f"study={study} results_dir={results_dir}); {listed}")


def _read_all(results_dir: Path, study: str | None, part: str,
              required: tuple[str, ...]) -> pd.DataFrame:
    files = [f for d in _studies(results_dir, study) for f in reader.result_files(d / part)]
    try:
        got = reader.read(files, part, required)
    except reader.NewerSchema as e:
        raise StoreError(str(e)) from None
    if got.problems:
        raise StoreError(f"{len(got.problems)} problem file(s): {'; '.join(got.problems[:3])}")
    if not got.table.num_rows:
        return pd.DataFrame()
    t = got.table.sort_by([(reader.FILE, "ascending")])  # files in name order, rows as written
    df = t.drop_columns([reader.FILE]).to_pandas()
    for c in df.columns:
        if pa.types.is_nested(t.schema.field(c).type):
            df[c] = pd.Series(t[c].to_pylist(), index=df.index, dtype=object)
    return df


@dataclass
class StoreCheck:
    """`Store.inspect`: what a study's files hold."""

    status: dict[str, str]  # trial id -> ok or the first failed status
    problems: list[str]  # one line per foreign or damaged file (trials and curves)
    versions: dict[Path, int]  # trial file -> schema version (0: before the declared schema)
    curve_versions: dict[Path, int]
    n_files: int  # trial files read
