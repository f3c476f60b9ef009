"""A real study run adaptively, beside the same study at a fixed 10 seeds (issue 43).

    python benchmarks/adaptive_study.py supervision --max 20     # runs it, then writes the JSON
    python benchmarks/adaptive_study.py supervision --max 20 --results DIR   # resume / re-read
    python benchmarks/adaptive_study.py benchmarks/studies/tu_proteins.yaml --max 40 \
        --override data.path=DIR --out benchmarks/results/<machine-date>-adaptive-tu

Runs `python -m ablate.run study=NAME seeds={adaptive: {max: MAX}}` as a user would (its
defaults: round 1 = seeds 0-9 of every row, then 2 seeds a round for the rows of open
comparisons), timing each round's line as it appears. Round 1 is exactly the fixed 10-seed
study (the same trials, the same ids), so one run gives both: the fixed study's verdicts are
the report's paired test on seeds 0-9 (exact sign-flip, Holm over the comparisons, p < 0.05)
and the adaptive study's are its confidence-sequence decisions after its last round. Writes
`benchmarks/results/cpu-2026-11-27-adaptive/NAME.json` and the run's log beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "benchmarks" / "results" / "cpu-2026-11-27-adaptive"


def run(name: str, max_seeds: int, results: Path, log: Path, overrides: list[str] = ()) -> dict:
    cmd = [sys.executable, "-m", "ablate.run", f"study={name}", *overrides,
           f"seeds={{adaptive:{{max:{max_seeds}}}}}", f"results_dir={results}", "progress=none"]
    t0 = time.time()
    rounds = []
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        for line in proc.stdout:
            f.write(f"[{time.time() - t0:8.1f} s] {line}")
            f.flush()
            if "] round " in line:
                rounds.append({"t_s": round(time.time() - t0, 1), "line": line.strip()})
        rc = proc.wait()
    return {"command": " ".join(cmd[1:]), "exit": rc, "wall_s": round(time.time() - t0, 1),
            "round_started_s": rounds}


def from_log(log: Path) -> dict:
    """The round times and wall of a finished run, read back from its log (`--no-run`)."""
    import re

    text = log.read_text() if log.exists() else ""
    rounds = [{"t_s": float(t), "line": line.strip()} for t, line in
              re.findall(r"^\[\s*([\d.]+) s\] (\[\S+\] round .*)$", text, re.M)]
    ends = re.findall(r"^\[\s*([\d.]+) s\] study ", text, re.M)
    cmd = re.findall(r"^\$ \S+ (.*)$", text, re.M)
    return {"command": cmd[-1] if cmd else "", "wall_s": float(ends[-1]) if ends else None,
            "round_started_s": rounds}


def round_costs(name: str, results: Path, options: dict) -> list[dict]:
    """Per round, from the store (so a run stopped and resumed across sessions counts whole):
    the trials, seed runs and worker seconds (`trial_s`, each trial's time in its worker) of
    the trials holding that round's seeds, and the span from its first trial's start to its
    last one's end (within one session's run that is the round's wall)."""
    import pandas as pd

    from ablate.runner.plan.adaptive import AdaptiveSeeds

    ad = AdaptiveSeeds(**{**options, "split": tuple(options.get("split", ()))})
    of_seed = {s: r for r in range(1, ad.rounds + 1) for s in ad.round_seeds(r)}
    cols = ["trial_id", "seed", "status", "trial_s", "started_at", "finished_at"]
    frames = [pd.read_parquet(f, columns=cols) for f in sorted((results / name / "trials").glob("*.parquet"))]
    if not frames:
        return []
    trials = pd.concat(frames).groupby("trial_id").agg(
        seed=("seed", "min"), seeds=("seed", "nunique"), ok=("status", lambda s: (s == "ok").all()),
        trial_s=("trial_s", "first"), start=("started_at", "min"), end=("finished_at", "max"))
    trials["round"] = trials["seed"].map(of_seed)
    out = []
    for r, g in trials.groupby("round"):
        out.append({"round": int(r), "trials": len(g), "failed": int((~g["ok"]).sum()),
                    "seed_runs": int(g["seeds"].sum()), "trial_s": round(float(g["trial_s"].sum()), 1),
                    "span_s": round(float(g["end"].max() - g["start"].min()), 1)})
    return out


def trial_commits(name: str, results: Path) -> list[str]:
    """The commits the study's trials ran at, as their rows record them (`git_sha`, with `*`
    where the tree was modified): the code of the run, whichever commit re-reads it."""
    import pandas as pd

    files = sorted((results / name / "trials").glob("*.parquet"))
    if not files:
        return []
    df = pd.concat([pd.read_parquet(f, columns=["git_sha", "git_dirty"]) for f in files])
    return sorted({f"{s}{'*' if d else ''}" for s, d in zip(df["git_sha"], df["git_dirty"].fillna(""))})


def fixed_verdicts(name: str, results: Path, decisions: list[dict],
                   overrides: list[str] = ()) -> list[dict]:
    """The report's test at a fixed 10 seeds for each comparison the adaptive run made."""
    import numpy as np

    from ablate.runner.plan import adaptive as ad
    from ablate.runner.study.expand import build_study
    from analysis import stats

    study, _ = build_study(name, [*overrides, "seeds={adaptive:{max:10}}"])
    plan = ad.plan_rows(study.trials)
    values = ad.store_values(ad.AdaptiveSeeds(max=10), plan, results, Path(name).stem)
    values = values[values["seed"] < 10]
    by = {k: g.set_index("seed")["value"] for k, g in values.groupby(["row", "dataset", "split"])}
    out, ps = [], []
    for d in decisions:
        a, b = by[(d["row"], d["dataset"], d["split"])], by[(d["baseline"], d["dataset"], d["split"])]
        seeds = sorted(set(a.index) & set(b.index))
        p = stats.paired(a.loc[seeds].to_numpy(float), b.loc[seeds].to_numpy(float))
        ps.append(p.p)
        out.append({"row": d["row"], "baseline": d["baseline"], "split": d["split"],
                    "seeds": len(seeds), "delta": float(np.mean(a.loc[seeds] - b.loc[seeds])),
                    "p": p.p})
    for o, ph in zip(out, stats.holm(ps)):
        o["p_holm"] = float(ph)
        o["verdict"] = ("greater" if o["delta"] > 0 else "less") if ph < 0.05 else "no difference shown"
    return out


def row_spreads(name: str, results: Path, max_seeds: int, overrides: list[str] = ()) -> list[dict]:
    """Each row's seeds in the store, per (dataset, split): count, mean and sample std of the
    metric the comparisons read (the spreads `adaptive_sim.py` simulates are taken from here)."""
    from ablate.runner.plan import adaptive as ad
    from ablate.runner.study.expand import build_study

    study, _ = build_study(name, [*overrides, f"seeds={{adaptive:{{max:{max_seeds}}}}}"])
    values = ad.store_values(ad.AdaptiveSeeds(max=max_seeds), ad.plan_rows(study.trials), results,
                             Path(name).stem)
    return [{"row": row, "dataset": dataset, "split": split, "seeds": int(len(g)),
             "mean": round(float(g["value"].mean()), 4),
             "std": round(float(g["value"].std(ddof=1)), 4) if len(g) > 1 else None}
            for (row, dataset, split), g in values.groupby(["row", "dataset", "split"])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("study", help="a study name or a study file (its store is under its stem)")
    ap.add_argument("--override", action="append", default=[],
                    help="a command-line override for the run and the re-read (repeatable)")
    ap.add_argument("--out", type=Path, default=OUT, help="the record's folder")
    ap.add_argument("--max", type=int, default=20)
    ap.add_argument("--results", type=Path, default=None, help="result store (default: a folder in /tmp)")
    ap.add_argument("--no-run", action="store_true", help="only re-read a finished run's store")
    ap.add_argument("--note", default="other work ran beside it (nice 19 MNIST-75SP runs)",
                    help="what else ran on the machine (the record's machine note)")
    args = ap.parse_args()
    name = Path(args.study).stem
    results = args.results or Path(f"/tmp/adaptive_{name}")
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    log = out / f"{name}.log"
    got = from_log(log) if args.no_run else run(args.study, args.max, results, log, args.override)
    doc = json.loads((results / name / "adaptive.json").read_text())
    fixed = fixed_verdicts(args.study, results, doc["comparisons"], args.override)
    from ablate.trial.provenance import git_sha, tree_state

    costs = round_costs(name, results, doc["options"])
    commits = trial_commits(name, results)
    rec = {"study": name, "max": args.max, **got, "adaptive": doc, "fixed_10": fixed,
           "overrides": args.override, "round_costs": costs,
           "row_spreads": row_spreads(args.study, results, args.max, args.override),
           "trials_git_sha": commits,
           "git_sha": git_sha(), "git_dirty": tree_state(str(ROOT)),
           "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                       "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                       "note": args.note}}
    (out / f"{name}.json").write_text(json.dumps(rec, indent=1) + "\n")
    print(json.dumps({k: v for k, v in rec.items() if k not in ("adaptive",)}, indent=1)[:3000])


if __name__ == "__main__":
    main()
