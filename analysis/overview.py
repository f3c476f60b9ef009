"""The overview of a study: what varied, how many trials and runs are ok, failed or
missing, the missing pieces, the most common failures, training time and code versions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from analysis.load import AXES, NO_LR_DROP, Study
from analysis.variants import ATTENTION_AXES, MAX_ROW_VALUES

DESCRIBED_AXES = tuple(a for a in AXES if a != "seeds")


@dataclass
class Overview:
    """Status counts, what varied, and what is missing."""

    varied: list[str]
    counts: dict[str, int]
    missing: list[str]
    errors: list[tuple[str, int]]
    provenance: list[str] = field(default_factory=list)


def _seed_list(s: object) -> list[int]:
    try:
        return [int(x) for x in str(s).split(",") if x.strip() != ""]
    except ValueError:
        return []


def _data_params_varied(col: pd.Series) -> list[str]:
    """The dataset recipe parameters that varied, one line each (`data.KEY: values`), not one
    JSON text per combination; a cross-validation fold, pooled like the seed, as its count."""
    import json

    from analysis.variants import parse_data_params

    values: dict[str, set[str]] = {}
    parsed_all = [parse_data_params(text) for text in col.dropna().astype(str).unique()]
    for parsed in parsed_all:
        for k, v in parsed.items():
            values.setdefault(k, set()).add(json.dumps(v) if isinstance(v, list | dict) else str(v))
    out = []
    for k in sorted(values):
        vals = values[k]
        if any(k not in p for p in parsed_all):  # some combinations leave it at the default
            vals = vals | {"default"}
        if len(vals) < 2:
            continue
        if k == "fold":
            folds = sorted(int(v) for v in vals if v.lstrip("-").isdigit())
            which = (f"{folds[0]}–{folds[-1]}" if folds == list(range(folds[0], folds[-1] + 1))
                     else ", ".join(map(str, folds))) if folds else ""
            out.append(f"data.fold: {len(folds)} cross-validation folds ({which}), pooled like "
                       "seeds" if folds else f"data.fold: {', '.join(sorted(vals))}")
            continue
        shown = sorted(vals, key=_numbers_first)
        more = f", … ({len(shown)} values)" if len(shown) > MAX_ROW_VALUES else ""
        out.append(f"data.{k}: " + ", ".join(shown[:MAX_ROW_VALUES]) + more)
    return out


def _numbers_first(text: str) -> tuple:
    """Sort key of a value's text: numbers in numeric order, then the rest ('default' last)."""
    try:
        return (0, float(text), text)
    except ValueError:
        return (1 + (text == "default"), 0.0, text)


# Attention settings that a row with attention uses only under some other setting, as
# `ablate.config.inapplicable` says (the analysis imports nothing from ablate; a test checks
# the two agree): axis -> the rows on which it is inert.
INERT_WHEN = {
    "ratio": lambda df: df["selection"] == "threshold",
    "threshold": lambda df: df["selection"] != "threshold",
    "kl_weight": lambda df: df["supervision"].isin(["unsup", "gt"]),
    "normalizer": lambda df: df["selection"] == "gao",
    "scorer": lambda df: df["selection"] == "gao",
    "scorer_input": lambda df: df["selection"] == "gao",
    "scorer_relu": lambda df: (df["selection"] == "gao") | (df["scorer"] != "gnn"),
}
INERT_READS = {"ratio": ("selection",), "threshold": ("selection",), "kl_weight": ("supervision",),
               "normalizer": ("selection",), "scorer": ("selection",),
               "scorer_input": ("selection",), "scorer_relu": ("selection", "scorer")}


def _used_values(df: pd.DataFrame, axis: str) -> pd.Series:
    """`axis`'s column on the rows whose trial uses it: an attention axis (`ATTENTION_AXES`:
    global-pool rows store the defaults, which train nothing) on rows with attention, and of
    those not on the rows where another setting makes it inert (`INERT_WHEN`: the ratio under
    threshold selection, the threshold under top-k, the KL weight without a KL term, ...);
    `lr_timing` on rows whose trial drops an LR (the others read `NO_LR_DROP`); every row
    for any other axis. A value a row does not use is no part of the study's design."""
    col = df[axis]
    if axis in ATTENTION_AXES and "pool_layers" in df.columns:
        col = col[df["pool_layers"] != ""]
    if axis in INERT_WHEN and all(c in df.columns for c in INERT_READS[axis]):
        col = col[~INERT_WHEN[axis](df.loc[col.index])]
    if axis == "lr_timing":
        col = col[col.astype(str) != NO_LR_DROP]
    return col


def overview(study: Study) -> Overview:
    """What varied (an axis with two or more values among the rows that use it:
    `_used_values`), ok/failed/missing counts and the missing pieces of a study."""
    df = study.trials
    varied = []
    for a in DESCRIBED_AXES:
        if a == "data_params" and a in df.columns:
            varied += _data_params_varied(df[a])
            continue
        if a in df.columns:
            vals = _used_values(df, a).dropna().unique()
            if len(vals) > 1:
                if len(vals) > MAX_ROW_VALUES and pd.api.types.is_numeric_dtype(df[a]):
                    varied.append(f"{a}: {len(vals)} values in [{np.min(vals):g}, "
                                  f"{np.max(vals):g}] (continuous)")
                else:
                    shown = sorted(str(v) if str(v) != "" else "(none)" for v in vals)
                    more = f", … ({len(shown)} values)" if len(shown) > MAX_ROW_VALUES else ""
                    varied.append(f"{a}: " + ", ".join(shown[:MAX_ROW_VALUES]) + more)
    seeds = sorted(df["seed"].unique())
    if len(seeds) > 1:
        varied.append(f"seed: {len(seeds)} seeds ({seeds[0]}–{seeds[-1]})")
    run_status = df["status"].eq("ok").groupby([df["trial_id"], df["seed"]]).all()
    trial_all = run_status.groupby(level=0).all()
    trial_any = run_status.groupby(level=0).any()
    counts = {
        "trial files": study.n_files,
        "trials ok": int(trial_all.sum()),
        "trials partly failed": int((trial_any & ~trial_all).sum()),
        "trials failed": int((~trial_any).sum()),
        "runs ok": int(run_status.sum()),
        "runs failed": int((~run_status).sum()),
        "rows": len(df),
    }
    if study.failed_attempts:
        counts["failed attempts logged"] = study.failed_attempts
    missing: list[str] = []
    if study.planned is not None:
        absent = sorted(set(study.planned) - set(df["trial_id"].unique()))
        counts["trials planned by the latest run"] = len(study.planned)
        counts["of those, missing"] = len(absent)
        if absent:
            missing.append(f"{len(absent)} planned trial(s) have no result file yet: "
                           + ", ".join(absent[:8]) + (" …" if len(absent) > 8 else ""))
    if "seeds" in df.columns:
        declared = df.drop_duplicates("trial_id")[["trial_id", "seeds"]]
        have = df.groupby("trial_id")["seed"].agg(lambda s: set(s.tolist()))
        lost = {}
        for t, s in zip(declared["trial_id"].tolist(), declared["seeds"].tolist()):
            gone = sorted(set(_seed_list(s)) - have.get(t, set()))
            if gone:
                lost[t] = gone
        if lost:
            n = sum(len(s) for s in lost.values())
            counts["runs missing"] = n
            ex = "; ".join(f"{t}: seeds {', '.join(map(str, s))}" for t, s in list(lost.items())[:5])
            missing.append(f"{n} run(s) packed in {len(lost)} trial(s) have no rows: {ex}")
    ok = df[df["status"] == "ok"]
    if not ok.empty:
        n_split = ok.groupby(["dataset", "trial_id", "seed"])["split"].nunique()
        expected = ok.groupby("dataset")["split"].nunique()
        short = n_split[n_split.to_numpy() < expected.reindex(
            n_split.index.get_level_values(0)).to_numpy()]
        if len(short):
            d, t, sd = short.index[0]
            lacking = set(ok.loc[ok["dataset"] == d, "split"]) - set(
                ok.loc[(ok["trial_id"] == t) & (ok["seed"] == sd), "split"])
            missing.append(f"{len(short)} finished run(s) lack some splits, e.g. trial {t} "
                           f"seed {sd}: " + ", ".join(sorted(lacking)))
        if not study.curves.empty:
            runs = ok[["trial_id", "seed"]].drop_duplicates()
            have_c = study.curves[["trial_id", "seed"]].drop_duplicates()
            m = runs.merge(have_c, how="left", indicator=True)
            n_no = int((m["_merge"] == "left_only").sum())
            if n_no:
                missing.append(f"{n_no} finished run(s) have no training curves")
    errors = []
    bad = df[df["status"] != "ok"].drop_duplicates(["trial_id", "seed"])
    if not bad.empty:
        msg = (bad["status"] + ": " + bad["error"].str.slice(0, 160)).value_counts()
        errors = [(str(m), int(c)) for m, c in msg.head(5).items()]
    prov = []
    if "train_s" in df.columns:
        runs = df.drop_duplicates(["trial_id", "seed"])
        t = runs["train_s"].to_numpy(dtype=float)
        t = t[np.isfinite(t)]
        if t.size:
            total = t.sum()
            spent = (f"{total / 3600:.1f} h" if total >= 3600 else f"{total / 60:.1f} min"
                     if total >= 60 else f"{total:.0f} s")
            prov.append(f"training time: {spent} in total, median {np.median(t):.1f} s per run")
    prov += _devices(df)
    if "git_sha" in df.columns:
        shas = [x for x in df["git_sha"].dropna().unique().tolist() if x]
        if shas:
            prov.append("code version(s): " + ", ".join(sorted(map(str, shas))[:5])
                        + (" …" if len(shas) > 5 else ""))
    if "git_dirty" in df.columns:
        dirty = sorted({str(x) for x in df["git_dirty"].dropna().unique().tolist() if x})
        if dirty:
            runs = df[df["git_dirty"].fillna("").astype(str) != ""].drop_duplicates(
                ["trial_id", "seed"])
            prov.append(f"uncommitted code: {len(runs)} run(s) trained from a modified tree "
                        f"({', '.join(dirty[:3])}{' …' if len(dirty) > 3 else ''}), not the "
                        "commit named")
    return Overview(varied, counts, missing, errors, prov)


def _devices(df: pd.DataFrame) -> list[str]:
    """One line: the runs per device (GPU name, CUDA and driver versions) and the largest
    peak GPU memory of each GPU's trials."""
    if "gpu_name" not in df.columns:
        return []
    runs = df.drop_duplicates(["trial_id", "seed"])
    name = runs["gpu_name"].fillna("").astype(str)
    cuda = runs.get("cuda_version", pd.Series("", index=runs.index)).fillna("").astype(str)
    driver = runs.get("gpu_driver", pd.Series("", index=runs.index)).fillna("").astype(str)
    peak = pd.to_numeric(runs.get("peak_gpu_mb", pd.Series(np.nan, index=runs.index)),
                         errors="coerce")
    label = pd.Series([
        "CPU (or not recorded)" if not n else
        f"{n} (CUDA {c or '?'}, driver {d or '?'})" for n, c, d in zip(name, cuda, driver)],
        index=runs.index)
    parts = []
    for lab, idx in label.groupby(label).groups.items():
        top = peak.loc[idx].max()
        mem = f", peak GPU memory up to {top:.0f} MB" if np.isfinite(top) else ""
        parts.append(f"{lab}: {len(idx)} run(s){mem}")
    return ["devices: " + "; ".join(sorted(parts))] if parts else []


def rows_missing_seeds(ok: pd.DataFrame, expected: dict[tuple[str, str], int] | None = None,
                       default: int = 0) -> list[str]:
    """The rows that lack some of the seeds the other rows have; on an adaptive-seed study
    (`expected`: (row, dataset) -> the seeds its rounds called for, `default` for a pair not
    named, `adaptive_decisions.expected_seeds`), the (row, dataset) pairs that lack some of
    the seeds 0 .. n-1 their rounds called for: a row the sequence stopped early is not
    short of seeds. Runs that are folds of a k-fold cross-validation are checked by their
    (partition, fold, seed) units instead (`_missing_fold_runs`): a row that lacks fold 3 of
    seed 1 is short though seed 1 ran on its other folds."""
    from analysis.variants import cv_folds, cv_partitions

    if "data_params" in ok.columns and len(ok):
        (fold, k), split = cv_folds(ok["data_params"]), cv_partitions(ok["data_params"])
        is_cv = np.isfinite(fold)
        if is_cv.any():
            runs = pd.DataFrame({"row": ok["row"].to_numpy(), "dataset": ok["dataset"].to_numpy(),
                                 "k": k, "p": split, "f": fold, "s": ok["seed"].to_numpy()})
            rest = ok[~is_cv]
            return ((_missing_seeds(rest, expected, default) if len(rest) else [])
                    + _missing_fold_runs(runs[is_cv], expected, default))
    return _missing_seeds(ok, expected, default)


def _missing_seeds(ok: pd.DataFrame, expected: dict[tuple[str, str], int] | None,
                   default: int) -> list[str]:
    """`rows_missing_seeds` by seed."""
    if expected is None:
        seeds = ok.groupby("row")["seed"].agg(set)
        if seeds.empty:
            return []
        full = set().union(*seeds)
        return [f"{r}: {len(s)} of {len(full)} seeds (missing "
                f"{', '.join(map(str, sorted(full - s)))})" for r, s in seeds.items() if full - s]
    out = []
    for (r, d), s in ok.groupby(["row", "dataset"], sort=False)["seed"].agg(set).items():
        want = set(range(expected.get((r, d), default)))
        if want - s:
            out.append(f"{r} on {d}: {len(want & s)} of the {len(want)} seeds its adaptive "
                       f"rounds called for (missing {', '.join(map(str, sorted(want - s)))})")
    return out


MAX_NAMED = 8  # missing (fold, seed) runs named per row


def _missing_fold_runs(runs: pd.DataFrame, expected: dict[tuple[str, str], int] | None,
                       default: int) -> list[str]:
    """`rows_missing_seeds` of cross-validated runs (`runs`: row, dataset, k, partition p,
    fold f, seed s): per dataset (and k), the (partition, fold, seed) units some row has and
    a row lacks (on an adaptive study, those of the seeds 0 .. n-1 its rounds called for, and
    such seeds no row ran)."""
    runs = runs.assign(f=runs["f"].astype(int), s=runs["s"].astype(int)).drop_duplicates()
    out = []
    for (d, _), on in runs.groupby(["dataset", "k"], sort=False):
        full = set(on[["p", "f", "s"]].itertuples(index=False, name=None))
        for r, g in on.groupby("row", sort=False):
            have = set(g[["p", "f", "s"]].itertuples(index=False, name=None))
            if expected is None:
                want, unrun = full, []
                what = f"{len(have)} of {len(full)} (fold, seed) runs"
            else:
                n = expected.get((r, d), default)
                want = {u for u in full if u[2] < n}
                unrun = sorted(set(range(n)) - {u[2] for u in want})
                what = (f"{len(want & have)} of the {len(want)} (fold, seed) runs of the {n} "
                        "seeds its adaptive rounds called for")
            names = [f"seed {s} (no run)" for s in unrun] + _unit_names(want - have, want)
            if names:
                more = f", … ({len(names)} in all)" if len(names) > MAX_NAMED else ""
                out.append(f"{r} on {d}: {what} (missing {', '.join(names[:MAX_NAMED])}{more})")
    return out


def _unit_names(gone: set, want: set) -> list[str]:
    """The missing (partition, fold, seed) units as text, "fold 3 seed 1" ("of partition p"
    where the partition is not the seed's own); a seed missing from every fold it has
    elsewhere as one "seed 1 (all its 10 folds)"."""
    out = []
    for s in sorted({u[2] for u in gone}):
        units = {u for u in gone if u[2] == s}
        if len(units) > 1 and units == {u for u in want if u[2] == s}:
            out.append(f"seed {s} (all its {len(units)} folds)")
            continue
        out += [f"fold {f} seed {s}" + (f" of partition {p}" if p not in ("", str(s)) else "")
                for p, f, _ in sorted(units)]
    return out
