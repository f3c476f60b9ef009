"""Adaptive seeds: a study that adds seeds only where a comparison is still open (issue 43).

`seeds: {adaptive: {...}}` in a study file, or `seeds=adaptive` on the command line (the
defaults below). Round 1 trains seeds 0 .. start-1 of every row; after each round the driver
reads the store, updates one anytime-valid confidence sequence (`analysis.betting` by default) per
comparison, and the next round adds `step` seeds to the rows of the comparisons still open
on the datasets where they are open (both rows of a comparison; a row shared by several runs
once; a row of several datasets is trained on each as long as one of its comparisons there is
open), until every comparison is decided or has `max` seeds.

The comparisons are the report's: each row against its one-axis baseline
(`analysis.variants.comparisons`), paired by seed, on `metric` at `split` (per dataset; by
default its generalisation split: COLORS LARGE-C, TRIANGLES LARGE, MNIST-75SP NOISY, TU
test_large), one decision per comparison, dataset and split. With metric=auc a seed has one
value, the pooled AUC of the report's AUC column (the same on every split's row), so each
comparison is decided once per dataset, on that column (`decided_splits`), whatever `split`
lists. A comparison is decided when its sequence excludes 0 (a difference, with its
sign) or lies inside +-`equivalence` (no difference that large); else it stays open. One
whose rows cannot both have the metric (metric=auc: a row without attention layers, or a
dataset without ground-truth attention) is left out from the start and named in the
decisions file; one whose split the dataset's recipe turned out not to make (TU test_orig,
only made when small graphs are left over) is closed as "absent" after the round that shows
it. Alpha is split over the comparisons kept (Bonferroni, valid for confidence sequences
under any dependence and stopping rule: `analysis.sequences.per_comparison_alpha`).

Decisions are frozen per round (issue 54): a round's decisions are stored in the decisions
file when it ends and never recomputed from values that arrive later (a failed seed retried
by a rerun counts in the next round's look, `decide_round`); a rerun replays the stored rounds
exactly and continues where the study stopped (`adaptive_rounds.Rounds`; `adaptive_rounds.replay_plan` does
the same without running anything, for `verify=true`). Trials are built per round (its
seeds, packed by `seeds_per_trial` within the round), so their ids are the same on every
rerun and the store skips what it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    import pandas as pd

from ablate.runner.plan.adaptive_options import (  # noqa: F401  the options' names, here too
    ABSENT,
    AUC_DECIDED,
    AUC_ROW_SPLIT,
    CONDITIONAL_SPLITS,
    DATASET_SPLITS,
    DECISIONS_FILE,
    FALLBACK,
    KEYS,
    METRICS,
    NO_GROUND_TRUTH,
    OPEN,
    SEQUENCES,
    AdaptiveSeeds,
    decided_splits,
    made_splits,
    parse_adaptive,
    splits_for,
)


def check_study(ad: AdaptiveSeeds, trials: list) -> None:
    """What only the expanded study can tell: graph trials, splits its datasets make, at least
    one comparison whose rows can both have the metric. One `ConfigError` line each."""
    kinds = {getattr(t, "kind", "graph") for t in trials}
    if kinds - {"graph"}:
        raise ConfigError("seeds: adaptive seeds compare graph-model rows; this study's trials "
                          f"are of kind {sorted(kinds)}")
    datasets = sorted({t.config.dataset for t in trials})
    makes = "; ".join(f"dataset {d} produces {', '.join(made_splits(d))}" for d in datasets)
    known = sorted({s for d in datasets for s in made_splits(d)})
    for s in ad.split:
        if s not in known:
            raise ConfigError(f"seeds.adaptive.split: no dataset of this study makes {s!r} "
                              f"({makes}){did_you_mean(s, known)}")
    for d in datasets:
        if not splits_for(ad, d):
            raise ConfigError(f"seeds.adaptive.split {list(ad.split)}: dataset {d} produces "
                              f"{', '.join(made_splits(d))}")
    plan = plan_rows(trials)
    if not plan.comparisons:
        raise ConfigError("seeds: adaptive needs rows to compare (rows that differ in one "
                          "axis); this study has none")
    if not initial_decisions(ad, plan):
        whys = sorted({x.why for x in left_out(ad, plan)})
        raise ConfigError(f"seeds.adaptive.metric={ad.metric}: none of this study's "
                          f"{len(plan.comparisons)} comparison(s) can have it on both rows "
                          f"({'; '.join(whys)}); use metric=accuracy")


@dataclass
class PlanRows:
    """The report's rows and one-axis comparisons, computed from the planned trials."""

    row_of: dict[str, str]  # trial id -> row label
    comparisons: list[tuple[str, str, str]]  # (row, baseline, axis)
    datasets: dict[str, list[str]] = field(default_factory=dict)  # row -> datasets
    attention: set[tuple[str, str]] = field(default_factory=set)  # (row, dataset) with pooling


def plan_rows(trials: list) -> PlanRows:
    """Rows and comparisons as the report makes them (`analysis.variants`), from the trials'
    configs (no results needed)."""
    import pandas as pd

    from ablate.config import axes
    from analysis.variants import add_data_axes, add_rows, add_variant, comparisons, row_axes

    recs = [{**axes(t.config), "trial_id": t.trial_id, "seed": t.config.seeds[0]} for t in trials]
    df = pd.DataFrame(recs)
    df = add_data_axes(add_variant(df))
    ax = row_axes(df)
    df = add_rows(df, ax)
    comps = comparisons(df, ax)
    row_of = dict(zip(df["trial_id"], df["row"]))
    pairs = [(r, c.baseline, c.axis) for r, cs in comps.items() for c in cs]
    datasets = df.groupby("row")["dataset"].apply(lambda s: sorted(set(s))).to_dict()
    attention = {(row_of[t.trial_id], t.config.dataset) for t in trials if t.config.pool_layers}
    return PlanRows(row_of, pairs, datasets, attention)


@dataclass
class Decision:
    """One comparison on one dataset and split, after a round."""

    row: str
    baseline: str
    axis: str
    dataset: str
    split: str
    seeds: int = 0
    decision: str = OPEN  # greater / less / equivalent / open / absent (no such split)
    round: int = 0  # the round that decided it (0: open)
    lo: list[float] = field(default_factory=list)  # the sequence at each look
    hi: list[float] = field(default_factory=list)
    at: list[int] = field(default_factory=list)  # seeds at each look
    order: list[int] = field(default_factory=list)  # the seeds in the order the sequence took them
    # the round after which no values of the seeds left up to max could decide it (betting:
    # `analysis.betting.can_still_decide`); it stays open and asks no more seeds (0: never)
    stopped: int = 0

    @property
    def key(self) -> tuple:
        return (self.row, self.baseline, self.dataset, self.split)


@dataclass(frozen=True)
class LeftOut:
    """A comparison the study cannot decide on its metric: why (one of its rows has none)."""

    row: str
    baseline: str
    axis: str
    dataset: str
    why: str


def _no_metric(ad: AdaptiveSeeds, plan: PlanRows, row: str, dataset: str) -> str | None:
    """Why `row` can have no value of the metric on `dataset` (None: it can)."""
    if ad.metric != "auc":
        return None
    if dataset in NO_GROUND_TRUTH:
        return f"{dataset} has no ground-truth attention"
    if (row, dataset) not in plan.attention:
        return f"{row} has no attention layer"
    return None


def _candidates(ad: AdaptiveSeeds, plan: PlanRows):
    """(row, baseline, axis, dataset, why it is left out or None) of every comparison."""
    for row, base, axis in plan.comparisons:
        for ds in sorted(set(plan.datasets.get(row, [])) & set(plan.datasets.get(base, []))):
            yield row, base, axis, ds, _no_metric(ad, plan, row, ds) or _no_metric(ad, plan,
                                                                                  base, ds)


def initial_decisions(ad: AdaptiveSeeds, plan: PlanRows) -> dict[tuple, Decision]:
    """One open decision per comparison, dataset and split decided (`decided_splits`: for
    metric=auc the AUC column alone) whose rows can have the metric."""
    out = {}
    for row, base, axis, ds, why in _candidates(ad, plan):
        if why is None:
            for split in decided_splits(ad, ds):
                d = Decision(row, base, axis, ds, split)
                out[d.key] = d
    return out


def left_out(ad: AdaptiveSeeds, plan: PlanRows) -> list[LeftOut]:
    """The comparisons (per dataset) one of whose rows cannot have the metric."""
    return [LeftOut(row, base, axis, ds, why) for row, base, axis, ds, why in _candidates(ad, plan)
            if why is not None]


def decide_round(ad: AdaptiveSeeds, plan: PlanRows, values: pd.DataFrame, upto: int, r: int,
                 decisions: dict[tuple, Decision]) -> None:
    """Update every open decision with the seeds < `upto` (those of rounds <= r). `values`:
    a DataFrame with row, dataset, split, seed, value (the metric in [0, 1]). The paired seeds
    not yet taken are appended to the decision's `order` in seed order (a seed that failed in
    an earlier round and was retried comes in now, after the seeds already taken), and the
    sequence runs over `order`: the seeds as they arrived, so earlier looks never change. A
    comparison whose rows both have values on its dataset but none on its split is closed as
    ABSENT: the recipe does not make that split."""
    alpha = sequence_alpha(ad, len(decisions))
    v = values[values["seed"] < upto]
    by = {k: g.set_index("seed")["value"] for k, g in v.groupby(["row", "dataset", "split"])}
    seen = set(zip(v["row"], v["dataset"]))
    for d in decisions.values():
        if d.decision != OPEN or d.stopped:
            continue
        a, b = by.get((d.row, d.dataset, d.split)), by.get((d.baseline, d.dataset, d.split))
        if (a is None or b is None) and {(d.row, d.dataset), (d.baseline, d.dataset)} <= seen:
            d.decision, d.round = ABSENT, r
            continue
        if a is None or b is None:
            continue
        shared = set(a.index) & set(b.index)
        d.order += sorted(int(s) for s in shared - set(d.order))
        if not d.order:
            continue
        diff = a.loc[d.order].to_numpy(float) - b.loc[d.order].to_numpy(float)
        lo, hi, verdict = sequence_decision(ad, diff, alpha)
        d.seeds = len(d.order)
        d.lo.append(lo)
        d.hi.append(hi)
        d.at.append(len(d.order))
        if verdict != OPEN:
            d.decision, d.round = verdict, r
        elif len(d.order) < ad.max and not can_decide(ad, diff, ad.max - len(d.order), alpha):
            d.stopped = r  # before max only: one open at max is just open


def can_decide(ad: AdaptiveSeeds, diff: object, remaining: int, alpha: float) -> bool:
    """Whether `remaining` (> 0) more seeds could still decide an open comparison after
    `diff`: for the exact betting sequence a bound on what its capitals can still win (False:
    no seeds up to max can decide it, so it asks for none); the other sequences have no such
    bound."""
    if ad.sequence != "betting":
        return True
    import numpy as np

    from analysis.betting import can_still_decide

    d = np.clip(np.asarray(diff, dtype=float), -1, 1)
    return can_still_decide(d, remaining, alpha, ad.equivalence)


def sequence_alpha(ad: AdaptiveSeeds, comparisons: int) -> float:
    """Each comparison's alpha: Bonferroni over the study's comparisons."""
    from analysis.sequences import per_comparison_alpha

    return per_comparison_alpha(ad.alpha, max(1, comparisons))


def sequence_decision(ad: AdaptiveSeeds, diff: object, alpha: float) -> tuple[float, float, str]:
    """(lo, hi, decision) after the paired differences `diff` (in the order taken) under the
    study's sequence. The betting sequence decides from its capitals at 0 and the margins
    (`analysis.betting.decision_codes`), the others from their interval (`decide`)."""
    import numpy as np

    from analysis import betting, sequences

    d = np.clip(np.asarray(diff, dtype=float), -1, 1)
    if ad.sequence == "betting":
        lo, hi = betting.betting_cs(d, alpha)
        code = int(betting.decision_codes(d[None, :], np.array([d.size]), alpha,
                                          ad.equivalence)[0, 0])
        verdict = {0: OPEN, 1: "greater", 2: "less", 3: "equivalent"}[code]
        return float(lo[-1]), float(hi[-1]), verdict
    if ad.sequence == "prpl_eb":
        lo, hi = sequences.prpl_eb_cs(d, alpha)
    else:
        lo, hi = sequences.asymptotic_cs(d, alpha, t_star=ad.max)
    return float(lo[-1]), float(hi[-1]), sequences.decide(lo, hi, ad.equivalence)


def active_pairs(decisions: dict[tuple, Decision]) -> set[tuple[str, str]]:
    """(row, dataset) of the comparisons still open and asking for seeds (not `stopped`):
    both sides of each, on its dataset."""
    return {(x, d.dataset) for d in decisions.values() if d.decision == OPEN and not d.stopped
            for x in (d.row, d.baseline)}


def store_values(ad: AdaptiveSeeds, plan: PlanRows, results_dir: str | Path,
                 study: str) -> pd.DataFrame:
    """The metric per (row, dataset, split, seed) from the study's store (status ok); empty
    before the first result file. For metric=auc the value the report's AUC column shows, one
    per seed: from the seed's AUC_ROW_SPLIT row (the pooled AUC, else the first layer's AUC
    there), under split AUC_DECIDED. A store the report cannot read (a foreign or damaged file)
    is one `ConfigError` line, as the runner gives for its store (exit 2)."""
    import pandas as pd

    from analysis.load import BadFiles, StoreError, load_study
    from result_store import reader

    folder = Path(results_dir) / study
    empty = pd.DataFrame(columns=["row", "dataset", "split", "seed", "value"])
    if not reader.result_files(folder / "trials"):
        return empty
    try:
        ok = load_study(study, folder).ok
    except BadFiles as e:
        more = f" (and {len(e.problems) - 3} more)" if len(e.problems) > 3 else ""
        raise ConfigError(f"{len(e.problems)} problem file(s) in {folder}: "
                               f"{'; '.join(e.problems[:3])}{more}; list them all with "
                               "verify=true") from None
    except StoreError as e:
        raise ConfigError(str(e)) from None
    cols = [c for c in (METRICS[ad.metric], FALLBACK.get(ad.metric)) if c in ok.columns]
    if ok.empty or not cols:
        return empty
    ok = ok[ok["trial_id"].isin(plan.row_of)]
    split = ok["split"]
    if ad.metric == "auc":  # one value per seed, where the report reads it
        ok = ok[ok["split"] == AUC_ROW_SPLIT]
        split = pd.Series(AUC_DECIDED, index=ok.index)
    value = ok[cols[0]].astype(float)
    for c in cols[1:]:  # the report's AUC where it is missing (stores before the pooled one)
        value = value.fillna(ok[c].astype(float))
    out = pd.DataFrame({"row": ok["trial_id"].map(plan.row_of), "dataset": ok["dataset"],
                        "split": split, "seed": ok["seed"].astype(int), "value": value})
    return out.dropna(subset=["value"]).groupby(["row", "dataset", "split", "seed"],
                                                as_index=False)["value"].mean()


def row_pair(plan: PlanRows, trial) -> tuple[str, str]:
    """(row label, dataset) of a planned trial."""
    return plan.row_of[trial.trial_id], trial.config.dataset
