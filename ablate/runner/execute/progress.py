"""What a run shows: `Progress`, the live status line, and `Summary`, what the run did.

`Progress` is the driver's display from planning to the last trial (one line redrawn on
a terminal, or a log line when the step or the counts change and a heartbeat otherwise;
a background thread keeps it alive through long driver steps);
`Summary` holds the final counts, timings and errors, the summary line printed
on stdout and the run's exit code.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TextIO


def epoch_report_s() -> float:
    """How often a worker reports a running trial's epoch ($ABLATE_PROGRESS_EPOCH_S, 5 s);
    a log (`progress=lines`) prints such a line at most every 6 times that."""
    return float(os.environ.get("ABLATE_PROGRESS_EPOCH_S", "5"))


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
    """One live status line: the driver step under way, then done / running / failed /
    skipped and the ETA once trials run.

    Before Ray Tune runs trials the line names the driver's step and its count (`step`,
    `advance`: planning, reading the store, preparing datasets, starting Ray, handing the
    packs to Tune); `ticking` keeps it alive from a background thread, so a long step never
    leaves it frozen. A step shorter than `quiet_s` prints nothing. Once trials run
    (`trials`), the line counts them; `close` prints its last state."""

    def __init__(self, study: str, todo: int = 0, skipped: int = 0, mode: str = "auto",
                 stream: TextIO | None = None, every_s: float = 2.0, heartbeat_s: float = 60.0,
                 t0: float | None = None, tick_s: float = 0.5, quiet_s: float = 2.0,
                 step_every_s: float = 10.0, epoch_every_s: float = 30.0):
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if self.stream.isatty() else "lines"
        self.study, self.todo, self.skipped, self.mode = study, todo, skipped, mode
        self.every_s, self.heartbeat_s = every_s, heartbeat_s
        self.tick_s, self.quiet_s, self.step_every_s = tick_s, quiet_s, step_every_s
        self.running: set[str] = set()
        # running packs' training: first member id -> (member ids, label, epoch, epochs,
        # seconds per epoch), from the workers' epoch reports (`epoch`)
        self.epochs: dict[str, tuple[tuple[str, ...], str, int, int, float]] = {}
        self.epoch_every_s = epoch_every_s
        self._epoch_logged = 0.0
        self.done = self.failed = self.retries = 0
        self.t0 = t0 or time.time()  # the run's start: Ray's start-up counts too
        self._last = 0.0
        self._last_counts: tuple = ()
        self._first_done: float | None = None  # ETA runs from here: start-up is not a trial
        # the driver step under way (None once trials run; a display made before the trials
        # are known starts with one)
        self.step_name: str | None = "starting" if not todo else None
        self.step_done, self.step_total, self.step_unit = 0, None, ""
        self.step_draw = True  # False: something else draws (a dataset's own bar)
        self._step_t0 = self.t0
        self._step_logged = 0.0  # lines mode: when this step was last logged
        self._shown = False  # bar mode: a line is on the terminal, not yet ended
        self._init_threading()

    def _init_threading(self) -> None:
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __getstate__(self) -> dict:  # Tune pickles its callbacks; streams, threads do not pickle
        state = dict(self.__dict__)
        for k in ("stream", "_lock", "_stop", "_ticker"):
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, stream=sys.stderr)
        self._init_threading()

    # ------------------------------------------------------------------ driver steps
    def step(self, name: str, total: int | None = None, unit: str = "",
             draw: bool = True) -> None:
        """A driver step begins (`total` items of `unit`, if counted); `draw=False` while
        something else draws on the terminal (a dataset's own progress bar)."""
        with self._lock:
            self.step_name, self.step_done, self.step_total = name, 0, total
            self.step_unit, self.step_draw = unit, draw
            self._step_t0, self._step_logged = time.time(), 0.0
            if not draw and self.mode == "bar":  # the step's name stays above the other bar
                self.stream.write("\r\033[K" + self.text() + "\n")
                self.stream.flush()
                self._shown = False
        self.refresh()

    def advance(self, n: int = 1) -> None:
        """`n` more items of the current step are done (drawn at the next tick)."""
        self.step_done += n

    def trials(self, todo: int, skipped: int) -> None:
        """Trials start running: the line counts them from now on (an adaptive study's next
        round counts its own, from zero)."""
        with self._lock:
            self.todo, self.skipped, self.step_name, self.step_draw = todo, skipped, None, True
            self.done = self.failed = self.retries = 0
            self.running.clear()
            self.epochs.clear()
            self._first_done, self._last_counts = None, ()
        self.refresh(force=True)

    @contextlib.contextmanager
    def ticking(self) -> Iterator[Progress]:
        """Redraw the line every `tick_s` from a background thread while the block runs; on
        leaving it, a step's unfinished bar is cleared (an error line may follow)."""
        if self.mode == "none" or self._ticker is not None:
            yield self
            return
        self._stop.clear()
        self._ticker = threading.Thread(target=self._tick, name="ablate-progress", daemon=True)
        self._ticker.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._ticker.join()
            self._ticker = None
            with self._lock:
                if self.step_name is not None and self._shown:
                    self._end_bar(clear=True)

    def _tick(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - a redraw must never end the live line
                pass

    def _end_bar(self, clear: bool = False) -> None:
        self.stream.write("\r\033[K" if clear else "\n")
        self.stream.flush()
        self._shown = False

    # ------------------------------------------------------------------ trials
    def start(self, tid: str) -> None:
        with self._lock:  # the ticker's `text` reads these: change them only under the lock
            self.running.add(tid)
        self.refresh()

    def epoch(self, tids: list[str], label: str, epoch: int, epochs: int,
              s_per_epoch: float) -> None:
        """A running pack (`tids`) reached `epoch` of `epochs`, at `s_per_epoch` so far."""
        with self._lock:
            self.epochs[tids[0]] = (tuple(tids), label, epoch, epochs, s_per_epoch)
        self.refresh()

    def _drop_epochs(self, tid: str) -> None:
        for key in [k for k, v in self.epochs.items() if tid in v[0]]:
            del self.epochs[key]

    def finish(self, tid: str, status: str) -> None:
        with self._lock:
            self.running.discard(tid)
            self._drop_epochs(tid)
            self._first_done = self._first_done or time.time()
            if status == "ok":
                self.done += 1
            else:
                self.failed += 1
        self.refresh(force=self.mode == "bar")

    def unstored(self, tid: str) -> None:
        """The trial's result could not be written: it is no longer running, and stays to do
        (counted in the summary's 'not run', not as a retry)."""
        with self._lock:
            self.running.discard(tid)
        self.refresh(force=self.mode == "bar")

    def retry(self, tid: str) -> None:
        with self._lock:
            self.running.discard(tid)
            self._drop_epochs(tid)
            self.retries += 1
        self.refresh(force=self.mode == "bar")

    def text(self) -> str:
        el = time.time() - self.t0
        if self.step_name is not None:
            count = "" if self.step_total is None else \
                f": {self.step_done:,}/{self.step_total:,} {self.step_unit}".rstrip()
            return f"[{self.study}] {self.step_name}{count} | {_fmt(el)} elapsed"
        finished = self.done + self.failed
        left = self.todo - finished
        packs = list(self.epochs.values())  # one snapshot: every figure below reads the same
        if finished >= 2:
            eta = _fmt((time.time() - self._first_done) / (finished - 1) * left)
        elif packs:
            eta = _fmt(self._epoch_eta(left, packs))
        else:
            eta = _fmt(el * left) if finished else "--"
        retry = f", {self.retries} retried" if self.retries else ""
        training = "; ".join(f"{label} epoch {e}/{n} ({spe:.3g} s/epoch)"
                             for _, label, e, n, spe in packs[:2])
        more = f"; +{len(packs) - 2} more" if len(packs) > 2 else ""
        training = f": {training}{more}" if training else ""
        return (f"[{self.study}] {finished}/{self.todo} finished: {self.done} ok, {self.failed} "
                f"failed{retry}, {len(self.running)} running{training}, {self.skipped} skipped | "
                f"{_fmt(el)} elapsed, ETA {eta}")

    def _epoch_eta(self, left: int, packs: list[tuple]) -> float:
        """Before two trials finish: the running packs' remaining epochs at their own pace, then
        the trials not yet started, each as long as a running one, as many at once as run now."""
        remaining = max((n - e) * spe for _, _, e, n, spe in packs)
        per_trial = sum(n * spe for _, _, _, n, spe in packs) / len(packs)
        waiting = max(0, left - len(self.running))
        return remaining + waiting * per_trial / max(1, len(self.running))

    def refresh(self, force: bool = False) -> None:
        if self.mode == "none":
            return
        with self._lock:
            now = time.time()
            if self.step_name is not None:
                self._refresh_step(now)
                return
            text = self.text()
            if self.mode == "bar":
                if force or now - self._last > 0.5:
                    self.stream.write("\r\033[K" + text)
                    self.stream.flush()
                    self._last, self._shown = now, True
            else:  # a log: a line when the counts change (at most every every_s) or a heartbeat
                counts = (self.done, self.failed, self.retries, len(self.running))
                changed = counts != self._last_counts and now - self._last >= self.every_s
                # a long trial's epochs, now and then
                trained = bool(self.epochs) and now - self._epoch_logged >= self.epoch_every_s
                if force or changed or trained or now - self._last >= self.heartbeat_s:
                    self.stream.write(text + "\n")
                    self.stream.flush()
                    self._last, self._last_counts = now, counts
                    if self.epochs:
                        self._epoch_logged = now

    def _refresh_step(self, now: float) -> None:
        """A driver step: nothing before `quiet_s` of the run; then a bar redrawn at every
        tick, or a log line once the step has lasted `quiet_s` and every `step_every_s`.
        In a log the unnamed first step ("starting": imports, reading the study) waits
        `step_every_s` before its first line, so an input refused on a slow machine still
        prints its one error line only (on a terminal the bar is cleared before it)."""
        if not self.step_draw or now - self.t0 < self.quiet_s:
            return
        first = self.quiet_s if self.step_name != "starting" else max(self.quiet_s,
                                                                      self.step_every_s)
        if self.mode == "bar":
            self.stream.write("\r\033[K" + self.text())
            self._shown = True
        elif now - self._step_t0 >= first and (
                not self._step_logged or now - self._step_logged >= self.step_every_s):
            self.stream.write(self.text() + "\n")
            self._step_logged = now
        else:
            return
        self.stream.flush()

    def close(self) -> None:
        if self.mode == "none":
            return
        with self._lock:
            if self.step_name is not None:  # no trial ran: end a step's bar, print no count
                if self._shown:
                    self._end_bar(clear=True)
                return
            self.running.clear()
            if self.mode == "bar":
                self.stream.write("\r\033[K" + self.text() + "\n")
            else:
                self.stream.write(self.text() + "\n")
            self.stream.flush()
            self._shown = False


def _fmt(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else \
        f"{s // 60}:{s % 60:02d}"
