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
for _p in (ROOT, ROOT / "benchmarks"):  # ablate and analysis; the table modules beside this one
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))
import tables_adaptive  # noqa: E402  (after the path: benchmarks/ is not a package)
import tables_common as common  # noqa: E402
import tables_memory  # noqa: E402
import tables_mnist  # noqa: E402
import tables_open  # noqa: E402

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARK = re.compile(r"(<!-- generated:(?P<name>[a-z0-9_]+) -->\n)(?P<body>.*?)(<!-- /generated:(?P=name) -->)",
                  re.S)


def gpu_steps() -> str:
    rel = "h100-2026-11-26-rerun/gpu_check.json"
    d = common.load(rel)
    if d is None:
        return common.missing(rel)
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
    return "\n".join(out) + "\n\n" + common.source(
        rel, d["machine"], extra=f"medians of {s['repeats']} timings of {s['steps_per_timing']} steps "
                                 "after warm-up and capture; `python benchmarks/gpu_check.py OUT`") + "\n"


def gpu_recipes() -> str:
    rel = "h100-2026-11-26-rerun/gpu_check.json"
    d = common.load(rel)
    if d is None:
        return common.missing(rel)
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
    return "\n".join(out) + "\n\n" + common.source(
        rel, d["machine"], extra=f"CUDA tests in the same run: {tests['passed']} passed, "
                                 f"{tests['failed']} failed") + "\n"


def scale() -> str:
    rows = []
    for rel, label in (("cpu-2026-11-26-scale/real.json", ""),
                       ("cpu-2026-11-26-scale/instant.json", " `--instant`")):
        d = common.load(rel)
        if d is None:
            return common.missing(rel)
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
    recs, timing = tu.comparable(common.lines(rel))
    if not recs:
        return common.missing(rel)
    groups: dict[tuple[str, str], list[float]] = {}
    for r in sorted(recs, key=lambda r: r["seed"]):
        groups.setdefault((r["row"], r["side"]), []).append(r["test_acc"])
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        tu.markdown(groups)
    return buf.getvalue() + f"\nSource: `benchmarks/results/{rel}` (`python benchmarks/tu_fidelity.py`; " \
        f"{common.commits(recs)}; {recs[0].get('machine', '')}, one torch thread per run; LR drops " \
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
    recs, _ = _tu_module().comparable(common.lines(rel))
    if not recs:
        return common.missing(rel)

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
def _estimate_walls(rel: str = "cpu-2026-11-26-estimate/estimate.log") -> dict[str, float]:
    """study -> measured wall (s) from `bench_estimate.py`'s table (its only output then)."""
    p = common.RESULTS / rel
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
    for r in common.lines(TU_RECORDS):
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
    for f in sorted(common.RESULTS.glob("*/study_walls.jsonl")):
        for r in common.lines(str(f.relative_to(common.RESULTS))):
            if r.get("exit") == 0:
                runs[r["study"]] = r
    gpu = common.load("h100-2026-11-26-rerun/gpu_check.json")
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
    found = sorted(common.RESULTS.glob("*-suite/suite_time.jsonl"))
    latest: dict[str, tuple[dict, str]] = {}
    for path in found:  # folders in date order: a later record replaces an earlier one
        for rec in map(json.loads, path.read_text().splitlines()):
            latest[rec["suite"]] = (rec, str(path.relative_to(common.RESULTS)))
    if not latest:
        return common.missing("*-suite/suite_time.jsonl")
    parts = []
    for suite, (r, rel) in latest.items():
        c = r["counts"]
        m = r["machine"]
        parts.append(f"the {suite} suite took {int(r['wall_s'] // 60)} min {r['wall_s'] % 60:.0f} s "
                     f"({c.get('passed', 0)} passed, {c.get('failed', 0)} failed, "
                     f"{c.get('skipped', 0)} skipped; exit {r['exit']}) at "
                     f"{common.tree(r['git_sha'][:7], r['git_dirty'])} on {m['cores']} cores of an "
                     f"{m['cpu']} ({m['vector']}), load {r['load_before'][0]:.1f} before "
                     f"(`benchmarks/results/{rel}`)")
    return "Measured: " + "; ".join(parts) + ".\n"


TABLES: dict[str, Callable[[], str]] = {
    "studies": studies, "gpu_steps": gpu_steps, "gpu_recipes": gpu_recipes, "scale": scale,
    "tu_fidelity": tu_fidelity, "tu_published": tu_published, "suite_time": suite_time,
}
TABLES.update(tables_memory.TABLES)  # peak memory
TABLES.update(tables_mnist.TABLES)  # MNIST-75SP: the authors' code beside ours
TABLES.update(tables_adaptive.TABLES)  # adaptive seeds (issues 43, 54)
TABLES.update(tables_open.TABLES)  # the open data sets (issue 52)


def render(text: str) -> str:
    def sub(m: re.Match) -> str:
        name = m.group("name")
        if name not in TABLES:
            raise SystemExit(f"error: unknown generated table {name!r} (known: {', '.join(TABLES)})")
        return m.group(1) + TABLES[name]() + m.group(4)

    return MARK.sub(sub, text)


def _rel(doc: Path) -> str:
    return str(doc.relative_to(common.ROOT)) if doc.is_relative_to(common.ROOT) else str(doc)


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
