"""The report's section of an adaptive-seed study (`seeds: {adaptive: ...}`, issue 43).

Reads the decisions file the driver writes after every round (`adaptive.json` in the study's
folder): per comparison the decision, the seeds it took and its confidence sequence at every
look; a table (which rows stopped early and why), a figure of each sequence against the seeds,
and the Methods note (which sequence, alpha, the multiplicity rule, the comparisons left out).
A registered section (`analysis.sections`): a study without the file gets none.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

import analysis.builtin_sections  # noqa: F401  registered first: this section follows them
from analysis.adaptive_decisions import DECISIONS_FILE, read_decisions  # noqa: F401  (here too)
from analysis.formatting import dataset_name
from analysis.reference import POOLED_AUC
from analysis.sections import Context, Section, register_section
from analysis.sequences import ASYMPTOTIC_T_MIN
from analysis.table_render import Table

WORDS = {"greater": "higher than its baseline", "less": "lower than its baseline",
         "equivalent": "equivalent (within ±{eq})", "open": "open (not decided)",
         "absent": "no such split in this recipe's data"}


SEQUENCE_WORDS = {
    "betting": "the hedged-capital betting confidence sequence of Waudby-Smith & Ramdas (JRSS-B "
               "2024, Theorem 3), exact at every number of seeds for any distribution of the "
               "differences",
    "asymptotic": "the asymptotic confidence sequence of Waudby-Smith, Arbour, Sinha, Kennedy & "
                  "Ramdas (Annals of Statistics 2024), valid approximately and only from "
                  f"{ASYMPTOTIC_T_MIN} seeds on (it fails on skewed or collapsing seeds: "
                  "docs/performance.md)",
    "prpl_eb": "the predictable plug-in empirical-Bernstein sequence of Waudby-Smith & Ramdas "
               "(JRSS-B 2024), exact at every number of seeds, wide at few",
}
METRIC_WORDS = {
    "accuracy": "accuracy on the split named",
    "auc": "the attention AUC of the first pooling layer over the nodes of all test graphs of "
           "the seed together (the main table's AUC column, the same on every split)",
}
# where the runner reads a seed's value for each metric (`ablate.runner.plan.adaptive_options`
# METRICS / FALLBACK / AUC_ROW_SPLIT; a test holds them equal): the column, then its fallback
METRIC_COLUMNS = {"accuracy": ("accuracy",), "auc": (POOLED_AUC, "attn_auc_l0")}
AUC_ROW_SPLIT = "test_orig"
SEQUENCE_WORDS["exact"] = SEQUENCE_WORDS["prpl_eb"]  # its name in files before issue 54


@register_section("adaptive", lambda df: pd.Series(True, index=df.index))
def adaptive_section(ctx: Context) -> Section:
    """The decisions of an adaptive-seed study; empty (left out) for any other study."""
    sec = Section("Adaptive seeds: decisions")
    doc = read_decisions(ctx.study.path)
    if doc is None:
        return sec
    opts = doc["options"]
    eq = opts["equivalence"]
    comps = doc["comparisons"]
    header = [[("Row", 1), ("Baseline", 1), ("Axis", 1), ("Dataset / split", 1),
               ("Decision", 1), ("Decided in round", 1), ("Seeds", 1),
               ("Last interval of the difference", 1)]]
    body = []
    for c in comps:
        last = (f"[{100 * c['lo'][-1]:+.1f}, {100 * c['hi'][-1]:+.1f}] points" if c["lo"]
                else "-")
        words = WORDS[c["decision"]].format(eq=f"{100 * eq:g} points")
        if c["decision"] == "open" and c.get("stopped"):
            words = (f"open: no seeds up to {opts['max']} could decide it (no more seeds after "
                     f"round {c['stopped']})")
        body.append([c["row"], c["baseline"], c["axis"],
                     f"{dataset_name(c['dataset'])} / {_where(opts, c['split'])}", words,
                     str(c["round"] or "-"), str(c["seeds"]), last])
    data = pd.DataFrame([{k: v for k, v in c.items() if k not in ("lo", "hi", "at")}
                         for c in comps])
    decided = sum(c["decision"] not in ("open", "absent") for c in comps)
    n_absent = sum(c["decision"] == "absent" for c in comps)
    absent = f" ({n_absent} closed: their split is not in the data)" if n_absent else ""
    seq = SEQUENCE_WORDS.get(opts["sequence"], f"the sequence {opts['sequence']!r}")
    # a file of before these keys says neither: no seed run is claimed saved
    finished, saved = doc.get("finished", False), doc.get("seed_runs_saved", 0)
    later = doc["seed_runs_max"] - doc["seed_runs"] - saved
    runs = (f"{doc['seed_runs']} of {doc['seed_runs_max']} seed runs "
            f"({doc['seed_runs_max'] - doc['seed_runs']} saved)" if finished else
            f"{doc['seed_runs']} of at most {doc['seed_runs_max']} seed runs so far ({saved} "
            f"saved, {later} not run yet: the study stopped before its comparisons were "
            "decided or at their maximum; rerun it to go on)")
    notes = [
        f"Methods: after every round, each comparison's mean paired difference of "
        f"{METRIC_WORDS.get(opts['metric'], opts['metric'])} "
        f"(row − baseline, per seed) is bounded by {seq}; the family-wise alpha {opts['alpha']} "
        f"is split over the study's {len(comps)} comparisons (Bonferroni: "
        f"{doc['alpha_per_comparison']:.4g} each), which stays valid under any dependence between "
        "them and any stopping rule. A comparison is decided when its interval excludes 0 "
        f"(a difference, with its sign) or lies inside ±{100 * eq:g} points (equivalent: no "
        "difference that large); its rows then get no more seeds on that dataset unless another "
        f"open comparison needs them. Rounds: {opts['start']} seeds, then {opts['step']} per "
        f"round, at most {opts['max']}." + (
            " An open comparison that no values of its seeds left up to the maximum could "
            "decide (what its bets can still win cannot reach 1/alpha) asks for no more seeds: "
            "stopping it loses no decision." if opts.get("sequence") == "betting" else ""),
        f"{decided} of {len(comps)} comparisons decided after round {doc['round']}{absent}; "
        f"{runs}.",
        "Reading a decision: 'higher' or 'lower' means the interval of the mean difference, "
        "which holds at every look at once with probability ≥ 1 − alpha, excludes 0. 'Open' "
        "means the seeds run cannot tell, not that the rows are alike; 'equivalent' says "
        "they are alike within the margin.",
    ]
    left = doc.get("left_out", [])
    if left:
        notes.append(f"Left out ({len(left)}, not counted in the Bonferroni split): "
                     + "; ".join(f"{x['row']} vs {x['baseline']} on {dataset_name(x['dataset'])} "
                                 f"({x['why']})" for x in left) + ".")
    sec.tables.append(Table("adaptive", "Adaptive seeds: each comparison's decision", header,
                            body, [[False] * 8 for _ in body], data, notes))
    if ctx.figures and comps:
        means = [look_means(ctx.ok, c, opts["metric"]) for c in comps]
        sec.figures.append(_figure(comps, means, opts, ctx.figures_dir,
                                   f"{ctx.study.name}__adaptive"))
    return sec


DECISION_COLOURS = {"greater": "#d95f02", "less": "#d95f02", "equivalent": "#1b9e77",
                    "open": "#386cb0", "absent": "#999999"}


def look_means(ok: pd.DataFrame, c: dict, metric: str) -> list[float] | None:
    """The mean paired difference (row - baseline, 0-1 scale) of the seeds the comparison had
    taken at each of its looks, from the study's ok rows: the seeds in the decision's `order`,
    the first `at[k]` of them at look k. None where the store lacks a seed a look took (a file
    deleted since) or the rows are not in it: the figure then draws the intervals alone."""
    if not c.get("at") or ok.empty or "row" not in ok.columns:
        return None
    split = AUC_ROW_SPLIT if metric == "auc" else c["split"]
    cols = [x for x in METRIC_COLUMNS.get(metric, ()) if x in ok.columns]
    if not cols:
        return None
    sel = ok[(ok["dataset"] == c["dataset"]) & (ok["split"] == split)]
    value = sel[cols[0]].astype(float)
    for x in cols[1:]:
        value = value.fillna(sel[x].astype(float))
    per = pd.DataFrame({"row": sel["row"], "seed": sel["seed"].astype(int), "value": value})
    per = per.dropna().groupby(["row", "seed"])["value"].mean()
    order = c["order"][:c["at"][-1]]
    try:
        diff = [per[(c["row"], s)] - per[(c["baseline"], s)] for s in order]
    except KeyError:
        return None
    return [float(sum(diff[:n]) / n) for n in c["at"]]


def _figure(comps: list[dict], means: list[list[float] | None], opts: dict, out: Path,
            stem: str):
    import matplotlib.pyplot as plt

    from analysis import figure_style as fs

    n = len(comps)
    cols = min(3, n)
    rows = -(-n // cols)
    looks = [a for c in comps for a in c["at"]]
    seeds = (min([opts["start"], *looks]) - 1.5, max([opts["max"], *looks]) + 1.5)
    style, context = fs.theme()
    with style, context:
        fig, axes = plt.subplots(rows, cols, figsize=(4.0 * cols, 3.1 * rows), squeeze=False,
                                 layout="constrained")
        for ax, c, m in zip(axes.flat, comps, means):
            _panel(ax, c, m, opts, seeds)
        for ax in list(axes.flat)[n:]:
            ax.set_visible(False)
        png, svg = fs.save(fig, out, stem)
    return fs.Figure(stem, "Each comparison's confidence sequence for the mean paired "
                     "difference at each look (a bar per look from its low to its high end, "
                     "shaded between looks; the dot on it: the mean paired difference of the "
                     "seeds taken by then, which a betting interval need not centre on; a bar "
                     "without a dot: those seeds are no longer in the store; grey band "
                     "between dashed lines: the "
                     f"equivalence margin ±{100 * opts['equivalence']:g} points): decided when the interval "
                     "leaves 0 or fits inside the margin. Colour: orange decided higher or "
                     "lower, green equivalent, blue open. The seeds axis runs from the first "
                     f"round ({opts['start']}) to the most a row can get ({opts['max']}) in "
                     "every panel, so where a comparison stopped reads the same everywhere; "
                     "the y-range is fitted to each panel.", png, svg)


def _where(opts: dict, split: str) -> str:
    """What a decision is about on its dataset: the split (accuracy) or the pooled AUC."""
    return "AUC (all test graphs)" if opts.get("metric") == "auc" else split


def panel_limits(lo: list[float], hi: list[float], eq: float) -> tuple[float, float]:
    """The y-range of a panel in points: its intervals, 0 and the margin, with 8% air, within
    [-100, 100] (a fixed -100..100 flattened intervals of a few points into a line)."""
    vals = [100 * x for x in lo + hi] + [0.0, -100 * eq, 100 * eq]
    a, b = min(vals), max(vals)
    pad = 0.08 * max(b - a, 1.0)
    return max(-100.0, a - pad), min(100.0, b + pad)


def _panel(ax, c: dict, means: list[float] | None, opts: dict,
           seeds: tuple[float, float]) -> None:
    """One comparison: an interval per look (one look: a point with its interval), with the
    mean paired difference at each look as its dot where the store has the seeds."""
    eq = opts["equivalence"]
    at, lo, hi = c["at"], [100 * x for x in c["lo"]], [100 * x for x in c["hi"]]
    colour = DECISION_COLOURS.get(c["decision"], "#386cb0")
    ax.axhline(0, color="black", lw=0.8)
    ax.axhspan(-100 * eq, 100 * eq, color="grey", alpha=0.2, lw=0)
    for edge in (-100 * eq, 100 * eq):  # the margin's edges: 'equivalent' fits inside them
        ax.axhline(edge, color="#555555", lw=0.8, ls="--")
    if at:
        if len(at) > 1:
            ax.fill_between(at, lo, hi, alpha=0.2, lw=0, color=colour)
        ax.vlines(at, lo, hi, lw=1, color=colour)
        for end in (lo, hi):
            ax.plot(at, end, ls="none", marker="_", ms=6, color=colour)
        if means:
            ax.plot(at, [100 * m for m in means], ls="none", marker="o", ms=3.5, color=colour,
                    markeredgecolor="black", markeredgewidth=0.4)
    else:
        ax.text(0.5, 0.5, "no look: no paired seeds", transform=ax.transAxes, ha="center",
                va="center", fontsize=8, color="#666666")
    ax.set_xlim(*seeds)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylim(*panel_limits(c["lo"], c["hi"], eq))
    state = c["decision"]
    if state == "open" and c.get("stopped") and at:
        state = f"open, undecidable by {opts['max']}: stopped at {at[-1]}"
    ax.set_title(f"{c['row']} vs {c['baseline']}\n{dataset_name(c['dataset'])} "
                 f"{_where(opts, c['split'])}: {state}", fontsize=8,
                 color=colour if c["decision"] != "open" else "black")
    ax.set_xlabel("seeds", fontsize=8)
    ax.set_ylabel("difference (points)", fontsize=8)
