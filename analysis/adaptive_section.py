"""The report's section of an adaptive-seed study (`seeds: {adaptive: ...}`, issue 43).

Reads the decisions file the driver writes after every round (`adaptive.json` in the study's
folder): per comparison the decision, the seeds it took and its confidence sequence at every
look; a table (which rows stopped early and why), a figure of each sequence against the seeds,
and the Methods note (which sequence, alpha, the multiplicity rule, the comparisons left out).
A registered section (`analysis.sections`): a study without the file gets none.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

import analysis.builtin_sections  # noqa: F401  registered first: this section follows them
from analysis.formatting import dataset_name
from analysis.sections import Context, Section, register_section
from analysis.sequences import ASYMPTOTIC_T_MIN
from analysis.table_render import Table

# ablate.runner.plan.adaptive.DECISIONS_FILE (analysis imports nothing from ablate; a test
# keeps the two equal)
DECISIONS_FILE = "adaptive.json"
WORDS = {"greater": "higher than its baseline", "less": "lower than its baseline",
         "equivalent": "equivalent (within ±{eq})", "open": "open (not decided)",
         "absent": "no such split in this recipe's data"}


def read_decisions(study_dir: Path) -> dict | None:
    """The decisions file of a study folder, or None when the study is not adaptive."""
    path = Path(study_dir) / DECISIONS_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


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
        body.append([c["row"], c["baseline"], c["axis"],
                     f"{dataset_name(c['dataset'])} / {c['split']}",
                     WORDS[c["decision"]].format(eq=f"{100 * eq:g} points"),
                     str(c["round"] or "-"), str(c["seeds"]), last])
    data = pd.DataFrame([{k: v for k, v in c.items() if k not in ("lo", "hi", "at")}
                         for c in comps])
    decided = sum(c["decision"] not in ("open", "absent") for c in comps)
    n_absent = sum(c["decision"] == "absent" for c in comps)
    absent = f" ({n_absent} closed: their split is not in the data)" if n_absent else ""
    seq = ("the asymptotic confidence sequence of Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas "
           f"(Annals of Statistics 2024), valid approximately and only from {ASYMPTOTIC_T_MIN} "
           "seeds on" if opts["sequence"] == "asymptotic" else
           "the predictable plug-in empirical-Bernstein sequence of Waudby-Smith & Ramdas "
           "(JRSS-B 2024), exact at every number of seeds, wide at few")
    # a file of before these keys says neither: no seed run is claimed saved
    finished, saved = doc.get("finished", False), doc.get("seed_runs_saved", 0)
    later = doc["seed_runs_max"] - doc["seed_runs"] - saved
    runs = (f"{doc['seed_runs']} of {doc['seed_runs_max']} seed runs "
            f"({doc['seed_runs_max'] - doc['seed_runs']} saved)" if finished else
            f"{doc['seed_runs']} of at most {doc['seed_runs_max']} seed runs so far ({saved} "
            f"saved, {later} not run yet: the study stopped before its comparisons were "
            "decided or at their maximum; rerun it to go on)")
    notes = [
        f"Methods: after every round, each comparison's mean paired difference of {opts['metric']} "
        f"(row − baseline, per seed) is bounded by {seq}; the family-wise alpha {opts['alpha']} "
        f"is split over the study's {len(comps)} comparisons (Bonferroni: "
        f"{doc['alpha_per_comparison']:.4g} each), which stays valid under any dependence between "
        "them and any stopping rule. A comparison is decided when its interval excludes 0 "
        f"(a difference, with its sign) or lies inside ±{100 * eq:g} points (equivalent: no "
        "difference that large); its rows then get no more seeds on that dataset unless another "
        f"open comparison needs them. Rounds: {opts['start']} seeds, then {opts['step']} per "
        f"round, at most {opts['max']}.",
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
        sec.figures.append(_figure(comps, eq, ctx.figures_dir, f"{ctx.study.name}__adaptive"))
    return sec


def _figure(comps: list[dict], eq: float, out: Path, stem: str):
    import matplotlib.pyplot as plt

    from analysis import figure_style as fs

    n = len(comps)
    cols = min(3, n)
    rows = -(-n // cols)
    style, context = fs.theme()
    with style, context:
        fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.8 * rows), squeeze=False)
        for ax, c in zip(axes.flat, comps):
            at = c["at"]
            if at:
                ax.fill_between(at, [100 * x for x in c["lo"]], [100 * x for x in c["hi"]],
                                alpha=0.3, step="post")
            ax.axhline(0, color="black", lw=0.8)
            ax.axhspan(-100 * eq, 100 * eq, color="grey", alpha=0.15)
            ax.set_ylim(-100, 100)
            ax.set_title(f"{c['row']} vs {c['baseline']}\n{dataset_name(c['dataset'])} "
                         f"{c['split']}: {c['decision']}", fontsize=8)
            ax.set_xlabel("seeds")
            ax.set_ylabel("difference (points)")
        for ax in list(axes.flat)[n:]:
            ax.set_visible(False)
        png, svg = fs.save(fig, out, stem)
    return fs.Figure(stem, "Each comparison's confidence sequence for the mean paired "
                     "difference against the seeds it had at each look (shaded; grey band: "
                     "the equivalence margin): decided when the band leaves 0 or fits the margin.",
                     png, svg)
