"""Generated tables of peak memory: `benchmarks/bench_memory.py`'s per-process peaks, at
full size and end to end. Called from `benchmarks/tables.py` (its `TABLES` registry).
"""

from __future__ import annotations

import json
import re

import tables_common as common


def _memory_lines(rel: str) -> tuple[dict[str, dict], str | None, bool | None]:
    """bench_memory's '# NAME: {json}' lines of one log, and the commit / modified flag its
    first lines record (absent in logs written before it did)."""
    p = common.RESULTS / rel
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
        trees[rel] = common.tree(sha[:7] if sha else None, dirty)
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
                "", f"Source: `benchmarks/results/{rel}` ({common.tree(sha[:7] if sha else None, dirty)}; "
                "processes under 100 MB left out).", ""]
    return "\n".join(out)


TABLES = {"memory": memory, "memory_e2e": memory_e2e}
