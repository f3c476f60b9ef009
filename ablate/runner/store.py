"""Parquet result store: one file per finished trial, written atomically by the driver.

Layout (DESIGN.md "Result store")::

    RESULTS/<study>/trials/<trial_id>.parquet   one row per (seed, split)
    RESULTS/<study>/curves/<trial_id>.parquet   one row per (seed, evaluated epoch)
    RESULTS/<study>/failures.jsonl              one line per failed attempt (informational)

A trial file is the completion marker: its curves are written first, and each
file goes to a temp name in the same folder, is fsynced and renamed over the
final name, so a crash or SIGKILL never leaves a torn file. A trial is complete
when its file exists and every row has status ``ok``. Scanning checks every
``*.parquet`` in ``trials/`` and rejects foreign or corrupt files with a
one-line `StoreError`, without modifying anything.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import re
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ablate.atomic import atomic_write, temp_name
from ablate.errors import ConfigError

TRIALS, CURVES, FAILURES = "trials", "curves", "failures.jsonl"
STATUSES = ("ok", "error", "nan")
REQUIRED = ("study", "trial_id", "seed", "split", "status", "error", "attempt")
IDENTITY = ("study", "trial_id", "seed", "split", "status", "error", "attempt")
CURVE_KEYS = ("study", "trial_id", "attempt", "seed", "epoch")
_TMP = re.compile(r"^\..+\.tmp$")


PLAN = "plan.json"  # trial ids planned by the latest run of the study


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
        if not self.trials_dir.is_dir():
            return []
        return sorted(p for p in self.trials_dir.glob("*.parquet") if not p.name.startswith("."))

    def scan(self) -> dict[str, str]:
        """trial_id -> 'ok' (every row ok) or the first failed status, for every trial file.

        Every trial and curves file is read whole; if any is foreign, unreadable or damaged
        a `StoreError` names them all (`verify` lists them one per line). Nothing is modified.
        """
        out, problems = self._check()
        if problems:
            first = "; ".join(problems[:3])
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            raise StoreError(f"{len(problems)} problem file(s) in {self.dir}: {first}{more}; "
                             f"list them all with verify=true")
        return out

    def verify(self) -> list[str]:
        """One line per problem file of the study (trials and curves); empty when all is well."""
        return self._check()[1]

    def check(self) -> tuple[dict[str, str], list[str]]:
        """`scan`'s statuses of the readable trial files and `verify`'s problem lines, at once."""
        return self._check()

    def _check(self) -> tuple[dict[str, str], list[str]]:
        out: dict[str, str] = {}
        problems: list[str] = []
        for path in self.trial_files():
            try:
                table = _read_checked(path)
            except StoreError as e:
                problems.append(str(e))
                continue
            ids = set(table.column("trial_id").to_pylist())
            studies = set(table.column("study").to_pylist())
            if ids != {path.stem} or studies != {self.study}:
                problems.append(f"{path}: holds trial {sorted(ids)} of study {sorted(studies)}, "
                                f"not {path.stem} of {self.study}; move it out of "
                                f"{self.trials_dir}")
                continue
            statuses = table.column("status").to_pylist()
            bad = [x for x in statuses if x not in STATUSES]
            if bad:
                problems.append(f"{path}: unknown status {bad[0]!r}; delete it to rerun that trial")
                continue
            failed = [x for x in statuses if x != "ok"]
            out[path.stem] = failed[0] if failed else ("ok" if statuses else "error")
        if self.curves_dir.is_dir():
            for path in sorted(self.curves_dir.glob("*.parquet")):
                if path.name.startswith("."):
                    continue
                try:
                    _read_checked(path, required=CURVE_KEYS, curves=True)
                except StoreError as e:
                    problems.append(str(e))
        return out, problems

    def completed(self) -> set[str]:
        """Ids of trials whose every row has status ok."""
        return {k for k, s in self.scan().items() if s == "ok"}

    def read(self) -> pd.DataFrame:
        return read_trials(self.root, self.study)

    # ------------------------------------------------------------------ writing
    def write(self, trial_id: str, records: list[dict], curves: list[dict] = (),
              extra: dict | None = None) -> Path:
        """Write a trial's rows (and curves) atomically; `extra` columns go on every row."""
        extra = {"study": self.study, "trial_id": trial_id, "attempt": 1, **(extra or {})}
        rows = [{**r, **extra} for r in records]
        for r in rows:
            if r.get("status") not in STATUSES:
                raise ValueError(f"status must be one of {STATUSES}, got {r.get('status')!r}")
            r.setdefault("error", "")
        curves_path = self.curves_dir / f"{trial_id}.parquet"
        if curves:
            cur = [{**{k: extra[k] for k in ("study", "trial_id", "attempt") if k in extra}, **c}
                   for c in curves]
            write_parquet(_frame(cur, CURVE_KEYS), curves_path)
        try:
            return write_parquet(_frame(rows, IDENTITY), self.trials_dir / f"{trial_id}.parquet")
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

    def log_failure(self, entry: dict) -> None:
        """Append one failed attempt to failures.jsonl (history; the trial file holds the latest)."""
        self.dir.mkdir(parents=True, exist_ok=True)
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


def write_error(e: OSError, where: Path) -> str:
    """The summary's words for a result write that failed (disk full, read-only, quota)."""
    return f"{e.strerror or type(e).__name__} writing {where}"


def now_iso() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _frame(rows: list[dict], first: tuple[str, ...]) -> pa.Table:
    df = pd.DataFrame(rows)
    cols = [c for c in first if c in df.columns] + [c for c in df.columns if c not in first]
    return pa.Table.from_pandas(df[cols], preserve_index=False)


def write_parquet(table: pa.Table, path: Path) -> Path:
    """Write `table` to `path` atomically (`ablate.atomic.atomic_write`)."""
    return atomic_write(path, lambda f: pq.write_table(table, f))


_TRIAL_ID = re.compile(r"^[0-9a-f]{12}$")


def bad_file_advice(path: Path, curves: bool = False) -> str:
    """What to do with a result file that cannot be read (`verify`; the report says the same).

    A file whose name is not a trial id is foreign (move it out); a damaged file of a trial
    can be deleted to rerun that trial (a curves file together with its trial file).
    """
    if not _TRIAL_ID.match(path.stem):
        return f"not written by ablate: move it out of {path.parent}"
    if curves:
        return (f"delete it and {path.parent.parent / TRIALS / path.name} to rerun that "
                "trial")
    return "delete it to rerun that trial"


def _read_checked(path: Path, columns: list[str] | None = None,
                  required: tuple[str, ...] = REQUIRED, curves: bool = False) -> pa.Table:
    """Read an ablate Parquet file, or raise a one-line StoreError for foreign/corrupt files
    (`bad_file_advice` says what to do)."""
    fix = bad_file_advice(path, curves)
    try:
        schema = pq.read_schema(path)
    except Exception as e:
        raise StoreError(f"{path}: not a readable Parquet file ({type(e).__name__}); "
                         f"{fix}") from None
    missing = [c for c in required if c not in schema.names]
    if missing:
        raise StoreError(f"{path}: not an ablate result file (missing columns "
                         f"{', '.join(missing)}); move it out of {path.parent}")
    try:
        return pq.read_table(path, columns=columns)
    except Exception as e:
        raise StoreError(f"{path}: corrupt Parquet data ({type(e).__name__}); {fix}") from None


def _read_folder(folder: Path, check: bool) -> pd.DataFrame:
    frames = []
    for path in sorted(folder.glob("*.parquet")):
        if path.name.startswith("."):
            continue
        frames.append((_read_checked(path) if check else pq.read_table(path)).to_pandas())
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _studies(results_dir: Path, study: str | None) -> list[Path]:
    if study is not None:
        return [results_dir / study]
    return sorted(p for p in results_dir.iterdir() if (p / TRIALS).is_dir()) \
        if results_dir.is_dir() else []


def read_trials(results_dir: str | os.PathLike = "results",
                study: str | None = None) -> pd.DataFrame:
    """Every trial row of one study (or of all studies under `results_dir`) as one DataFrame."""
    return _read_all(Path(results_dir), study, TRIALS, check=True)


def read_curves(results_dir: str | os.PathLike = "results",
                study: str | None = None) -> pd.DataFrame:
    """Every per-epoch curve row of one study (or of all studies) as one DataFrame."""
    return _read_all(Path(results_dir), study, CURVES, check=False)


def _read_all(results_dir: Path, study: str | None, kind: str, check: bool) -> pd.DataFrame:
    frames = [_read_folder(d / kind, check=check) for d in _studies(results_dir, study)
              if (d / kind).is_dir()]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
