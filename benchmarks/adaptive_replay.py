"""An adaptive study's store replayed under today's rules, without training anything.

    python benchmarks/adaptive_replay.py supervision --max 40 \
        --store benchmarks/results/cpu-2026-12-03-adaptive/store \
        --out benchmarks/results/cpu-2026-12-03-adaptive

A finished adaptive run that took every row to `max` holds every seed any rule could have
asked for, so the rounds can be decided again from its store as the driver decides them
(`adaptive_rounds.Rounds`, the store's values, round by round) and counted: which comparisons
each rule decides and in which round, which it stops, the seed runs it trains and the trial
time those would have taken (the store's `trial_s` of the trials it runs). The record's own
decisions (its `adaptive.json`) stand beside, so a change of rule is measured on real seeds:
here, stopping the open comparisons that no seeds up to `max` could decide
(`analysis.betting.can_still_decide`). Writes `OUT/<study name>_replay.json`.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def replay(study_name: str, overrides: list[str], store: Path) -> dict:
    """Decide the stored study's rounds again under today's rules from its store."""
    from ablate.runner.plan import adaptive as core
    from ablate.runner.plan.adaptive_rounds import Rounds
    from ablate.runner.study.expand import build_study

    study, _ = build_study(study_name, overrides)
    ad = study.spec.adaptive
    if ad is None:
        raise SystemExit(f"study {study_name} is not adaptive: add seeds={{adaptive:...}}")
    rounds = Rounds.start(ad, study.trials)
    values = core.store_values(ad, rounds.plan, store, study.name)
    cost = _trial_seconds(store / study.name)
    ran_s, trained = 0.0, []
    for r in range(1, ad.rounds + 1):
        todo = rounds.round_trials(r)
        missing = [t.trial_id for t in todo if t.trial_id not in cost]
        if missing:
            raise SystemExit(f"round {r} needs {len(missing)} trial(s) the store lacks "
                             f"(e.g. {missing[0]}): replay a store that ran every row to max")
        ran_s += sum(cost[t.trial_id] for t in todo)
        trained.append(sum(len(t.config.seeds) for t in todo))
        rounds.decide(r, values)
        if not rounds.active:
            break
    return {"name": study.name, "round": rounds.round, "seed_runs": rounds.seed_runs,
            "seed_runs_max": rounds.seed_runs_max, "trial_s": round(ran_s, 1),
            "seed_runs_per_round": trained,
            "comparisons": [{"row": d.row, "baseline": d.baseline, "dataset": d.dataset,
                             "split": d.split, "decision": d.decision, "round": d.round,
                             "stopped": d.stopped, "seeds": d.seeds}
                            for d in rounds.decisions.values()]}


def _trial_seconds(folder: Path) -> dict[str, float]:
    """Trial id -> its time in its worker (`trial_s`, the whole trial: a replayed round runs a
    trial whole or not at all), from the store's result files."""
    import pandas as pd

    files = sorted((folder / "trials").glob("*.parquet"))
    frame = pd.concat([pd.read_parquet(f, columns=["trial_id", "trial_s"]) for f in files])
    return frame.groupby("trial_id")["trial_s"].first().astype(float).to_dict()


def stored(store: Path, study: str) -> dict:
    doc = json.loads((store / study / "adaptive.json").read_text())
    return {"round": doc["round"], "seed_runs": doc["seed_runs"],
            "comparisons": [{k: c[k] for k in ("row", "baseline", "dataset", "split",
                                                "decision", "round", "seeds")}
                            for c in doc["comparisons"]]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("study")
    p.add_argument("--max", type=int, required=True, help="the run's seeds.adaptive.max")
    p.add_argument("--store", type=Path, required=True, help="results folder of the run")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--override", action="append", default=[],
                   help="an override the run had (repeatable; e.g. data.path=DIR, part of "
                        "the trial ids)")
    a = p.parse_args(argv)
    overrides = [*a.override, f"seeds={{adaptive:{{max:{a.max}}}}}"]
    now = replay(a.study, overrides, a.store)
    name = now["name"]
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    doc = {"study": a.study, "max": a.max, "store": str(a.store), "replayed": now,
           "recorded": stored(a.store, name), "overrides": a.override, "git_sha": sha,
           "git_dirty": bool(dirty),
           "machine": {"python": platform.python_version()},
           "command": f"python benchmarks/adaptive_replay.py {a.study} --max {a.max} "
                      f"--store {a.store} --out {a.out}"
                      + "".join(f" --override {o}" for o in a.override)}
    a.out.mkdir(parents=True, exist_ok=True)
    path = a.out / f"{name}_replay.json"
    path.write_text(json.dumps(doc, indent=1))
    rec = doc["recorded"]
    print(f"{name}: replayed {now['seed_runs']} seed runs ({now['trial_s'] / 3600:.2f} h of "
          f"trial time) to round {now['round']}, recorded {rec['seed_runs']} to round "
          f"{rec['round']}; {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
