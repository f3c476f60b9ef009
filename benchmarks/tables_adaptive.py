"""Generated tables of adaptive seeds: in simulation (`benchmarks/adaptive_sim.py`, issue 54)
and on real studies run adaptively beside fixed seeds (`benchmarks/adaptive_study.py`).

Called from `benchmarks/tables.py` (its `TABLES` registry); reads the newest
`benchmarks/results/*-adaptive-sim/simulation.json` and returns the Markdown for the
`<!-- generated:adaptive_betting -->` section of docs/performance.md.
"""

from __future__ import annotations

import json

import tables_common as common

RULE_WORDS = {"betting": "betting sequence (default, exact)", "asymptotic": "asymptotic sequence"}


def _newest() -> tuple[str, dict] | None:
    found = sorted(common.RESULTS.glob("*-adaptive-sim/simulation.json"))
    if not found:
        return None
    p = found[-1]
    return str(p.relative_to(common.RESULTS)), json.loads(p.read_text())


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
        f"\n\nSource: `benchmarks/results/{rel}` (`nice -n 10 python benchmarks/adaptive_sim.py "
        f"--out benchmarks/results/{rel}`;"
        f" commit {doc['commit']}, {tree} tree; {m['cores']} cores, {m['date'][:10]}; "
        f"{st['studies_per_line']:,} simulated studies per line, {doc['wall_s']:.0f} s in all; "
        f"rounds start {st['start']}, step {st['step']}, max {st['max_seeds']}, equivalence "
        f"±{100 * st['equivalence']:g} point; alpha {st['alphas'][1]:.4g} is the Bonferroni "
        f"share of {st['comparisons']} comparisons; bets truncated at c = {st['bet_c']}; "
        f"seeds needed: looked at after every seed up to {st['power_max']}, '-' where fewer "
        "than half (90%) decided by then).\n")


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
        doc = common.load(rel)
        if doc:
            parts.append(_adaptive_run(doc, rel, study))
    return "\n".join(parts) if parts else common.missing(ADAPTIVE_STUDIES[0][0])


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


TABLES = {"adaptive_betting": adaptive_betting, "adaptive_study": adaptive_study}
