"""Running an adaptive-seed study in rounds (`ablate.runner.plan.adaptive`).

Each round is an ordinary run (`run_study`) of the trials that hold that round's seeds for
the rows still in an open comparison; what is stored is skipped, so a rerun replays the
rounds already run from the store (the same decisions: each is made from the seeds of its
own and earlier rounds only) and continues with the first round not complete.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from ablate.runner.execute.progress import Progress, Summary
from ablate.runner.plan import adaptive as ad_plan
from ablate.runner.study.expand import Study


def run_adaptive(study: Study, results_dir: str, force: bool = False,
                 ray_address: str | None = None, progress: str = "auto",
                 display: Progress | None = None, say=None) -> Summary:
    """Every round of `study` until its comparisons are decided or have `max` seeds; the
    summary of all rounds. `say(line)` gets one line per round (stderr by default)."""
    from ablate.runner.execute.driver import run_study

    ad = study.spec.adaptive
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    t0 = time.time()
    plan = ad_plan.plan_rows(study.trials)
    decisions = ad_plan.initial_decisions(ad, plan)
    rows = sorted(set(plan.row_of.values()))
    total = Summary(study.name, len(study.trials), results=str(Path(results_dir) / study.name))
    seeds_max = len(rows) * ad.max
    seeds_run = saved = 0
    active = set(rows)
    for r in range(1, ad.rounds + 1):
        seeds = set(ad.round_seeds(r))
        todo = [t for t in study.trials if set(t.config.seeds) <= seeds
                and plan.row_of[t.trial_id] in active]
        if not todo:
            break
        seeds_run += len(active) * len(seeds)
        saved += (len(rows) - len(active)) * len(seeds)
        n_open = sum(d.decision == "open" for d in decisions.values())
        span = f"{min(seeds)}-{max(seeds)}" if len(seeds) > 1 else f"{min(seeds)}"
        label = (f"round {r}: seed(s) {span} for {len(active)} of {len(rows)} rows; comparisons "
                 f"{len(decisions) - n_open} decided / {n_open} open; {saved} seed runs saved "
                 "so far")
        say(f"[{study.name}] {label}")
        if display is not None:
            display.study = f"{study.name} round {r}"
        part = run_study(Study(study.spec, todo), results_dir, force=force,
                         ray_address=ray_address, progress=progress, display=display)
        _add(total, part)
        if part.exit_code != 0:  # interrupted, failed or unstored: stop here; a rerun goes on
            break
        values = ad_plan.store_values(ad, plan, results_dir, study.name)
        ad_plan.decide_round(ad, plan, values, max(seeds) + 1, r, decisions)
        ad_plan.write_decisions(Path(results_dir) / study.name / ad_plan.DECISIONS_FILE, ad,
                                decisions, r, seeds_run, seeds_max)
        active = ad_plan.active_rows(decisions)
        if not active:
            break
    n_open = sum(d.decision == "open" for d in decisions.values())
    say(f"[{study.name}] adaptive seeds: {len(decisions) - n_open} of {len(decisions)} "
        f"comparisons decided, {n_open} open; {seeds_run} of {seeds_max} seed runs "
        f"({seeds_max - seeds_run} saved); decisions in "
        f"{Path(results_dir) / study.name / ad_plan.DECISIONS_FILE}")
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

