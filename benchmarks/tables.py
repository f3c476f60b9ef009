"""The measured tables of the docs, generated from the JSON the benchmarks wrote.

    python benchmarks/tables.py           # rewrite every generated table in place
    python benchmarks/tables.py --check   # exit 1, naming each table, when a doc differs

A doc holds a generated table between two markers, `<!-- generated:NAME -->` and
`<!-- /generated:NAME -->`; NAME is a function of `TABLES` below, which reads its files under
`benchmarks/results/` and returns the Markdown (the table and a line naming its source: file,
commit, whether the tree was modified, machine, date). Nothing in a generated table is typed by
hand: `tests/test_tables.py` fails when a doc's table differs from what this script makes of the
files on disk. A table whose source files are missing says so instead of a number.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # ablate and analysis, imported by some tables
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = re.compile(r"(<!-- generated:(?P<name>[a-z0-9_]+) -->\n)(?P<body>.*?)(<!-- /generated:(?P=name) -->)",
                  re.S)


def _load(rel: str) -> dict | None:
    p = RESULTS / rel
    return json.loads(p.read_text()) if p.exists() else None


def _lines(rel: str) -> list[dict]:
    p = RESULTS / rel
    return [json.loads(s) for s in p.read_text().splitlines() if s.strip()] if p.exists() else []


def _tree(sha: str | None, dirty) -> str:
    if not sha:
        return "commit not recorded"
    if dirty is None:
        return f"commit {sha}, tree state not recorded (the run predates the flag)"
    return f"commit {sha}, {'modified' if dirty else 'clean'} tree"


def _source(rel: str, machine: dict | None = None, sha: str | None = None, dirty=None,
            extra: str = "") -> str:
    m = machine or {}
    sha = sha or m.get("git_sha")
    dirty = dirty if dirty is not None else m.get("git_dirty")
    where = ", ".join(str(x) for x in (m.get("gpu"), m.get("driver") and f"driver {m['driver']}",
                                       m.get("cpus") and f"{m['cpus']} CPUs",
                                       m.get("torch") and f"torch {m['torch']}") if x)
    date = (m.get("date") or "")[:10]
    parts = [f"`benchmarks/results/{rel}`", _tree(sha, dirty)] + [x for x in (where, date, extra) if x]
    return "Source: " + "; ".join(parts) + "."


def _commits(recs: list[dict]) -> str:
    """The commits a set of JSON records were made at, * marking a modified tree: each record's
    own and, where its chunks name theirs (runs resumed over several sessions), every chunk's."""
    shas = sorted({x["git_sha"][:7] + ("*" if x.get("git_dirty") else "")
                   for r in recs for x in (r, *(c for c in r.get("chunks") or []
                                                if isinstance(c, dict)))
                   if x.get("git_sha")})
    return f"commits {', '.join(shas)}, * = modified tree" if shas else "commit not recorded"


def _missing(rel: str) -> str:
    return f"Not measured: `benchmarks/results/{rel}` is not in this checkout.\n"


def gpu_steps() -> str:
    rel = "h100-2026-11-26-rerun/gpu_check.json"
    d = _load(rel)
    if d is None:
        return _missing(rel)
    rows = d["sections"]["steps"]["rows"]
    out = ["| dataset | members | eager ms/step | replayed ms/step | speed-up | kernels / launches per "
           "step, replayed | s per seed-epoch, with validation | validation share | peak GPU MB |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['dataset'].upper()} | {r['S']} | {r['eager_ms']:.1f} | {r['replay_ms']:.2f} | "
                   f"{r['speedup']:.1f}x | {r['kernels_replay']:.0f} / {r['launches_replay']:.0f} | "
                   f"{r['s_per_seed_epoch_with_val']:.4g} | {100 * r['val_share']:.1f}% | "
                   f"{r['peak_mb']:.0f} |")
    s = d["sections"]["steps"]
    return "\n".join(out) + "\n\n" + _source(
        rel, d["machine"], extra=f"medians of {s['repeats']} timings of {s['steps_per_timing']} steps "
                                 "after warm-up and capture; `python benchmarks/gpu_check.py OUT`") + "\n"


def gpu_recipes() -> str:
    rel = "h100-2026-11-26-rerun/gpu_check.json"
    d = _load(rel)
    if d is None:
        return _missing(rel)
    s = d["sections"]
    c, t, i = s["colors_recipe"], s["triangles_recipe"], s["init"]
    out = ["| run | wall | per seed | results (mean over the seeds) |", "|---|---:|---:|---|",
           f"| COLORS ChebyGIN sup, {c['seeds']} seeds, {c['epochs']} epochs, one pack | "
           f"{c['wall_s']:.1f} s | "
           f"{c['s_per_seed']:.2f} s | ORIG {c['acc_test_orig']:.1f}, LARGE {c['acc_test_large']:.1f}, "
           f"LARGE-C {c['acc_test_largec']:.1f}, pooled AUC {c['pooled_auc_l0']:.1f} |",
           f"| TRIANGLES ChebyGIN sup, {t['seeds']} seeds, {t['epochs']} epochs, one pack | "
           f"{t['wall_s']:.0f} s | "
           f"{t['s_per_seed']:.1f} s | ORIG {t['acc_test_orig']:.1f}, LARGE {t['acc_test_large']:.1f}, "
           f"pooled AUC {t['pooled_auc_l0']:.1f} |",
           f"| `init`: {i['inits']} inits of p, COLORS GIN unsup, packs of "
           f"{' + '.join(str(p) for p in i['pack_seeds'])} | {i['wall_s']:.0f} s | "
           f"{i['wall_s'] / i['inits']:.2f} s | test accuracy {i['test_acc_mean']:.1f}, AUC "
           f"{i['test_auc_mean']:.1f}, r(accuracy, AUC) = {i['r_acc_auc']:.2f} |"]
    tests = s["tests"]
    return "\n".join(out) + "\n\n" + _source(
        rel, d["machine"], extra=f"CUDA tests in the same run: {tests['passed']} passed, "
                                 f"{tests['failed']} failed") + "\n"


def scale() -> str:
    rows = []
    for rel, label in (("cpu-2026-11-26-scale/real.json", ""),
                       ("cpu-2026-11-26-scale/instant.json", " `--instant`")):
        d = _load(rel)
        if d is None:
            return _missing(rel)
        for r in d["rows"]:
            rows.append(f"| {r['trials']:,}{label} | {r['first_started_s']:.1f} s | "
                        f"{r['first_stored_s']:.1f} s | {r['wall_s']:.1f} s | "
                        f"{r['overhead_ms']:.1f} ms ({r['steady_overhead_ms']:.1f} ms) | "
                        f"{r['peak_rss_mb']:.0f} MB | {r['store_mb']:.1f} MB, {r['store_files']:,} files |")
    head = ["| trials | first trial started | first trial stored | wall | overhead per trial "
            "(steady state) | driver peak RSS | store |", "|---:|---:|---:|---:|---:|---:|---:|"]
    return "\n".join(head + rows) + "\n\nSource: `benchmarks/results/cpu-2026-11-26-scale/real.json`, " \
        "`instant.json` (`python benchmarks/bench_scale.py [--instant] --json OUT`; 2 cores, " \
        "2026-11-26; commit not recorded: the files predate the field).\n"


def tu_fidelity() -> str:
    """The table `tu_fidelity.py --summary --markdown` prints (its own function, imported)."""
    import contextlib
    import io

    rel = TU_RECORDS
    tu = _tu_module()
    recs, timing = tu.comparable(_lines(rel))
    if not recs:
        return _missing(rel)
    groups: dict[tuple[str, str], list[float]] = {}
    for r in sorted(recs, key=lambda r: r["seed"]):
        groups.setdefault((r["row"], r["side"]), []).append(r["test_acc"])
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        tu.markdown(groups)
    return buf.getvalue() + f"\nSource: `benchmarks/results/{rel}` (`python benchmarks/tu_fidelity.py`; " \
        f"{_commits(recs)}; {recs[0].get('machine', '')}, one torch thread per run; LR drops " \
        f"timed {_timing_words(timing, tu)} on both sides of a row).\n"


TU_RECORDS = "cpu-2026-11-27-tu-fidelity/tu_fidelity.jsonl"


@functools.cache
def _tu_module():
    """benchmarks/tu_fidelity.py (its table and its rule for which records compare), loaded
    once."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tu_fidelity", ROOT / "benchmarks" / "tu_fidelity.py")
    tu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tu)
    return tu


def _timing_words(timing: dict[str, str], tu) -> str:
    """Each LR timing with the rows that ran it, e.g. "`published` (PROTEINS, ...)"."""
    by: dict[str, list[str]] = {}
    for row in tu.NAMES:
        if row in timing:
            by.setdefault(timing[row], []).append(tu.NAMES[row])
    if len(by) == 1:
        return f"`{next(iter(by))}`"
    return "; ".join(f"`{t}` ({', '.join(rows)})" for t, rows in by.items())


def mnist_reference() -> str:
    """MNIST-75SP: the authors' training code and ours on the same graphs, at the last epoch."""
    rel = "cpu-2026-11-27-mnist-train-reference/mnist_train_reference.jsonl"
    recs = _lines(rel)
    if not recs:
        return _missing(rel)
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
        f"(`python benchmarks/mnist_train_reference.py`; {_commits(recs)}; " \
        f"{recs[0].get('machine', '')}; mean ± sample std over the seeds, each seed in brackets).\n"


# The published TU figures the generated comparison stands beside (quotes, not measurements):
# row -> (label, the paper's weakly supervised figure, the authors' notebook of June 2019)
TU_PUBLISHED = {
    "proteins_global": ("PROTEINS, global pool", "-", "72.69 ± 1.53"),
    "proteins_weak": ("PROTEINS, weak", "77.09", "76.14 ± 0.93"),
    "dd200_global": ("D&D-200, global pool", "-", "31.45 ± 3.98"),
    "dd200_weak": ("D&D-200, weak", "78.36 (split not stated)", "41.17 ± 17.07"),
    "dd300_global": ("D&D-300, global pool", "-", "73.60 ± 2.06"),
    "dd300_weak": ("D&D-300, weak", "78.36 (split not stated)", "78.10 ± 0.52 (hidden 32)"),
}


def tu_published() -> str:
    """The TU side-by-side's means beside the paper's and the authors' notebook's figures."""
    rel = TU_RECORDS
    recs, _ = _tu_module().comparable(_lines(rel))
    if not recs:
        return _missing(rel)

    def cell(row: str, side: str) -> str:
        v = [r["test_acc"] for r in recs if r["row"] == row and r["side"] == side]
        if not v:
            return "not run"
        sd = statistics.pstdev(v)  # ddof 0, as the side-by-side table above
        return f"{statistics.mean(v):.2f} ± {sd:.2f}" if len(v) > 1 else f"{v[0]:.2f} (1 seed)"

    out = ["| row | paper (weakly sup.) | authors' notebook (June 2019, before tuning) | ours, above "
           "| the authors' code, above |", "|---|---|---|---|---|"]
    for row, (label, paper, notebook) in TU_PUBLISHED.items():
        out.append(f"| {label} | {paper} | {notebook} | {cell(row, 'ours')} | {cell(row, 'authors')} |")
    return "\n".join(out) + f"\n\nSource: the two right columns from `benchmarks/results/{rel}` " \
        f"(as the table above); the paper's and the notebook's figures as published.\n"


# benchmarks/adaptive_study.py's runs, shown in order: (record, the study as it was named)
ADAPTIVE_STUDIES = (("cpu-2026-12-03-adaptive/supervision.json", "supervision"),
                    ("cpu-2026-11-27-adaptive/supervision.json", "supervision"),
                    ("cpu-2026-11-27-adaptive/smoke.json", "smoke"),
                    ("cpu-2026-12-02-adaptive-tu/tu_proteins.json",
                     "benchmarks/studies/tu_proteins.yaml"))


def adaptive_study() -> str:
    """Real studies run adaptively beside the same study at a fixed 10 seeds
    (`benchmarks/adaptive_study.py`): each comparison's verdict both ways, the seeds and time."""
    parts = []
    for rel, study in ADAPTIVE_STUDIES:
        doc = _load(rel)
        if doc:
            parts.append(_adaptive_run(doc, rel, study))
    return "\n".join(parts) if parts else _missing(ADAPTIVE_STUDIES[0][0])


def _adaptive_cost(doc: dict) -> str:
    """The time each way: worker seconds per round from the store where the record has them
    (whole across a run stopped and resumed), else the walls between the log's round lines."""
    ad, costs = doc["adaptive"], doc.get("round_costs")
    if costs:
        first = next((c for c in costs if c["round"] == 1), None)
        total = sum(c["trial_s"] for c in costs)
        if not first:
            return ""
        return (f"; trial time in the workers: the fixed 10 seeds (round 1) {first['trial_s'] / 3600:.1f} h, "
                f"the adaptive run {total / 3600:.1f} h to round {ad['round']} (rounds 2-{ad['round']} "
                f"add {(total - first['trial_s']) / 3600:.1f} h)" if ad["round"] > 1 else
                f"; trial time in the workers: round 1 {first['trial_s'] / 3600:.1f} h")
    rounds = doc.get("round_started_s", [])
    fixed_wall = rounds[1]["t_s"] - rounds[0]["t_s"] if len(rounds) > 1 else None
    return (f"; wall: the fixed 10 seeds (round 1) {fixed_wall / 60:.0f} min, the adaptive run "
            f"{doc['wall_s'] / 60:.0f} min to round {ad['round']}" if fixed_wall else "")


def _adaptive_run(doc: dict, rel: str, study: str) -> str:
    ad = doc["adaptive"]
    fixed = {(f["row"], f["baseline"], f["split"]): f for f in doc["fixed_10"]}
    seq = ad["options"].get("sequence", "asymptotic")
    out = [f"**study={study}**, the `{seq}` sequence, max {doc['max']} seeds", "",
           "| comparison | split | fixed 10 seeds: Δ (points), Holm p, verdict | adaptive: "
           "decision, round, seeds | which decides |", "|---|---|---|---|---|"]
    kinds: dict[str, int] = {}
    for c in ad["comparisons"]:
        f = fixed.get((c["row"], c["baseline"], c["split"]))
        fv = f"{100 * f['delta']:+.1f}, {f['p_holm']:.3f}, {f['verdict']}" if f else "-"
        a, fd = c["decision"], f["verdict"] if f else "-"
        if a in ("greater", "less"):
            kind = "both, same sign" if fd == a else "adaptive only"
        elif fd in ("greater", "less"):
            kind = "fixed only"
        else:
            kind = "adaptive: equivalent" if a == "equivalent" else "neither"
        kinds[kind] = kinds.get(kind, 0) + 1
        out.append(f"| {c['row']} vs {c['baseline']} | {c['split']} | {fv} | {a}, "
                   f"{c['round'] or '-'}, {c['seeds']} | {kind} |")
    rows = {c["row"] for c in ad["comparisons"]} | {c["baseline"] for c in ad["comparisons"]}
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(kinds.items()))
    state = "" if ad.get("finished", True) else " (not finished: a rerun continues it)"
    return "\n".join(out) + (
        f"\n\nOf {len(ad['comparisons'])} comparisons ({counts}); after round {ad['round']}{state}; "
        f"seed runs: fixed {10 * len(rows)}, adaptive {ad['seed_runs']} of at most "
        f"{ad['seed_runs_max']}{_adaptive_cost(doc)}. 'Equivalent' is a finding the fixed test "
        f"cannot make (no difference of ±{100 * ad['options']['equivalence']:g} points or "
        f"more).{_adaptive_sequence(ad)}\n\n"
        f"Source: `benchmarks/results/{rel}` and its log (`python benchmarks/adaptive_study.py "
        f"{study} --max {doc['max']}"
        f"{''.join(f' --override {o}' for o in doc.get('overrides', []))}`; {_adaptive_commits(doc)}; "
        f"{doc['machine']['cores']} cores, {doc['machine']['note']}).\n")


def _adaptive_sequence(ad: dict) -> str:
    """Which sequence decided the record, and where it is not today's default what of it the
    default would not decide: an 'equivalent' from an interval of [0, 0] (every paired
    difference 0), which the betting sequence never says (the simulation's zero-spread line)."""
    from ablate.runner.plan.adaptive_options import AdaptiveSeeds

    opts, default = ad["options"], AdaptiveSeeds().sequence
    seq = opts.get("sequence", "asymptotic")
    text = (f" Decided by the `{seq}` sequence (alpha {opts['alpha']:g}, the record's "
            "`adaptive.options`)")
    if seq == default:
        return text + ", today's default."
    zero = sum(c["decision"] == "equivalent" and c["lo"] and c["lo"][-1] == 0 == c["hi"][-1]
               for c in ad["comparisons"])
    text += f", not today's default (`{default}`, issue 54)"
    if zero:
        text += (f"; {zero} 'equivalent' came from an interval of [0, 0] (every paired difference "
                 "0), which the default never calls equivalent: such a comparison stays open")
    return text + "."


def _adaptive_commits(doc: dict) -> str:
    """The commit(s) the trials ran at where recorded, else the record's own."""
    own = f"commit {doc['git_sha']}, {'modified' if doc['git_dirty'] else 'clean'} tree"
    ran = doc.get("trials_git_sha")
    if not ran:
        return own
    return (f"trials run at commit {', '.join(ran)} (* = modified tree), the record written at "
            + own)


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
        for r in _lines(f"{rel_dir}/records.jsonl"):
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
    runs = sorted(p for d in FULLSIZE for p in (RESULTS / d / "runs").glob("*/progress.json"))
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
        return _missing(f"{FULLSIZE[0]}/records.jsonl")
    files = " and ".join(f"`benchmarks/results/{d}/records.jsonl`" for d in FULLSIZE
                         if (RESULTS / d / "records.jsonl").exists())
    old = any(not r.get("chunks") or not all("git_sha" in c for c in r["chunks"]) for r in shown)
    return "\n".join(out) + f"\nSource: {files}, `runs/` beside each " \
        f"(`python benchmarks/mnist_train_reference.py --side SIDE --row ROW --seeds S " \
        f"[--resume-mode exact|replay]`; one record per side, row, seed and resume mode, the " \
        f"newest; {_commits(shown) if shown else 'no finished record yet'}" \
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


def _memory_lines(rel: str) -> tuple[dict[str, dict], str | None, bool | None]:
    """bench_memory's '# NAME: {json}' lines of one log, and the commit / modified flag its
    first lines record (absent in logs written before it did)."""
    p = RESULTS / rel
    if not p.exists():
        return {}, None, None
    text = p.read_text().splitlines()
    # logs before bench_memory recorded its own provenance: a shell wrapper's first two lines
    sha = text[0] if text and re.fullmatch(r"[0-9a-f]{40}", text[0]) else None
    dirty = (text[1].strip() != "0") if sha and len(text) > 1 else None
    out = {}
    for line in text:
        m = re.match(r"# ([a-z0-9_]+): (\{.*\})$", line)
        if m:
            out[m.group(1)] = json.loads(m.group(2))
    prov = out.pop("provenance", None)
    if prov:
        sha, dirty = prov["git_sha"], prov["git_dirty"]
    return out, sha, dirty


MEMORY_LOGS = ["cpu-2026-11-26-memory/bench_memory.log", "cpu-2026-11-27-memory/bench_memory.log",
               "cpu-2026-11-27-memory-final/bench_memory.log",
               "cpu-2026-11-27-memory-real/bench_memory.log",
               "cpu-2026-11-27-memory-real/bench_memory_after.log",
               "cpu-2026-11-28-memory-mnist/bench_memory.log",
               "cpu-2026-11-28-memory-full/bench_memory.log",
               "cpu-2026-12-02-memory-collab/bench_memory.log",
               "cpu-2026-12-02-memory-after-folds/bench_memory.log",
               "cpu-2026-12-02-memory-recheck/bench_memory_dd.log",
               "cpu-2026-12-02-memory-recheck/bench_memory_collab.log",
               "cpu-2026-12-02-memory-recheck/bench_memory_mnist_sp.log"]


# end-to-end runs also come from logs whose preparation lines were cache hits (not first use)
E2E_LOGS = [*MEMORY_LOGS[:-3], "cpu-2026-11-28-memory-runner/bench_memory_dd.log", *MEMORY_LOGS[-3:]]


MEMORY_NAMES = {"colors": "COLORS", "triangles": "TRIANGLES",
                "mnist_sp": "MNIST-75SP (generated digits)", "dd": "D&D-shaped",
                "collab": "COLLAB-shaped", "mnist_sp_real": "MNIST-75SP (real)",
                "proteins_real": "PROTEINS (real)", "dd_real": "D&D (real)",
                "collab_real": "COLLAB (real)"}


def _memory_label(name: str) -> str:
    """A row's label: its data set, and whether the raw files were the real ones."""
    if name in MEMORY_NAMES:
        return MEMORY_NAMES[name]
    base = name.removesuffix("_real")
    return f"{base.upper()} ({'real' if name.endswith('_real') else 'generated'})"


def memory() -> str:
    rows: dict[str, tuple[dict, str]] = {}
    trees: dict[str, str] = {}
    for rel in MEMORY_LOGS:  # a later log replaces an earlier one's rows
        got, sha, dirty = _memory_lines(rel)
        trees[rel] = _tree(sha[:7] if sha else None, dirty)
        for n, rec in got.items():
            if n in DATA_SETS:
                rows[f"{n}_real" if rec.get("source") == "real" else n] = (rec, rel)
    out = ["| data set | graphs (train / largest test) | prepared | prepare | driver peak | evaluate the "
           "largest test split | worker peak | declared to Ray |", "|---|---|---:|---:|---:|---|---:|---:|"]
    for name in [*MEMORY_NAMES, *sorted(set(rows) - set(MEMORY_NAMES))]:
        label = _memory_label(name)
        if name not in rows:
            out.append(f"| {label} | not measured since the logs were kept | | | | | | |")
            continue
        r, _ = rows[name]
        loo = "with leave-one-out" if r["loo"] else "no leave-one-out"
        out.append(f"| {label} | {r['graphs']['train']} / {r['eval_graphs']} | {r['file_mb']:.1f} MB | "
                   f"{r['prepare_s']:.1f} s | {r['prepare_peak_mb']:.0f} MB | {r['split']}: "
                   f"{r['eval_s']:.1f} s ({loo}) | {r['eval_peak_mb']:.0f} MB | {r['declared_mb']:.0f} MB |")
    shown: dict[str, list[str]] = {}  # the logs whose rows the table shows, in log order
    for name, (_, rel) in rows.items():
        shown.setdefault(rel, []).append(_memory_label(name))
    sources = [f"`benchmarks/results/{rel}` ({', '.join(shown[rel])}; {trees[rel]})"
               for rel in MEMORY_LOGS if rel in shown]
    return "\n".join(out) + "\n\nSource: " + "; ".join(sources) + \
        " (`python benchmarks/bench_memory.py`; 2 cores, other work running at times; one run; " \
        "the real files: `--real-files shared/fixtures/tu`, `--real-files shared/fixtures/mnist`).\n"


DATA_SETS = ("colors", "triangles", "mnist_sp", "proteins", "dd", "collab")


def memory_e2e() -> str:
    """bench_memory's end-to-end runs (`# e2e_NAME: {json}`): every process's peak, the latest
    run of each data set (the logs are in date order)."""
    latest: dict[str, tuple] = {}
    for rel in E2E_LOGS:
        got, sha, dirty = _memory_lines(rel)
        latest.update({rec["data"]: (rec, rel, sha, dirty) for n, rec in got.items()
                       if n.startswith("e2e_")})
    if not latest:
        return "No end-to-end run kept.\n"
    out = []
    for rec, rel, sha, dirty in latest.values():
        data = {"dd": "D&D", "mnist_sp": "MNIST-75SP", "collab": "COLLAB"}.get(rec["data"], rec["data"])
        trials = "; ".join(
            f"{'global pool' if not t['pool_layers'] else t['supervision']}: train "
            f"{t['train_s']:.0f} s, evaluate {t['eval_s']:.0f} s, own peak {t['peak_rss_mb']:.0f} MB"
            for t in rec["trials"])
        out += [f"**{data} ({rec['source']} files)**, two rows through the runner, one epoch each, two "
                f"trials at once: {rec['line']} ({rec['wall_s']:.0f} s wall). Trials: {trials}. "
                f"Declared to Ray per trial: {', '.join(f'{m:.0f} MB' for m in rec['declared_mb'])}.",
                "", "| process | peak RSS | peak PSS |", "|---|---:|---:|"]
        out += [f"| {p['role']} | {p['peak_rss_mb']} MB | {p['peak_pss_mb']} MB |"
                for p in rec["processes"] if p["peak_rss_mb"] >= 100]
        out += [f"| all processes together (peak of the summed PSS) | | {rec['all_pss_peak_mb']} MB |",
                "", f"Source: `benchmarks/results/{rel}` ({_tree(sha[:7] if sha else None, dirty)}; "
                "processes under 100 MB left out).", ""]
    return "\n".join(out)


def _estimate_walls(rel: str = "cpu-2026-11-26-estimate/estimate.log") -> dict[str, float]:
    """study -> measured wall (s) from `bench_estimate.py`'s table (its only output then)."""
    p = RESULTS / rel
    out = {}
    if p.exists():
        for line in p.read_text().splitlines():
            m = re.match(r"(\w+)\s+[\d.]+ s\s+([\d.]+) s\s+[\d.]+", line)
            if m:
                out[m.group(1)] = float(m.group(2))
    return out


def _tu_seconds() -> dict[str, float]:
    """TU row -> median seconds per seed on one core, ours (`tu_fidelity.jsonl`); runs that
    shared the machine (a `machine_note`, or a load above its cores) are not a one-core cost."""
    per: dict[str, list[float]] = {}
    for r in _lines(TU_RECORDS):
        cores = int((re.search(r"(\d+) cores", r.get("machine", "")) or [0, 0])[1]) or None
        shared = r.get("machine_note") or (cores and r.get("load_1min", 0) > cores)
        if r.get("side") == "ours" and r.get("seconds") and not shared:
            per.setdefault(r["row"], []).append(float(r["seconds"]))
    return {k: statistics.median(v) for k, v in per.items()}


def _minutes(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def studies() -> str:
    """The README's studies table: size from the study files, walls from benchmark output."""
    from ablate.runner.study.compose import list_studies, load_spec, seed_list, study_file
    from ablate.runner.study.expand import plan_size

    walls = _estimate_walls()
    runs = {}  # study -> the latest complete run of `study_wall.py` (its JSON lines)
    for f in sorted(RESULTS.glob("*/study_walls.jsonl")):
        for r in _lines(str(f.relative_to(RESULTS))):
            if r.get("exit") == 0:
                runs[r["study"]] = r
    gpu = _load("h100-2026-11-26-rerun/gpu_check.json")
    tu = _tu_seconds()
    out = ["| study | what | trials / seeds | 2 CPU cores, measured | one H100, measured |",
           "|---|---|---:|---|---|"]
    for name, desc in list_studies().items():
        raw = study_file(name)
        if raw.get("search") or raw.get("arms"):
            arms = raw.get("arms") or {}
            size = f"{len(arms)} arms x {raw.get('n_trials', '?')} Optuna trials"
        else:
            grid = raw.get("grid") or {}
            combos = 1
            for v in grid.values():
                combos *= len(v) if isinstance(v, list) else 1
            base = seed_list(raw.get("seeds", [0]))
            variants = raw.get("variants") or [{}]
            seeds = combos * sum(len(seed_list(v["seeds"])) if "seeds" in v else len(base)
                                 for v in variants)
            size = f"{plan_size(load_spec(name))[0]} / {seeds}"
        cpu = (f"{_minutes(walls[name])} (`bench_estimate.py`, 2026-11-26)" if name in walls
               else "not measured")
        if name in runs:
            r = runs[name]
            cpu = (f"{_minutes(r['wall_s'])} through the runner (`study_wall.py`, "
                   f"{r['machine']['date'][:10]}, load {r['load_before'][0]:.1f} before)")
        if name == "tu" and tu:
            cpu = "per seed on one core: " + ", ".join(
                f"{row} {_minutes(sec)}" for row, sec in sorted(tu.items()) if not row.endswith("_gcn"))
        g = "not measured"
        if gpu and name == "init":
            i = gpu["sections"]["init"]
            g = f"{i['wall_s']:.0f} s for the {i['inits']} inits through the trial path (no runner)"
        if gpu and name == "paper":
            c, t = gpu["sections"]["colors_recipe"], gpu["sections"]["triangles_recipe"]
            g = (f"COLORS ChebyGIN sup {c['wall_s']:.1f} s, TRIANGLES ChebyGIN sup {t['wall_s']:.0f} s "
                 "(10 seeds each, trial path); other rows not measured")
        out.append(f"| `{name}` | {desc.replace('|', '/')} | {size} | {cpu} | {g} |")
    return "\n".join(out) + "\n\nSources: `benchmarks/results/*/study_walls.jsonl`, " \
        "`cpu-2026-11-26-estimate/estimate.log`, " \
        "`cpu-2026-11-27-tu-fidelity/tu_fidelity.jsonl`, `h100-2026-11-26-rerun/gpu_check.json` " \
        "([docs/performance.md](docs/performance.md)); trials / seeds from the study files.\n"


def suite_time() -> str:
    """The newest timing of each test suite (`benchmarks/suite_time.py`), as README's sentence."""
    found = sorted(RESULTS.glob("*-suite/suite_time.jsonl"))
    latest: dict[str, tuple[dict, str]] = {}
    for path in found:  # folders in date order: a later record replaces an earlier one
        for rec in map(json.loads, path.read_text().splitlines()):
            latest[rec["suite"]] = (rec, str(path.relative_to(RESULTS)))
    if not latest:
        return _missing("*-suite/suite_time.jsonl")
    parts = []
    for suite, (r, rel) in latest.items():
        c = r["counts"]
        m = r["machine"]
        parts.append(f"the {suite} suite took {int(r['wall_s'] // 60)} min {r['wall_s'] % 60:.0f} s "
                     f"({c.get('passed', 0)} passed, {c.get('failed', 0)} failed, "
                     f"{c.get('skipped', 0)} skipped; exit {r['exit']}) at "
                     f"{_tree(r['git_sha'][:7], r['git_dirty'])} on {m['cores']} cores of an "
                     f"{m['cpu']} ({m['vector']}), load {r['load_before'][0]:.1f} before "
                     f"(`benchmarks/results/{rel}`)")
    return "Measured: " + "; ".join(parts) + ".\n"


TABLES: dict[str, Callable[[], str]] = {
    "studies": studies,
    "memory": memory,
    "memory_e2e": memory_e2e,
    "gpu_steps": gpu_steps, "gpu_recipes": gpu_recipes, "scale": scale,
    "tu_fidelity": tu_fidelity, "mnist_reference": mnist_reference,
    "mnist_fullsize": mnist_fullsize, "tu_published": tu_published,
    "adaptive_study": adaptive_study, "suite_time": suite_time,
}
sys.path.insert(0, str(ROOT / "benchmarks"))  # tables_adaptive: the adaptive-seed tables (issue 54)
TABLES.update(__import__("tables_adaptive").TABLES)
TABLES.update(__import__("tables_open").TABLES)  # tables_open: the open data sets (issue 52)


def render(text: str) -> str:
    def sub(m: re.Match) -> str:
        name = m.group("name")
        if name not in TABLES:
            raise SystemExit(f"error: unknown generated table {name!r} (known: {', '.join(TABLES)})")
        return m.group(1) + TABLES[name]() + m.group(4)

    return MARK.sub(sub, text)


def _rel(doc: Path) -> str:
    return str(doc.relative_to(ROOT)) if doc.is_relative_to(ROOT) else str(doc)


def stale(docs: list[Path] = DOCS) -> list[str]:
    """'doc: table' for every generated table whose text differs from what the JSON gives."""
    out = []
    for doc in docs:
        text = doc.read_text()
        new = render(text)
        if new != text:
            old = {m.group("name"): m.group("body") for m in MARK.finditer(text)}
            for m in MARK.finditer(new):
                if old.get(m.group("name")) != m.group("body"):
                    out.append(f"{_rel(doc)}: {m.group('name')}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 when a table differs")
    args = ap.parse_args()
    if args.check:
        bad = stale()
        for b in bad:
            print(f"stale generated table: {b} (run python benchmarks/tables.py)")
        sys.exit(1 if bad else 0)
    for doc in DOCS:
        text = doc.read_text()
        new = render(text)
        if new != text:
            doc.write_text(new)
            print(f"updated {_rel(doc)}")


if __name__ == "__main__":
    main()
