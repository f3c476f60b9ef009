"""Generated tables of MNIST-75SP: the authors' training code beside ours (the reference runs
and the full-size runs, with the reading under each row). Called from `benchmarks/tables.py`
(its `TABLES` registry).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import tables_common as common


def mnist_reference() -> str:
    """MNIST-75SP: the authors' training code and ours on the same graphs, at the last epoch."""
    rel = "cpu-2026-11-27-mnist-train-reference/mnist_train_reference.jsonl"
    recs = common.lines(rel)
    if not recs:
        return common.missing(rel)
    out = ["| side | row | train graphs | epochs | change | seeds | TEST | NOISY | NOISY-C | "
           "median seconds per seed |", "|---|---|---:|---:|---|---|---:|---:|---:|---:|"]
    groups: dict[tuple, list[dict]] = {}
    for r in recs:
        change = ", ".join(f"{k}={v}" for k, v in sorted((r.get("set") or {}).items()))
        key = (r["row"], r.get("n_train") or 60000, r["epochs_total"], change, r["side"])
        group = groups.setdefault(key, [])  # one record per seed and LR timing, the newest:
        group[:] = [x for x in group  # a rerun with another --chunk replaces the older record
                    if (x["seed"], x.get("lr_timing")) != (r["seed"], r.get("lr_timing"))]
        group.append(r)
    for (row, n_train, total, change, side), rs in sorted(groups.items()):
        rs = sorted((r for r in rs if str(total) in r["curve"]), key=lambda r: r["seed"])
        if not rs:
            continue
        cells = []
        for k in range(3):
            v = [r["curve"][str(total)][k] for r in rs]
            sd = f" ± {statistics.stdev(v):.2f}" if len(v) > 1 else ""
            cells.append(f"{statistics.mean(v):.2f}{sd}" + (f" ({' / '.join(f'{x:.2f}' for x in v)})"
                                                           if len(v) > 1 else ""))
        secs = statistics.median(r["seconds"] for r in rs if r.get("seconds"))
        out.append(f"| {side} | {row} | {n_train:,} | {total} | {change or '-'} | "
                   f"{','.join(str(r['seed']) for r in rs)} | " + " | ".join(cells) + f" | {secs:.0f} |")
    for (row, n_train, total, change, side), rs in sorted(groups.items()):
        theirs = groups.get((row, n_train, total, change, "authors"))
        if side != "ours" or not theirs:
            continue
        o = [r["curve"][str(total)] for r in rs if str(total) in r["curve"]]
        a = [r["curve"][str(total)] for r in theirs if str(total) in r["curve"]]
        out.append(f"| ours - authors | {row} | {n_train:,} | {total} | {change or '-'} | "
                   "difference [95% Welch interval], Welch p; Mann-Whitney p ours < / > theirs | "
                   + " | ".join(_compare([x[k] for x in o], [x[k] for x in a]) for k in range(3)) + " | |")
    return "\n".join(out) + f"\n\nSource: `benchmarks/results/{rel}` " \
        f"(`python benchmarks/mnist_train_reference.py`; {common.commits(recs)}; " \
        f"{recs[0].get('machine', '')}; mean ± sample std over the seeds, each seed in brackets).\n"


# The published TU figures the generated comparison stands beside (quotes, not measurements):
# row -> (label, the paper's weakly supervised figure, the authors' notebook of June 2019)


SPLIT_NAMES = ("TEST", "NOISY", "NOISY-C")


def _compare(ours: list[float], theirs: list[float]) -> str:
    """ours - theirs: the mean difference, its 95% Welch interval, Welch's two-sided p and
    Mann-Whitney's one-sided p both ways (ours < theirs, ours > theirs)."""
    from scipy import stats

    d = statistics.mean(ours) - statistics.mean(theirs)
    if len(ours) < 2 or len(theirs) < 2:
        return f"{d:+.2f} (too few seeds for an interval)"
    t = stats.ttest_ind(ours, theirs, equal_var=False)
    lo, hi = t.confidence_interval(0.95)
    less = stats.mannwhitneyu(ours, theirs, alternative="less").pvalue
    more = stats.mannwhitneyu(ours, theirs, alternative="greater").pvalue
    return f"{d:+.2f} [{lo:+.1f}, {hi:+.1f}], p {t.pvalue:.2f}; MW {less:.2f} / {more:.2f}"


def _cells(values: list[list[float]]) -> list[str]:
    out = []
    for k in range(3):
        v = [x[k] for x in values]
        sd = f" ± {statistics.stdev(v):.2f}" if len(v) > 1 else ""
        out.append(f"{statistics.mean(v):.2f}{sd}" + (f" ({' / '.join(f'{x:.2f}' for x in v)})"
                                                     if len(v) > 1 else ""))
    return out


FULLSIZE_VARIANT = {"sup": "ChebyGIN (ref. script) sup", "global": "ChebyGIN (ref. script) global pool"}


def detectable(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The difference of two rows' means that a two-sided two-sample t-test at `alpha`, with
    `n` seeds a side and seed std `sd` in both, finds with probability `power` (noncentral t,
    equal variances, 2n - 2 degrees of freedom). The half-width of a 95% interval is the
    difference found only about half the time."""
    import math

    from scipy import optimize, stats

    df = 2 * n - 2
    crit = stats.t.ppf(1 - alpha / 2, df)

    def short(nc: float) -> float:
        low = stats.nct.cdf(-crit, df, nc)  # the wrong-sign tail: nan once it is 0 to precision
        return stats.nct.sf(crit, df, nc) + (0.0 if math.isnan(low) else low) - power

    return optimize.brentq(short, 0.0, 40.0) * sd * (2 / n) ** 0.5


def _fullsize_reading(row: str, sides: dict[str, list[dict]]) -> str:
    """What a row's finished seeds say about the paper's TEST-NOISY (mean ± std over its
    seeds): each code's mean with its 95% Student-t interval and whether the paper's mean lies
    in it (`analysis.tables.reaches`, as the report says it), the seeds inside the paper's
    mean ± std, and, from the two codes' pooled seed spread, the difference of two rows' means
    that 5 and 10 seeds a side detect with 80% power (`detectable`)."""
    from scipy import stats

    from analysis.reference import reference
    from analysis.tables import reaches

    ref = reference(FULLSIZE_VARIANT[row], "mnist_sp", "test_noisy")
    parts, spreads = [], []
    for side, rs in sides.items():
        v = [r["curve"]["30"][1] for r in rs]
        if len(v) < 2:
            parts.append(f"{side}: {'no seed' if not v else 'one seed'} finished, no interval")
            continue
        m, sd = statistics.mean(v), statistics.stdev(v)
        lo, hi = stats.t.interval(0.95, len(v) - 1, loc=m, scale=sd / len(v) ** 0.5)
        inside = sum(abs(x - ref.mean) <= ref.std for x in v)
        parts.append(f"{side} {m:.2f} [{lo:.1f}, {hi:.1f}] over {len(v)} seeds (seed std "
                     f"{sd:.2f}), the paper's mean inside the interval: "
                     f"{reaches(ref.mean, lo, hi)}; {inside} of {len(v)} seeds within "
                     f"{ref.mean:g} ± {ref.std:g}")
        spreads.append((sd, len(v)))
    text = (f"Reading (generated from the rows above): the paper's TEST-NOISY {ref.mean:g} ± "
            f"{ref.std:g} against each code's mean [95% Student-t interval]: {'; '.join(parts)}.")
    if spreads:
        sd = (sum(s * s * (n - 1) for s, n in spreads) / sum(n - 1 for _, n in spreads)) ** 0.5
        power = " and ".join(f"{detectable(sd, n):.1f} at {n}" for n in (5, 10))
        text += (f" Seed to seed, NOISY moves by {sd:.1f} points (sample std pooled over the "
                 f"codes); with this spread, a two-sided t-test at 5% finds a difference of two "
                 f"rows' means with 80% power when it is about {power} seeds a side (a smaller "
                 f"one is missed more often than found).")
    return text


FULLSIZE = ("cpu-2026-11-27-mnist-fullsize", "cpu-2026-12-02-mnist-fullsize-exact")
# how each kind of authors' record was resumed between its chunks of 5 epochs
AUTHORS_RUNS = {
    "exact": ("authors, one run", "their code run as one uninterrupted run (in chunks with "
              "torch's generator carried across them: `benchmarks/authors_resume.py`)"),
    "replay": ("authors, replayed chunks", "their code in chunks restarted from its checkpoints, "
               "each chunk replaying the first chunk's data order and dropout masks (their "
               "`main.py` reseeds at every start)")}


def _resume(r: dict) -> str:
    """How a full-size record's chunks were resumed: ours exactly (its saved training state),
    the authors' as the record says (before `resume` was recorded: replayed)."""
    return "exact" if r["side"] == "ours" else r.get("resume", "replay")


def fullsize_records() -> list[dict]:
    """The finished full-size records (60,000 graphs, 30 epochs, published LR timing, no
    change), one per (side, row, seed, timing, resume mode): the newest, whatever --chunk a
    rerun used (files oldest first, lines in the order written)."""
    newest: dict[tuple, dict] = {}
    for rel_dir in FULLSIZE:
        for r in common.lines(f"{rel_dir}/records.jsonl"):
            if (not r.get("n_train") and r.get("lr_timing") == "published" and not r.get("set")
                    and r.get("epochs_total") == 30 and "30" in r.get("curve", {})):
                newest[(r["side"], r["row"], r["seed"], r["lr_timing"], _resume(r))] = r
    return sorted(newest.values(), key=lambda r: (r["side"], r["row"], r["seed"]))


def _authors_used(row: str, recs: list[dict]) -> tuple[str, list[dict], list[dict]]:
    """The authors' records a row compares with ours: those run as one run once they cover
    every seed the replayed ones do, else the replayed ones; and the other kind's records."""
    by = {m: [r for r in recs if r["row"] == row and r["side"] == "authors" and _resume(r) == m]
          for m in AUTHORS_RUNS}
    covered = {r["seed"] for r in by["replay"]} <= {r["seed"] for r in by["exact"]}
    used = "exact" if by["exact"] and covered else "replay"
    return used, by[used], by["replay" if used == "exact" else "exact"]


def mnist_fullsize() -> str:
    """MNIST-75SP at full size (60,000 training graphs, 30 epochs): the authors' code and ours
    on the same graphs with the published LR timing, per seed, and their difference."""
    recs = fullsize_records()
    runs = sorted(p for d in FULLSIZE for p in (common.RESULTS / d / "runs").glob("*/progress.json"))
    out, shown = [], []
    for row in ("sup", "global"):
        used, theirs, other = _authors_used(row, recs)
        ours = [r for r in recs if r["row"] == row and r["side"] == "ours"]
        if not (theirs or other or ours):
            continue
        lines = [(AUTHORS_RUNS[used][0], theirs), ("ours", ours)]
        if other:
            lines.insert(1, (AUTHORS_RUNS["replay" if used == "exact" else "exact"][0], other))
        out += [f"**{'Supervised attention' if row == 'sup' else 'Global pool'} (`{row}`)**", "",
                "| code | seeds | TEST | NOISY | NOISY-C | NOISY at epochs 10 / 20 | median min per seed |",
                "|---|---|---:|---:|---:|---|---:|"]
        for side, rs in lines:
            shown += rs
            if not rs:
                out.append(f"| {side} | none finished yet | | | | | |")
                continue
            mid = " ; ".join("/".join(f"{r['curve'][e][1]:.1f}" if e in r["curve"] else "-"
                                      for e in ("10", "20")) for r in rs)
            mins = statistics.median(r["seconds"] for r in rs) / 60
            out.append(f"| {side} | {','.join(str(r['seed']) for r in rs)} | "
                       + " | ".join(_cells([r["curve"]["30"] for r in rs])) + f" | {mid} | {mins:.0f} |")
        if theirs and ours:
            cmp = [_compare([r["curve"]["30"][k] for r in ours], [r["curve"]["30"][k] for r in theirs])
                   for k in range(3)]
            out.append(f"| ours - {AUTHORS_RUNS[used][0]}: difference [95% Welch interval], Welch p; "
                       "Mann-Whitney p ours < / > theirs | | " + " | ".join(cmp) + " | | |")
        out += ["", _fullsize_reading(row, {"authors": theirs, "ours": ours}) + " "
                + _authors_note(used, theirs, other, row, runs), ""]
    going = []
    for p in runs:
        prog = json.loads(p.read_text())
        if prog.get("done", 0) < 30:
            last = max(prog["curve"], key=int) if prog.get("curve") else None
            at = f", epoch {last}: " + " / ".join(f"{x:.2f}" for x in prog["curve"][last]) if last else ""
            going.append(f"`{p.parent.parent.parent.name}/runs/{p.parent.name}` through epoch "
                         f"{prog.get('done', 0)}{at}")
    if going:
        out.append("In progress (resumable; not in the rows above): " + "; ".join(going) + ".")
        out.append("")
    if not out:
        return common.missing(f"{FULLSIZE[0]}/records.jsonl")
    files = " and ".join(f"`benchmarks/results/{d}/records.jsonl`" for d in FULLSIZE
                         if (common.RESULTS / d / "records.jsonl").exists())
    old = any(not r.get("chunks") or not all("git_sha" in c for c in r["chunks"]) for r in shown)
    return "\n".join(out) + f"\nSource: {files}, `runs/` beside each " \
        f"(`python benchmarks/mnist_train_reference.py --side SIDE --row ROW --seeds S " \
        f"[--resume-mode exact|replay]`; one record per side, row, seed and resume mode, the " \
        f"newest; {common.commits(shown) if shown else 'no finished record yet'}" \
        + ("; records written before chunks kept their commit name their last chunk's only"
           if old else "") + \
        "; TEST / NOISY / NOISY-C accuracy (%) at epoch 30, mean ± sample std, each seed in " \
        "brackets; both codes in chunks of 5 epochs resumed from their checkpoints).\n"


def _authors_note(used: str, theirs: list[dict], other: list[dict], row: str,
                  runs: list[Path]) -> str:
    """Which of the authors' records the row's comparison uses, and where the others stand."""
    text = f"The authors' side above: {AUTHORS_RUNS[used][1]}."
    if used == "replay":
        going = [p for p in runs if p.parent.name.startswith(f"authors_{row}_")
                 and "_exact_seed" in p.parent.name and json.loads(p.read_text()).get("done", 0) < 30]
        done = ",".join(str(r["seed"]) for r in other) or "none"
        text += (f" The same seeds as one run: finished {done}"
                 + (f"; running {len(going)} (listed below)" if going else "")
                 + "; the comparison moves to them once they cover these seeds.")
    return text


TABLES = {"mnist_reference": mnist_reference, "mnist_fullsize": mnist_fullsize}
