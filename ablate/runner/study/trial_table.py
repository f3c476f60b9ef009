"""What a dry run shows: the trial table (the axes that vary) and the axes fixed across it."""

from __future__ import annotations

from ablate.runner.study.expand import Study
from ablate.runner.study.kinds import trial_kind


def trial_table(study: Study, done: set[str] = frozenset()):
    """The trials as a DataFrame: trial_id, the axes that vary, seeds, and whether done."""
    import pandas as pd

    rows = []
    for t in study.trials:
        kind = trial_kind(t.kind)
        a = kind.columns(t.config)
        a.pop("study", None)
        for k in kind.inapplicable(t.config):  # blank what does not change this trial
            a[k] = None
        if "pool_layers" in a:
            a["pool_layers"] = a["pool_layers"] or "global"
        a["seeds"] = _seed_text(getattr(t.config, "seeds", ()))
        rows.append({"trial_id": t.trial_id, **a, "done": t.trial_id in done})
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    varying = [c for c in df.columns if c in ("trial_id", "seeds", "done")
               or df[c].dropna().astype(str).nunique() > 1]
    return df[varying].astype(object).where(df[varying].notna(), "").rename(columns=_SHORT)


_SHORT = {"aggregation": "agg", "scorer_input": "input", "supervision": "superv",
          "lr_decay_epochs": "lr_decay", "init_dist": "init", "init_scale": "scale"}


def _seed_text(seeds) -> str:
    """'0-4' for a run of consecutive seeds, else '0,3,7'."""
    seeds = list(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}-{seeds[-1]}"
    return ",".join(str(s) for s in seeds)


def fixed_axes(study: Study) -> dict:
    """Axes with one value across every trial (shown above the dry-run table)."""
    if not study.trials:
        return {}
    rows = []
    for t in study.trials:
        kind = trial_kind(t.kind)
        skip = kind.inapplicable(t.config)
        rows.append({k: v for k, v in kind.columns(t.config).items() if k not in skip})
    out = {}
    for k in rows[0].keys() | {k for r in rows for k in r}:
        values = {str(r[k]) for r in rows if k in r}
        if k not in ("study", "seeds") and len(values) == 1:
            v = next(r[k] for r in rows if k in r)
            if v not in ("{}", ""):
                out[k] = v
    order = list(trial_kind(study.trials[0].kind).columns(study.trials[0].config))
    return dict(sorted(out.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else 99))
