"""Running an adaptive-seed study in rounds (`ablate.runner.plan.adaptive`).

Each round is an ordinary run (`run_study`) of the trials that hold that round's seeds for
the (row, dataset) pairs still in an open comparison; what is stored is skipped, so a rerun
replays the rounds already run from the store (the same decisions: each is made from the
seeds of its own and earlier rounds only) and continues with the first round not complete.
A round whose trials failed after their retries is decided on the seeds both rows of a
comparison have and the study goes on (exit 1 at the end, as any run with failed trials); an
interrupted round, results that could not be written or Ray Tune stopping end the study
there (a rerun resumes it). plan.json names the trials of every round run so far.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

from ablate.runner.execute.progress import Progress, Summary
from ablate.runner.plan import adaptive as ad_plan
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
    rounds = ad_plan.Rounds.start(ad, study.trials)
    path = Path(results_dir) / study.name / ad_plan.DECISIONS_FILE
    n_pairs = len(rounds.active)
    total = Summary(study.name, len(study.trials), results=str(Path(results_dir) / study.name))
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
                f"(row, dataset) pairs; comparisons {c['decided']} decided / {c['open']} open; "
                f"{rounds.saved} seed runs saved so far")
            if display is not None:
                display.study = f"{study.name} round {r}"
            part = run_study(Study(study.spec, todo, planned=list(planned)), results_dir,
                             force=force, ray_address=ray_address, progress=progress,
                             display=display, held=held)
            _add(total, part)
            if part.storage_error or part.remaining or part.signal or part.tune_error:
                break  # a rerun resumes this round; failed trials alone do not stop the study
            rounds.decide(r, ad_plan.store_values(ad, rounds.plan, results_dir, study.name))
            rounds.write(path)
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
        f"decided, {c['open']} open{absent}{left}; {rounds.seed_words()}{where}")
    total.total = total.ok + total.skipped + len(total.failed) + len(total.remaining)
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
