"""Adaptive seeds' options: `seeds: {adaptive: {...}}` parsed and checked (issue 43, 54).

The keys, their defaults and the splits each dataset's comparisons are decided on; the rounds
and decisions are `ablate.runner.plan.adaptive` and `adaptive_rounds`. Bad values are one
`ConfigError` line (exit 2, before Ray).
"""

from __future__ import annotations

from dataclasses import dataclass

from ablate.errors import ConfigError, did_you_mean

# analysis.betting.betting_cs (exact, the default), analysis.sequences.asymptotic_cs
# (approximate: fails on skewed and collapsing seeds, docs/performance.md) / prpl_eb_cs (exact)
SEQUENCES = ("betting", "asymptotic", "prpl_eb")
# fewest seeds each sequence can say anything at (the asymptotic one: its t_min)
MIN_START = {"betting": 2, "asymptotic": 10, "prpl_eb": 2}
# the store column each metric decides on: for auc the report's AUC column, the first pooling
# layer's AUC over the nodes of all test graphs of a seed together (analysis.reference.POOLED_AUC,
# on every split's row of the seed); FALLBACK where a store has no such value
METRICS = {"accuracy": "accuracy", "auc": "attn_auc_pooled_l0"}
FALLBACK = {"auc": "attn_auc_l0"}
# metric=auc: one value per seed whatever the split (the pooled AUC is on every split's row), so
# a comparison is decided once per dataset, on the report's AUC column: its decisions' `split`
# is AUC_DECIDED (analysis.reference.AUC_COLUMN) and its values are read from the seed's
# AUC_ROW_SPLIT row (analysis.reference.AUC_SPLIT), where the report reads them, FALLBACK too
# (tests/test_adaptive_auc.py keeps the names equal; analysis is imported lazily here)
AUC_DECIDED = "auc"
AUC_ROW_SPLIT = "test_orig"
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

    # start, max: from the simulation (docs/performance.md#adaptive-seeds-in-simulation): at
    # the Bonferroni share of 13 comparisons the betting sequence decides a 90-point difference
    # at 13 seeds, a 30-point one at 31-37 (its floor: 10 and 24); start 10 = the fixed study
    start: int = 10  # seeds of every row in round 1
    step: int = 2  # seeds added per round to the rows of open comparisons
    max: int = 40  # most seeds a row can get
    alpha: float = 0.05  # family-wise, over all the study's comparisons
    equivalence: float = 0.01  # |difference| below this (accuracy 0-1: 1 point) is "no difference"
    metric: str = "accuracy"  # accuracy or auc (attention AUC of the first pooling layer)
    split: tuple[str, ...] = ()  # () = each dataset's generalisation split
    sequence: str = "betting"  # exact; or asymptotic (approximate), prpl_eb (exact, wider)

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
    if ad.sequence == "exact":  # the name before issue 54
        raise ConfigError("seeds.adaptive.sequence 'exact' is now called 'prpl_eb' (the default "
                          f"'betting' is exact too); valid: {', '.join(SEQUENCES)}")
    if ad.sequence not in SEQUENCES:
        raise ConfigError(f"seeds.adaptive.sequence must be one of {', '.join(SEQUENCES)}, got "
                          f"{ad.sequence!r}{did_you_mean(ad.sequence, SEQUENCES)}")
    low = MIN_START[ad.sequence]
    if ad.start is not None and isinstance(ad.start, int) and not isinstance(ad.start, bool) \
            and 2 <= ad.start < low:
        raise ConfigError(f"seeds.adaptive.start ({ad.start}) is below what sequence "
                          f"{ad.sequence} supports: it says nothing before {low} seeds; use "
                          f"start >= {low} or sequence=betting")
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


def made_splits(dataset: str) -> tuple[str, ...]:
    """Every split `dataset` can make: always, then only with some recipes."""
    return DATASET_SPLITS[dataset] + CONDITIONAL_SPLITS.get(dataset, ())


def splits_for(ad: AdaptiveSeeds, dataset: str) -> list[str]:
    """The splits asked for that `dataset` makes, else its default (for metric=auc only
    checked: see `decided_splits`)."""
    if ad.split:
        return [s for s in ad.split if s in made_splits(dataset)]
    return [DATASET_SPLITS[dataset][0]]


def decided_splits(ad: AdaptiveSeeds, dataset: str) -> list[str]:
    """What each comparison on `dataset` is decided on, one decision each: the splits of
    `splits_for` for accuracy; for metric=auc the AUC column alone (`AUC_DECIDED`), whatever
    `split` lists, since a seed's pooled AUC is the same on every split: deciding it once per
    split would decide one comparison several times and split alpha over the copies."""
    if ad.metric == "auc":
        return [AUC_DECIDED] if splits_for(ad, dataset) else []
    return splits_for(ad, dataset)
