"""Running an adaptive-seed study in rounds (`ablate.runner.plan.adaptive`).

Each round is an ordinary run (`run_study`) of the trials that hold that round's seeds for
the (row, dataset) pairs still in an open comparison; what is stored is skipped. A round's
decisions are written to the decisions file when it ends and a rerun replays them from there
(`adaptive_rounds.Rounds.resume`), never deciding a stored round again from results that came
later (a failed seed retried by the rerun counts in the next round); `force=true` drops them
and says which. A round whose trials failed after their retries is decided on the seeds both
rows of a comparison have and the study goes on (exit 1 at the end, as any run with failed
trials); an interrupted round, results or decisions that could not be written or read (exit
3, the usual line) or Ray Tune stopping end the study there (a rerun resumes it). plan.json
names the trials of every round run so far.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from ablate.runner.execute.progress import Progress, Summary
from ablate.runner.plan import adaptive as ad_plan
from ablate.runner.plan import adaptive_rounds
from ablate.runner.study.expand import Study


def run_adaptive(study: Study, results_dir: str, force: bool = False,
                 ray_address: str | None = None, progress: str = "auto",
                 display: Progress | None = None,
                 say: Callable[[str], None] | None = None) -> Summary:
    """Every round of `study` until its comparisons are decided or have `max` seeds; the
    summary of all rounds. `say(line)` gets one line per round (stderr by default). One Ray
    serves every round: started (or joined) by the first, stopped once at the end."""
    from ablate.runner.execute.driver import HeldRay, run_study

    ad = study.spec.adaptive
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    t0 = time.time()
    rounds = adaptive_rounds.Rounds.start(ad, study.trials)
    path = Path(results_dir) / study.name / ad_plan.DECISIONS_FILE
    n_pairs = len(rounds.active)
    total = Summary(study.name, len(study.trials), results=str(Path(results_dir) / study.name))
    try:
        stored = adaptive_rounds.read_stored(path)
    except OSError as e:
        return _storage_stop(total, e, path, t0)
    if stored is not None and force:
        say(f"[{study.name}] {adaptive_rounds.dropped(stored)}")
    elif stored is not None:
        why = rounds.resume(stored)
        say(f"[{study.name}] " + (f"stored decisions not replayed: {why}; decided again from "
                                  "the store" if why else
                                  f"replaying the stored decisions of round(s) 1-{rounds.frozen}"))
    planned: list[str] = []
    held = HeldRay()
    try:
        for r in range(1, ad.rounds + 1):
            todo = rounds.round_trials(r)
            planned += [t.trial_id for t in todo]
            seeds = ad.round_seeds(r)
            span = f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else f"{seeds[0]}"
            c = rounds.counts()
            say(f"[{study.name}] round {r}: seed(s) {span} for {len(rounds.active)} of {n_pairs} "
                f"(row, dataset) pairs; comparisons {c['decided']} decided / {c['open']} open"
                f"{_stopped(c)}; "
                f"{rounds.saved} seed runs saved so far")
            if display is not None:
                display.study = f"{study.name} round {r}"
            part = run_study(Study(study.spec, todo, planned=list(planned)), results_dir,
                             force=force, ray_address=ray_address, progress=progress,
                             display=display, held=held)
            _add(total, part)
            if part.storage_error or part.remaining or part.signal or part.tune_error:
                break  # a rerun resumes this round; failed trials alone do not stop the study
            try:
                values = None if r <= rounds.frozen else ad_plan.store_values(
                    ad, rounds.plan, results_dir, study.name)
                rounds.decide(r, values)
                if r > rounds.frozen:
                    rounds.write(path)
            except OSError as e:  # reading the store or writing the decisions: exit 3
                _storage_stop(total, e, path)
                break
            if not rounds.active:
                break
    finally:
        if display is not None and held.starter is not None:
            display.step("stopping Ray")
        held.stop(total, ray_address)
    c = rounds.counts()
    absent = f", {c['absent']} without their split in the data" if c["absent"] else ""
    left = f", {len(rounds.left_out)} left out (no {ad.metric} on a row)" if rounds.left_out else ""
    where = f"; decisions in {path}" if rounds.round else ""  # none before a round has run
    say(f"[{study.name}] adaptive seeds: {c['decided']} of {len(rounds.decisions)} comparisons "
        f"decided, {c['open']} open{_stopped(c)}{absent}{left}; {rounds.seed_words()}{where}")
    total.total = total.ok + total.skipped + len(total.failed) + len(total.remaining)
    total.wall_s = time.time() - t0
    return total


def _storage_stop(total: Summary, e: OSError, path: Path, t0: float | None = None) -> Summary:
    """An OSError reading the store or the decisions file, or writing it: the summary's
    storage line (exit 3, 'free space or fix permissions, then rerun')."""
    from ablate.runner.execute.store import write_error

    total.storage_error = write_error(e, Path(e.filename) if e.filename else path)
    if t0 is not None:
        total.wall_s = time.time() - t0
    return total


def _add(total: Summary, part: Summary) -> None:
    """Fold one round's summary into the study's."""
    total.ok += part.ok
    total.skipped += part.skipped
    total.failed += part.failed
    total.remaining += part.remaining
    total.retries += part.retries
    for k, v in part.errors.items():
        total.errors.setdefault(k, []).extend(v)
    for f in ("failures_log", "storage_error", "signal", "ray_logs", "tune_error"):
        if getattr(part, f):
            setattr(total, f, getattr(part, f))
    for k, v in part.timings.items():
        total.timings[k] = total.timings.get(k, 0.0) + v


def _stopped(counts: dict[str, int]) -> str:
    """The open comparisons no seeds up to max can decide (they ask for no more seeds)."""
    n = counts.get("stopped", 0)
    return f" ({n} of them beyond deciding by max: no more seeds)" if n else ""
