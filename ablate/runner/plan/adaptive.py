"""Adaptive seeds: a study that adds seeds only where a comparison is still open (issue 43).

`seeds: {adaptive: {...}}` in a study file, or `seeds=adaptive` on the command line (the
defaults below). Round 1 trains seeds 0 .. start-1 of every row; after each round the driver
reads the store, updates one anytime-valid confidence sequence (`analysis.sequences`) per
comparison, and the next round adds `step` seeds to the rows of the comparisons still open
on the datasets where they are open (both rows of a comparison; a row shared by several runs
once; a row of several datasets is trained on each as long as one of its comparisons there is
open), until every comparison is decided or has `max` seeds.

The comparisons are the report's: each row against its one-axis baseline
(`analysis.variants.comparisons`), paired by seed, on `metric` at `split` (per dataset; by
default its generalisation split: COLORS LARGE-C, TRIANGLES LARGE, MNIST-75SP NOISY, TU
test_large). A comparison is decided when its sequence excludes 0 (a difference, with its
sign) or lies inside +-`equivalence` (no difference that large); else it stays open. One
whose rows cannot both have the metric (metric=auc: a row without attention layers, or a
dataset without ground-truth attention) is left out from the start and named in the
decisions file; one whose split the dataset's recipe turned out not to make (TU test_orig,
only made when small graphs are left over) is closed as "absent" after the round that shows
it. Alpha is split over the comparisons kept (Bonferroni, valid for confidence sequences
under any dependence and stopping rule: `analysis.sequences.per_comparison_alpha`).

Everything a round does is decided from the seeds of the rounds before it, in seed order, so
Ctrl-C and a rerun replay the same decisions from the store and continue where it stopped
(`replay_plan` does the same without running anything, for `verify=true`). Trials are built
per round (its seeds, packed by `seeds_per_trial` within the round), so their ids are the
same on every rerun and the store skips what it holds.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.errors import ConfigError, did_you_mean

if TYPE_CHECKING:
    import pandas as pd

SEQUENCES = ("asymptotic", "exact")  # analysis.sequences.asymptotic_cs / prpl_eb_cs
METRICS = {"accuracy": "accuracy", "auc": "attn_auc_l0"}
# the splits each dataset's generator always makes (tests/test_adaptive.py generates them),
# the default first: its generalisation split (the papers' headline column)
DATASET_SPLITS: dict[str, tuple[str, ...]] = {
    "colors": ("test_largec", "test_orig", "test_large"),
    "triangles": ("test_large", "test_orig"),
    "mnist_sp": ("test_noisy", "test_orig", "test_noisyc"),
    "digits_sp": ("test_noisy", "test_orig", "test_noisyc"),
    "proteins": ("test_large",), "dd": ("test_large",), "collab": ("test_large",),
}
# splits only some recipes make: TU's test_orig holds the small graphs left over from
# train/val, when there are any (ablate/data/tu.py)
CONDITIONAL_SPLITS: dict[str, tuple[str, ...]] = {
    "proteins": ("test_orig",), "dd": ("test_orig",), "collab": ("test_orig",)}
# datasets whose ground-truth attention is all zeros (TU): attention AUC is undefined (NaN)
NO_GROUND_TRUTH = ("proteins", "dd", "collab")
DECISIONS_FILE = "adaptive.json"  # analysis.adaptive_section reads it (a mirror: tests)
OPEN, ABSENT = "open", "absent"


@dataclass(frozen=True)
class AdaptiveSeeds:
    """The adaptive-seed options of a study (see the module docstring)."""

    start: int = 10  # seeds of every row in round 1 (the asymptotic sequence says nothing before 10)
    step: int = 2  # seeds added per round to the rows of open comparisons
    max: int = 30  # most seeds a row can get
    alpha: float = 0.05  # family-wise, over all the study's comparisons
    equivalence: float = 0.01  # |difference| below this (accuracy 0-1: 1 point) is "no difference"
    metric: str = "accuracy"  # accuracy or auc (attention AUC of the first pooling layer)
    split: tuple[str, ...] = ()  # () = each dataset's generalisation split
    sequence: str = "asymptotic"  # or exact (PrPl-EB: valid at every n, far wider)

    def _looks(self) -> list[int]:
        from analysis.sequences import looks

        return [int(n) for n in looks(self.start, self.step, self.max)]

    def round_seeds(self, r: int) -> list[int]:
        """The seeds round `r` (1-based) adds: 0..start-1, then `step` more each round (the
        seed counts of `analysis.sequences.looks`)."""
        at = self._looks()
        return list(range(at[r - 2] if r > 1 else 0, at[r - 1]))

    @property
    def rounds(self) -> int:
        return len(self._looks())


KEYS = tuple(AdaptiveSeeds.__dataclass_fields__)


def parse_adaptive(value: object) -> AdaptiveSeeds:
    """`adaptive` (defaults) or `{adaptive: {key: value}}` as a study file writes it; bad
    values are one `ConfigError` line."""
    if value == "adaptive":
        return AdaptiveSeeds()
    if not (isinstance(value, dict) and set(value) == {"adaptive"}):
        raise ConfigError(f"seeds: expected a list, an int, 'range(0,10)', 'adaptive' or "
                          f"{{adaptive: {{...}}}}, got {value!r}")
    opts = value["adaptive"] or {}
    if not isinstance(opts, dict):
        raise ConfigError(f"seeds.adaptive must be a mapping of {', '.join(KEYS)}, got {opts!r}")
    unknown = sorted(set(opts) - set(KEYS))
    if unknown:
        raise ConfigError(f"seeds.adaptive: unknown key(s) {unknown}; valid: {', '.join(KEYS)}")
    opts = dict(opts)
    if "split" in opts:
        opts["split"] = _split(opts["split"])
    ad = AdaptiveSeeds(**opts)
    _check(ad)
    return ad


def _split(value: object) -> tuple[str, ...]:
    names = [value] if isinstance(value, str) else value
    if not (isinstance(names, list | tuple) and all(isinstance(s, str) for s in names)):
        raise ConfigError(f"seeds.adaptive.split must be a split name or a list of them (e.g. "
                          f"test_large), got {value!r}; leave it out for each dataset's "
                          "generalisation split")
    return tuple(names)


def _int(name: str, v: object, lo: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise ConfigError(f"seeds.adaptive.{name} must be an integer >= {lo}, got {v!r}")


def _check(ad: AdaptiveSeeds) -> None:
    _int("start", ad.start, 2)
    _int("step", ad.step, 1)
    _int("max", ad.max, 2)
    if ad.max < ad.start:
        raise ConfigError(f"seeds.adaptive.max ({ad.max}) must be >= start ({ad.start})")
    for name in ("alpha", "equivalence"):
        v = getattr(ad, name)
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 < v < 1:
            raise ConfigError(f"seeds.adaptive.{name} must be in (0, 1), got {v!r}")
    if ad.metric not in METRICS:
        raise ConfigError(f"seeds.adaptive.metric must be one of {', '.join(METRICS)}, got "
                          f"{ad.metric!r}")
    if ad.sequence not in SEQUENCES:
        raise ConfigError(f"seeds.adaptive.sequence must be one of {', '.join(SEQUENCES)}, got "
                          f"{ad.sequence!r}")


def made_splits(dataset: str) -> tuple[str, ...]:
    """Every split `dataset` can make: always, then only with some recipes."""
    return DATASET_SPLITS[dataset] + CONDITIONAL_SPLITS.get(dataset, ())


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


def splits_for(ad: AdaptiveSeeds, dataset: str) -> list[str]:
    """The splits `dataset`'s comparisons are decided on: those asked for that it can make,
    else its default."""
    if ad.split:
        return [s for s in ad.split if s in made_splits(dataset)]
    return [DATASET_SPLITS[dataset][0]]


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
    """One open decision per comparison, dataset and split whose rows can have the metric."""
    out = {}
    for row, base, axis, ds, why in _candidates(ad, plan):
        if why is None:
            for split in splits_for(ad, ds):
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
    a DataFrame with row, dataset, split, seed, value (the metric in [0, 1]). A comparison
    whose rows both have values on its dataset but none on its split is closed as ABSENT:
    the recipe does not make that split."""
    import numpy as np

    from analysis import sequences

    alpha = sequences.per_comparison_alpha(ad.alpha, max(1, len(decisions)))
    v = values[values["seed"] < upto]
    by = {k: g.set_index("seed")["value"] for k, g in v.groupby(["row", "dataset", "split"])}
    seen = set(zip(v["row"], v["dataset"]))
    for d in decisions.values():
        if d.decision != OPEN:
            continue
        a, b = by.get((d.row, d.dataset, d.split)), by.get((d.baseline, d.dataset, d.split))
        if (a is None or b is None) and {(d.row, d.dataset), (d.baseline, d.dataset)} <= seen:
            d.decision, d.round = ABSENT, r
            continue
        if a is None or b is None:
            continue
        seeds = sorted(set(a.index) & set(b.index))
        if not seeds:
            continue
        diff = np.clip(a.loc[seeds].to_numpy(float) - b.loc[seeds].to_numpy(float), -1, 1)
        if ad.sequence == "exact":
            lo, hi = sequences.prpl_eb_cs(diff, alpha)
        else:
            lo, hi = sequences.asymptotic_cs(diff, alpha, t_star=ad.max)
        d.seeds = len(seeds)
        d.lo.append(float(lo[-1]))
        d.hi.append(float(hi[-1]))
        d.at.append(len(seeds))
        verdict = sequences.decide(lo, hi, ad.equivalence)
        if verdict != OPEN:
            d.decision, d.round = verdict, r


def active_pairs(decisions: dict[tuple, Decision]) -> set[tuple[str, str]]:
    """(row, dataset) of the comparisons still open: both sides of each, on its dataset."""
    return {(x, d.dataset) for d in decisions.values() if d.decision == OPEN
            for x in (d.row, d.baseline)}


def store_values(ad: AdaptiveSeeds, plan: PlanRows, results_dir: str | Path,
                 study: str) -> pd.DataFrame:
    """The metric per (row, dataset, split, seed) from the study's store (status ok); empty
    before the first result file. A store the report cannot read (a foreign or damaged file)
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
    col = METRICS[ad.metric]
    if ok.empty or col not in ok.columns:
        return empty
    ok = ok[ok["trial_id"].isin(plan.row_of)]
    out = pd.DataFrame({"row": ok["trial_id"].map(plan.row_of), "dataset": ok["dataset"],
                        "split": ok["split"], "seed": ok["seed"].astype(int),
                        "value": ok[col].astype(float)})
    return out.dropna(subset=["value"]).groupby(["row", "dataset", "split", "seed"],
                                                as_index=False)["value"].mean()


@dataclass
class Rounds:
    """An adaptive study's rounds as they are decided: the decisions, the (row, dataset) pairs
    still trained and the seed runs run and saved (`run_adaptive`, `replay_plan`)."""

    ad: AdaptiveSeeds
    trials: list  # every round's trials (`expand_rounds`)
    plan: PlanRows
    decisions: dict[tuple, Decision]
    left_out: list[LeftOut]
    active: set[tuple[str, str]]  # (row, dataset) pairs the next round trains
    round: int = 0  # the last round decided
    seed_runs: int = 0  # of the rounds decided
    saved: int = 0  # seed runs of the rounds decided that decided pairs did not need

    @classmethod
    def start(cls, ad: AdaptiveSeeds, trials: list) -> Rounds:
        plan = plan_rows(trials)
        return cls(ad, trials, plan, initial_decisions(ad, plan), left_out(ad, plan),
                   {_pair(plan, t) for t in trials})

    def round_trials(self, r: int, every: bool = False) -> list:
        """The trials of round `r` for the pairs still trained (`every`: for all pairs)."""
        seeds = set(self.ad.round_seeds(r))
        return [t for t in self.trials if set(t.config.seeds) <= seeds
                and (every or _pair(self.plan, t) in self.active)]

    def decide(self, r: int, values: pd.DataFrame) -> None:
        """Round `r` has run: its seed runs counted, its decisions made from `values`."""
        ran = sum(len(t.config.seeds) for t in self.round_trials(r))
        self.seed_runs += ran
        self.saved += sum(len(t.config.seeds) for t in self.round_trials(r, every=True)) - ran
        decide_round(self.ad, self.plan, values, max(self.ad.round_seeds(r)) + 1, r,
                     self.decisions)
        self.active = active_pairs(self.decisions)
        self.round = r

    @property
    def seed_runs_max(self) -> int:
        return sum(len(t.config.seeds) for t in self.trials)

    @property
    def finished(self) -> bool:
        """Every comparison closed, or the last round run: nothing more to train."""
        return not self.active or self.round == self.ad.rounds

    def counts(self) -> dict[str, int]:
        """Comparisons decided, open and absent (their split not made)."""
        states = [d.decision for d in self.decisions.values()]
        n_open, n_absent = states.count(OPEN), states.count(ABSENT)
        return {"decided": len(states) - n_open - n_absent, "open": n_open, "absent": n_absent}

    def seed_words(self) -> str:
        """The seed runs so far, in words: saved only once nothing more will run."""
        if self.finished:
            return (f"{self.seed_runs} of {self.seed_runs_max} seed runs "
                    f"({self.seed_runs_max - self.seed_runs} saved)")
        later = self.seed_runs_max - self.seed_runs - self.saved
        return (f"{self.seed_runs} of at most {self.seed_runs_max} seed runs so far "
                f"({self.saved} saved, {later} not run yet)")

    def write(self, path: Path) -> None:
        """The decisions after the last round, for the report (`analysis` reads DECISIONS_FILE)."""
        from ablate.atomic import atomic_write
        from analysis.sequences import per_comparison_alpha

        doc = {"options": {**asdict(self.ad), "split": list(self.ad.split)}, "round": self.round,
               "alpha_per_comparison": per_comparison_alpha(self.ad.alpha,
                                                            max(1, len(self.decisions))),
               "seed_runs": self.seed_runs, "seed_runs_max": self.seed_runs_max,
               "seed_runs_saved": self.saved, "finished": self.finished,
               "comparisons": [asdict(d) for d in self.decisions.values()],
               "left_out": [asdict(x) for x in self.left_out]}
        atomic_write(path, lambda f: f.write(json.dumps(doc, indent=1).encode()))


def _pair(plan: PlanRows, trial) -> tuple[str, str]:
    return plan.row_of[trial.trial_id], trial.config.dataset


def replay_plan(ad: AdaptiveSeeds, trials: list, status: dict[str, str],
                results_dir: str | Path, study: str) -> list:
    """The trials of the rounds the store's decisions call for, replayed as `run_adaptive`
    makes them: every round whose trials all have a result (ok or failed), then the first one
    that does not (the round a rerun goes on with). `status`: trial id -> status."""
    rounds = Rounds.start(ad, trials)
    values = store_values(ad, rounds.plan, results_dir, study)
    out = []
    for r in range(1, ad.rounds + 1):
        todo = rounds.round_trials(r)
        out += todo
        if any(t.trial_id not in status for t in todo):
            break
        rounds.decide(r, values)
        if not rounds.active:
            break
    return out
