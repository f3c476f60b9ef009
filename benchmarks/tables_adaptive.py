"""Generated tables of adaptive seeds in simulation (`benchmarks/adaptive_sim.py`, issue 54).

Called from `benchmarks/tables.py` (its `TABLES` registry); reads the newest
`benchmarks/results/*-adaptive-sim/simulation.json` and returns the Markdown for the
`<!-- generated:adaptive_betting -->` section of docs/performance.md.
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
RULE_WORDS = {"betting": "betting sequence (default, exact)", "asymptotic": "asymptotic sequence"}


def _newest() -> tuple[str, dict] | None:
    found = sorted(RESULTS.glob("*-adaptive-sim/simulation.json"))
    if not found:
        return None
    p = found[-1]
    return str(p.relative_to(RESULTS)), json.loads(p.read_text())


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def _seeds(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


def adaptive_betting() -> str:
    """Error rates of the default and the asymptotic sequence on SPEC.md's nulls, and the
    seeds the default needs for true differences of 90 / 30 / 10 points beside the floor."""
    got = _newest()
    if got is None:
        return "*(no record: run `python benchmarks/adaptive_sim.py`)*\n"
    rel, doc = got
    st = doc["settings"]
    rules = list(RULE_WORDS)
    out = ["| seeds drawn as | alpha | " + " | ".join(
        f"{RULE_WORDS[r]}: false 'difference' / false 'equivalent' / missed the mean / mean seeds"
        for r in rules) + " |", "|---|---:|" + "---|" * len(rules)]
    for e in doc["errors"]:
        cells = [f"{_pct(v['false_difference'])} / {_pct(v['false_equivalent'])} / "
                 f"{_pct(v['miss'])} / {v['mean_seeds']:.1f}"
                 for v in (e["rules"][r] for r in rules)]
        out.append(f"| {e['words']} | {e['alpha']:.4g} | " + " | ".join(cells) + " |")
    out += ["", "| seed spread | true difference | alpha | floor (any test) | "
            + " | ".join(f"{RULE_WORDS[r]}: median / 90th pct. seeds, decided by "
                         f"{st['max_seeds']}" for r in rules) + " |",
            "|---|---:|---:|---:|" + "---|" * len(rules)]
    for p in doc["power"]:
        cells = [f"{_seeds(v['median_seeds'])} / {_seeds(v['p90_seeds'])}, "
                 f"{_pct(v['decided_by_default_max'])}"
                 for v in (p["rules"][r] for r in rules)]
        out.append(f"| {p['spread_name']} ({p['spread']}) | {100 * p['delta']:g} points | "
                   f"{p['alpha']:.4g} | {p['floor']} | " + " | ".join(cells) + " |")
    m = doc["machine"]
    tree = "modified" if doc["git_dirty"] else "clean"
    return "\n".join(out) + (
        f"\n\nSource: `benchmarks/results/{rel}` (`nice -n 10 python benchmarks/adaptive_sim.py`;"
        f" commit {doc['commit']}, {tree} tree; {m['cores']} cores, {m['date'][:10]}; "
        f"{st['studies_per_line']:,} simulated studies per line, {doc['wall_s']:.0f} s in all; "
        f"rounds start {st['start']}, step {st['step']}, max {st['max_seeds']}, equivalence "
        f"±{100 * st['equivalence']:g} point; alpha {st['alphas'][1]:.4g} is the Bonferroni "
        f"share of {st['comparisons']} comparisons; bets truncated at c = {st['bet_c']}; "
        f"seeds needed: looked at after every seed up to {st['power_max']}, '-' where fewer "
        "than half (90%) decided by then).\n")


TABLES = {"adaptive_betting": adaptive_betting}
