"""Generated tables of the open data sets (issue 52): COLLAB beside the authors' code, reading a
TU set against PyG, and the study beyond the paper's data sets.

Called from `benchmarks/tables.py` (its `TABLES` registry); each function reads its records
under `benchmarks/results/` and returns the Markdown of one `<!-- generated:NAME -->` section.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
COLLAB_RECORDS = "cpu-2026-12-02-collab-fidelity/tu_fidelity.jsonl"
COLLAB_BISECT = "cpu-2026-12-02-collab-fidelity/bisect_no_self_loops/tu_fidelity.jsonl"
TU_READ = "cpu-2026-12-02-tu-read/tu_read.json"
BEYOND = "cpu-2026-12-02-tu-beyond/summary.json"


@functools.cache
def _tu():
    spec = importlib.util.spec_from_file_location("tu_fidelity", Path(__file__).with_name("tu_fidelity.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _missing(rel: str, command: str) -> str:
    return f"*(no record yet: `benchmarks/results/{rel}`; `{command}` makes it)*\n"


def _commits(recs: list[dict]) -> str:
    shas = sorted({(r.get("git_sha") or "")[:7] + ("*" if r.get("git_dirty") else "") for r in recs})
    return "commits " + ", ".join(s for s in shas if s) + (" (* = modified tree)" if any(
        s.endswith("*") for s in shas) else "")


def tu_collab() -> str:
    """COLLAB's global-pool and weak rows, ours beside the authors' code on the same splits."""
    path = RESULTS / COLLAB_RECORDS
    if not path.is_file():
        return _missing(COLLAB_RECORDS, "python benchmarks/tu_fidelity.py --rows collab_global,collab_weak")
    tu = _tu()
    recs, _ = tu.comparable([json.loads(x) for x in path.read_text().splitlines() if x.strip()])
    groups: dict[tuple[str, str], list[float]] = {}
    for r in sorted(recs, key=lambda r: r["seed"]):
        groups.setdefault((r["row"], r["side"]), []).append(r["test_acc"])
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        tu.difference_markdown(groups, ["collab_global", "collab_weak"])
    seeds = {side: sorted({r["seed"] for r in recs if r["side"] == side}) for side in ("ours", "authors")}
    theirs = sorted({r.get("authors_commit", "")[:7] for r in recs if r["side"] == "authors"} - {""})
    return buf.getvalue() + (
        f"\nTest accuracy (%) on the 4,500 graphs not trained on (500 of the 681 graphs with N <= 35 "
        f"train, the authors' draw, `same_split` checked against their `DataReader`); std with "
        f"ddof 1. Seeds: ours {seeds['ours']}, theirs {seeds['authors']}. Source: "
        f"`benchmarks/results/{COLLAB_RECORDS}` (`python benchmarks/tu_fidelity.py --rows "
        f"collab_global,collab_weak`; {_commits(recs)}; their checkout {', '.join(theirs) or '-'}; "
        f"{recs[0].get('machine', '') if recs else ''}, one torch thread per run, other work on "
        "the cores).\n")


def tu_collab_bisect() -> str:
    """COLLAB's global-pool gap, bisected: the authors' code on COLLAB with its self-loop lines
    removed (the one input difference known between their reader and ours), seed by seed beside
    their code on the TU files and ours."""
    path = RESULTS / COLLAB_BISECT
    if not path.is_file():
        return _missing(COLLAB_BISECT, "python benchmarks/tu_fidelity.py --side authors --rows "
                        "collab_global --scratch DIR (COLLAB_A.txt without its self-loop lines)")
    cut = {r["seed"]: r["test_acc"] for r in map(json.loads, path.read_text().splitlines())
           if r["row"] == "collab_global"}
    main, _ = _tu().comparable([json.loads(x) for x in (RESULTS / COLLAB_RECORDS).read_text()
                               .splitlines() if x.strip()])
    side = {(r["side"], r["seed"]): r["test_acc"] for r in main if r["row"] == "collab_global"}
    out = ["| seed | theirs, TU files (self-loops kept) | theirs, self-loop lines removed | change "
           "| ours (self-loops dropped by the reader) |", "|---:|---:|---:|---:|---:|"]
    for seed in sorted(cut):
        a, b, o = side.get(("authors", seed)), cut[seed], side.get(("ours", seed))
        out.append(f"| {seed} | {a:.2f} | {b:.2f} | {b - a:+.2f} | {o:.2f} |" if a is not None and
                   o is not None else f"| {seed} | - | {b:.2f} | - | - |")
    if len(cut) > 1:
        import numpy as np

        d = [cut[k] - side[("authors", k)] for k in cut if ("authors", k) in side]
        out.append(f"| mean | | {np.mean(list(cut.values())):.2f} | {np.mean(d):+.2f} | |")
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    return "\n".join(out) + (
        f"\n\nSame seeds, splits and flags as the table above; only their input changed "
        f"(2,837 self-loops, 0.8% of COLLAB's nodes). Source: `benchmarks/results/{COLLAB_BISECT}` "
        f"({_commits(recs)}; their checkout 00a6771).\n")


def tu_read() -> str:
    """Reading a TU set: ours against PyG's `TUDataset` on the same files."""
    path = RESULTS / TU_READ
    if not path.is_file():
        return _missing(TU_READ, "python benchmarks/bench_tu_read.py")
    doc = json.loads(path.read_text())
    out = ["| set | ours: median s | PyG TUDataset: median s | PyG / ours (median of per-run "
           "ratios) | peak memory of a read, ours / PyG |", "|---|---:|---:|---:|---:|"]
    for r in doc["records"]:
        out.append(f"| {r['set']} | {r['ours_median_s']:.3f} | {r['theirs_median_s']:.3f} | "
                   f"{r['ratio_median']:.1f}x | {r['ours_peak_growth_mb']:.0f} / "
                   f"{r['theirs_peak_growth_mb']:.0f} MB |")
    sha = doc["git_sha"] + ("*" if doc.get("git_dirty") else "")
    return "\n".join(out) + (
        f"\n\n{doc['records'][0]['repeats']} runs a side, alternating which goes first; PyG "
        f"processes its raw files into a fresh root each run (a first use), ours reads them into "
        f"a `GraphSet`. Source: `benchmarks/results/{TU_READ}` (`{doc['command']}`; commit "
        f"{sha}; {doc['machine']}; load {doc['load_1min_end']} at the end; torch_geometric "
        f"{doc['torch_geometric']}).\n")


def tu_beyond() -> str:
    """The study beyond the paper's data sets: rows per data set and backbone, folds x seeds."""
    path = RESULTS / BEYOND
    if not path.is_file():
        return _missing(BEYOND, "python benchmarks/tu_beyond_summary.py STORE")
    doc = json.loads(path.read_text())
    out = ["| data set | backbone | global pool | unsup attention | weak attention | weak - global "
           "[95% CI] | unsup - global [95% CI] |", "|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        cells = [r["cells"].get(k) for k in ("global", "unsup", "weak")]
        fmt = [f"{c['mean']:.1f} ± {c['std']:.1f} ({c['n']})" if c else "not run" for c in cells]
        diffs = []
        for k in ("weak", "unsup"):
            d = r["diffs"].get(k)
            diffs.append(f"{d['mean']:+.1f} [{d['lo']:+.1f}, {d['hi']:+.1f}] ({d['folds']} folds)"
                         if d else "-")
        out.append(f"| {r['dataset']} | {r['backbone']} | {' | '.join(fmt)} | {' | '.join(diffs)} |")
    return "\n".join(out) + (
        f"\n\nTest accuracy (%) on the held-out fold, mean ± std over folds x seeds (n); the "
        f"differences pair the runs of one fold and seed, average them per fold (its seeds share "
        f"its test graphs) and give the corrected resampled t interval over the folds (Nadeau "
        f"& Bengio 2003: the folds' training sets overlap, so the variance of the mean of m "
        f"folds' differences is (1/m + 1/(k - 1)) s², not s²/m; m: the folds in brackets, k = "
        f"{_ks(doc)} the CV's). {doc['done']} of "
        f"{doc['planned']} trials finished. Source: "
        f"`benchmarks/results/{BEYOND}` (`{doc['command']}` on the store made by "
        f"{doc.get('ran', 'study=tu_beyond')}; {doc['commits']}; {doc['machine']}).\n")


TABLES = {"tu_collab": tu_collab, "tu_collab_bisect": tu_collab_bisect, "tu_read": tu_read,
          "tu_beyond": tu_beyond}


def _ks(doc: dict) -> str:
    """The k of the record's cross-validation ("10" for the records written before the
    summary stored k per row, whose store was 10-fold: `studies/tu_beyond.yaml`)."""
    return ", ".join(str(k) for k in sorted({r.get("k", 10) for r in doc["rows"]}))
