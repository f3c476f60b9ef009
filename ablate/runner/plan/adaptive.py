"""Adaptive seeds: a study that adds seeds only where a comparison is still open (issue 43).

`seeds: {adaptive: {...}}` in a study file, or `seeds=adaptive` on the command line (the
defaults below). Round 1 trains seeds 0 .. start-1 of every row; after each round the driver
reads the store, updates one anytime-valid confidence sequence (`analysis.sequences`) per
comparison, and the next round adds `step` seeds to the rows of the comparisons still open
(both rows of a comparison; a row shared by several runs once), until every comparison is
decided or has `max` seeds.

The comparisons are the report's: each row against its one-axis baseline
(`analysis.variants.comparisons`), paired by seed, on `metric` at `split` (per dataset; by
default its generalisation split: COLORS LARGE-C, TRIANGLES LARGE, MNIST-75SP NOISY, TU
test_large). A comparison is decided when its sequence excludes 0 (a difference, with its
sign) or lies inside +-`equivalence` (no difference that large); else it stays open. Alpha
is split over the study's comparisons (Bonferroni, valid for confidence sequences under any
dependence and stopping rule: `analysis.sequences.per_comparison_alpha`).

Everything a round does is decided from the seeds of the rounds before it, in seed order, so
Ctrl-C and a rerun replay the same decisions from the store and continue where it stopped.
Trials are built per round (its seeds, packed by `seeds_per_trial` within the round), so
their ids are the same on every rerun and the store skips what it holds.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ablate.errors import ConfigError

SEQUENCES = ("asymptotic", "exact")  # analysis.sequences.asymptotic_cs / prpl_eb_cs
METRICS = {"accuracy": "accuracy", "auc": "attn_auc_l0"}
# splits each dataset produces (the graph datasets' generators) and the default, its
# generalisation split (the papers' headline column)
DATASET_SPLITS: dict[str, tuple[str, ...]] = {
    "colors": ("test_largec", "test_orig", "test_large"),
    "triangles": ("test_large", "test_orig"),
    "mnist_sp": ("test_noisy", "test_orig", "test_noisyc"),
    "digits_sp": ("test_noisy", "test_orig", "test_noisyc"),
    "proteins": ("test_large", "test_orig"), "dd": ("test_large", "test_orig"),
    "collab": ("test_large", "test_orig"),
}
DECISIONS_FILE = "adaptive.json"


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

    def round_seeds(self, r: int) -> list[int]:
        """The seeds round `r` (1-based) adds: 0..start-1, then `step` more each round."""
        if r == 1:
            return list(range(self.start))
        lo = self.start + (r - 2) * self.step
        return list(range(lo, min(lo + self.step, self.max)))

    @property
    def rounds(self) -> int:
        return 1 + -(-(self.max - self.start) // self.step)


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
    if isinstance(opts.get("split"), str):
        opts["split"] = (opts["split"],)
    if "split" in opts:
        opts["split"] = tuple(opts["split"])
    ad = AdaptiveSeeds(**opts)
    _check(ad)
    return ad


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


def check_study(ad: AdaptiveSeeds, trials: list) -> None:
    """What only the expanded study can tell: graph trials, splits its datasets produce, a
    metric they record, at least one comparison. One `ConfigError` line each."""
    kinds = {getattr(t, "kind", "graph") for t in trials}
    if kinds - {"graph"}:
        raise ConfigError("seeds: adaptive seeds compare graph-model rows; this study's trials "
                          f"are of kind {sorted(kinds)}")
    datasets = sorted({t.config.dataset for t in trials})
    for d in datasets:
        produced = DATASET_SPLITS.get(d, ())
        bad = [s for s in ad.split if s not in produced]
        if ad.split and len(bad) == len(ad.split):
            raise ConfigError(f"seeds.adaptive.split {list(ad.split)}: dataset {d} produces "
                              f"{', '.join(produced)}")
    if ad.metric == "auc" and not any(t.config.pool_layers for t in trials):
        raise ConfigError("seeds.adaptive.metric=auc: no row of this study has an attention "
                          "layer to score")
    if not plan_rows(trials).comparisons:
        raise ConfigError("seeds: adaptive needs rows to compare (rows that differ in one "
                          "axis); this study has none")


def splits_for(ad: AdaptiveSeeds, dataset: str) -> list[str]:
    produced = DATASET_SPLITS.get(dataset, ("test_large",))
    return [s for s in ad.split if s in produced] if ad.split else [produced[0]]


@dataclass
class PlanRows:
    """The report's rows and one-axis comparisons, computed from the planned trials."""

    row_of: dict[str, str]  # trial id -> row label
    comparisons: list[tuple[str, str, str]]  # (row, baseline, axis)
    datasets: dict[str, list[str]] = field(default_factory=dict)  # row -> datasets


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
    return PlanRows(row_of, pairs, datasets)


@dataclass
class Decision:
    """One comparison on one dataset and split, after a round."""

    row: str
    baseline: str
    axis: str
    dataset: str
    split: str
    seeds: int = 0
    decision: str = "open"  # greater / less / equivalent / open
    round: int = 0  # the round that decided it (0: open)
    lo: list[float] = field(default_factory=list)  # the sequence at each look
    hi: list[float] = field(default_factory=list)
    at: list[int] = field(default_factory=list)  # seeds at each look

    @property
    def key(self) -> tuple:
        return (self.row, self.baseline, self.dataset, self.split)


def decide_round(ad: AdaptiveSeeds, plan: PlanRows, values, upto: int, r: int,
                 decisions: dict[tuple, Decision]) -> None:
    """Update every open decision with the seeds < `upto` (those of rounds <= r). `values`:
    a DataFrame with row, dataset, split, seed, value (the metric in [0, 1])."""
    import numpy as np

    from analysis import sequences

    m = max(1, len(decisions))
    alpha = sequences.per_comparison_alpha(ad.alpha, m)
    v = values[values["seed"] < upto]
    by = {k: g.set_index("seed")["value"] for k, g in v.groupby(["row", "dataset", "split"])}
    for d in decisions.values():
        if d.decision != "open":
            continue
        a, b = by.get((d.row, d.dataset, d.split)), by.get((d.baseline, d.dataset, d.split))
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
        if verdict != "open":
            d.decision, d.round = verdict, r


def initial_decisions(ad: AdaptiveSeeds, plan: PlanRows) -> dict[tuple, Decision]:
    out = {}
    for row, base, axis in plan.comparisons:
        for ds in sorted(set(plan.datasets.get(row, [])) & set(plan.datasets.get(base, []))):
            for split in splits_for(ad, ds):
                d = Decision(row, base, axis, ds, split)
                out[d.key] = d
    return out


def active_rows(decisions: dict[tuple, Decision]) -> set[str]:
    """Rows of the comparisons still open: both sides of each."""
    return {x for d in decisions.values() if d.decision == "open" for x in (d.row, d.baseline)}


def store_values(ad: AdaptiveSeeds, plan: PlanRows, results_dir: str | Path, study: str):
    """The metric per (row, dataset, split, seed) from the study's store (status ok)."""
    import pandas as pd

    from analysis.load import StoreError, load_study

    try:
        ok = load_study(study, Path(results_dir) / study).ok
    except StoreError:
        ok = pd.DataFrame()
    col = METRICS[ad.metric]
    if ok.empty or col not in ok.columns:
        return pd.DataFrame(columns=["row", "dataset", "split", "seed", "value"])
    ok = ok[ok["trial_id"].isin(plan.row_of)]
    out = pd.DataFrame({"row": ok["trial_id"].map(plan.row_of), "dataset": ok["dataset"],
                        "split": ok["split"], "seed": ok["seed"].astype(int),
                        "value": ok[col].astype(float)})
    return out.dropna(subset=["value"]).groupby(["row", "dataset", "split", "seed"],
                                                as_index=False)["value"].mean()


def write_decisions(path: Path, ad: AdaptiveSeeds, decisions: dict[tuple, Decision], r: int,
                    seeds_run: int, seeds_max: int) -> None:
    """The decisions after round `r`, for the report (`analysis` reads DECISIONS_FILE)."""
    from ablate.atomic import atomic_write

    doc = {"options": {**asdict(ad), "split": list(ad.split)}, "round": r,
           "alpha_per_comparison": ad.alpha / max(1, len(decisions)),
           "seed_runs": seeds_run, "seed_runs_max": seeds_max,
           "comparisons": [asdict(d) for d in decisions.values()]}
    atomic_write(path, lambda f: f.write(json.dumps(doc, indent=1).encode()))
