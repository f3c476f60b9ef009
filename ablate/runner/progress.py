"""What a run shows: `Progress`, the live status line, and `Summary`, what the run did.

`Progress` is the driver's display while Tune runs (one line redrawn on a
terminal, or a log line when the counts change and a heartbeat otherwise);
`Summary` holds the final counts, timings and errors, the summary line printed
on stdout and the run's exit code.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO


@dataclass
class Summary:
    """What a run did; `exit_code` is 0 when every trial of the study is complete."""

    study: str
    total: int  # trials in the study
    skipped: int = 0  # already complete in the store
    ok: int = 0
    failed: list[str] = field(default_factory=list)  # ids whose latest attempt failed
    remaining: list[str] = field(default_factory=list)  # ids never finished (interrupted)
    retries: int = 0
    wall_s: float = 0.0
    results: str = ""
    timings: dict = field(default_factory=dict)  # phase -> seconds (start-up, tune, stop)
    errors: dict = field(default_factory=dict)  # final error text -> failed trial ids
    failures_log: str = ""  # path of failures.jsonl
    storage_error: str = ""  # the first result write that failed (disk full, read-only)
    signal: str = ""  # SIGINT / SIGTERM that stopped the run
    ray_logs: str = ""  # an embedded Ray's logs, kept when trials failed
    tune_error: str = ""  # an error Ray Tune's controller raised (the study stopped there)

    @property
    def interrupted(self) -> bool:
        return bool(self.remaining)

    @property
    def exit_code(self) -> int:
        """0 complete, 1 trials failed (or Ray Tune stopped the study), 3 results could not be
        written, 130/143 interrupted."""
        if self.storage_error:
            return 3
        if self.remaining and (self.signal or not self.tune_error):
            return 143 if self.signal == "SIGTERM" else 130
        return 1 if self.failed or self.tune_error else 0

    def line(self) -> str:
        state = (f"results could not be written ({self.storage_error}): free space or fix "
                 "permissions, then rerun the same command to resume" if self.storage_error
                 else "interrupted: rerun the same command to resume"
                 if self.remaining and (self.signal or not self.tune_error)
                 else f"stopped by Ray Tune ({self.tune_error}): rerun the same command to resume"
                 if self.tune_error
                 else f"{len(self.failed)} failed" if self.failed else "complete")
        return (f"study {self.study}: {self.total} trials, {self.ok} run, {self.skipped} "
                f"skipped (already done), {len(self.failed)} failed, {self.retries} retries, "
                f"{len(self.remaining)} not run in {self.wall_s:.1f} s ({state}); "
                f"results in {self.results}")

    def failure_lines(self, limit: int = 5) -> list[str]:
        """Why trials failed: each distinct final error once, with its count; the log's path."""
        if not self.errors:
            return []
        groups = sorted(self.errors.items(), key=lambda kv: -len(kv[1]))
        out = []
        if len(groups) == 1 and len(groups[0][1]) == len(self.failed) > 1:
            out.append(f"every failed trial ({len(self.failed)}) failed the same way:")
        for error, ids in groups[:limit]:
            out.append(f"  {len(ids)} trial(s), e.g. {ids[0]}: {error}")
        if len(groups) > limit:
            out.append(f"  ... and {len(groups) - limit} other error(s)")
        if self.failures_log:
            out.append(f"every failed attempt: {self.failures_log}")
        if self.ray_logs:
            out.append(f"Ray's logs of this run: {self.ray_logs}")
        return out


class Progress:
    """One live status line: done / running / failed / skipped, ETA."""

    def __init__(self, study: str, todo: int, skipped: int, mode: str = "auto",
                 stream: TextIO | None = None, every_s: float = 2.0, heartbeat_s: float = 60.0,
                 t0: float | None = None):
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if self.stream.isatty() else "lines"
        self.study, self.todo, self.skipped, self.mode = study, todo, skipped, mode
        self.every_s, self.heartbeat_s = every_s, heartbeat_s
        self.running: set[str] = set()
        self.done = self.failed = self.retries = 0
        self.t0 = t0 or time.time()  # the run's start: Ray's start-up counts too
        self._last = 0.0
        self._last_counts: tuple = ()
        self._first_done: float | None = None  # ETA runs from here: start-up is not a trial

    def __getstate__(self) -> dict:  # Tune pickles its callbacks; streams do not pickle
        return {**self.__dict__, "stream": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, stream=sys.stderr)

    def start(self, tid: str) -> None:
        self.running.add(tid)
        self.refresh()

    def finish(self, tid: str, status: str) -> None:
        self.running.discard(tid)
        self._first_done = self._first_done or time.time()
        if status == "ok":
            self.done += 1
        else:
            self.failed += 1
        self.refresh(force=self.mode == "bar")

    def unstored(self, tid: str) -> None:
        """The trial's result could not be written: it is no longer running, and stays to do
        (counted in the summary's 'not run', not as a retry)."""
        self.running.discard(tid)
        self.refresh(force=self.mode == "bar")

    def retry(self, tid: str) -> None:
        self.running.discard(tid)
        self.retries += 1
        self.refresh(force=self.mode == "bar")

    def text(self) -> str:
        el = time.time() - self.t0
        finished = self.done + self.failed
        left = self.todo - finished
        if finished >= 2:
            eta = _fmt((time.time() - self._first_done) / (finished - 1) * left)
        else:
            eta = _fmt(el * left) if finished else "--"
        retry = f", {self.retries} retried" if self.retries else ""
        return (f"[{self.study}] {finished}/{self.todo} finished: {self.done} ok, {self.failed} "
                f"failed{retry}, {len(self.running)} running, {self.skipped} skipped | "
                f"{_fmt(el)} elapsed, ETA {eta}")

    def refresh(self, force: bool = False) -> None:
        if self.mode == "none":
            return
        now = time.time()
        text = self.text()
        if self.mode == "bar":
            if force or now - self._last > 0.5:
                self.stream.write("\r\033[K" + text)
                self.stream.flush()
                self._last = now
        else:  # a log: a line when the counts change (at most every every_s) or a heartbeat
            counts = (self.done, self.failed, self.retries, len(self.running))
            changed = counts != self._last_counts and now - self._last >= self.every_s
            if force or changed or now - self._last >= self.heartbeat_s:
                self.stream.write(text + "\n")
                self.stream.flush()
                self._last, self._last_counts = now, counts

    def close(self) -> None:
        if self.mode == "none":
            return
        self.running.clear()
        if self.mode == "bar":
            self.stream.write("\r\033[K" + self.text() + "\n")
        else:
            self.stream.write(self.text() + "\n")
        self.stream.flush()


def _fmt(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else \
        f"{s // 60}:{s % 60:02d}"
