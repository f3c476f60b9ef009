"""An adaptive study's rounds and their decisions, frozen per round (issue 43, 54).

`Rounds` holds the decisions after each round, the (row, dataset) pairs each round trains and
the seed runs counted. The decisions file (`adaptive.json`) is written when a round ends; a
rerun replays the rounds it holds exactly (`resume`): their decisions are not recomputed from
values that arrived later (a retried seed counts in the next round's look), so a rerun after a
failure writes the same file. `force=true` drops them (`dropped` says which).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ablate.runner.plan.adaptive import (
    DECISIONS_FILE,
    OPEN,
    AdaptiveSeeds,
    Decision,
    LeftOut,
    PlanRows,
    decide_round,
    initial_decisions,
    left_out,
    plan_rows,
    row_pair,
    sequence_alpha,
)

if TYPE_CHECKING:
    import pandas as pd


def options_doc(ad: AdaptiveSeeds) -> dict:
    """The options as the decisions file records them."""
    return {**asdict(ad), "split": list(ad.split)}


def read_stored(path: Path) -> dict | None:
    """The decisions file at `path`, None when there is none; a file that is not JSON gives
    {"unreadable": why}. An OSError reading it is the caller's (exit 3)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(text)
    except ValueError as e:
        return {"unreadable": f"not JSON ({e})"}
    return doc if isinstance(doc, dict) else {"unreadable": "not a JSON object"}


@dataclass
class Rounds:
    """An adaptive study's rounds as they are decided: the decisions, the (row, dataset) pairs
    trained and the seed runs run and saved (`run_adaptive`, `replay_plan`)."""

    ad: AdaptiveSeeds
    trials: list  # every round's trials (`expand_rounds`)
    plan: PlanRows
    decisions: dict[tuple, Decision]
    left_out: list[LeftOut]
    round: int = 0  # the last round decided (or replayed)
    seed_runs: int = 0  # of the rounds decided
    saved: int = 0  # seed runs of the rounds decided that decided pairs did not need
    frozen: int = 0  # rounds replayed from the decisions file, not decided again

    @classmethod
    def start(cls, ad: AdaptiveSeeds, trials: list) -> Rounds:
        plan = plan_rows(trials)
        return cls(ad, trials, plan, initial_decisions(ad, plan), left_out(ad, plan))

    def resume(self, doc: dict | None) -> str:
        """Take the decisions of the rounds a decisions file holds (they are replayed, not
        decided again); '' when taken or there is none, else why they cannot be."""
        if doc is None:
            return ""
        if "unreadable" in doc:
            return f"the decisions file is {doc['unreadable']}"
        if doc.get("options") != options_doc(self.ad):
            return "they were made with other seeds.adaptive options"
        comps = doc.get("comparisons") or []
        if any("order" not in c for c in comps):
            return "the file predates frozen decisions (no seed order)"
        try:
            stored = {d.key: d for d in (Decision(**c) for c in comps)}
        except TypeError:
            return "the file's comparisons are not this version's"
        if set(stored) != set(self.decisions):
            return "they are of other comparisons"
        self.decisions, self.frozen = stored, int(doc.get("round", 0))
        return ""

    @property
    def active(self) -> set[tuple[str, str]]:
        """(row, dataset) pairs the next round trains: every pair before round 1, then both
        rows of each comparison still open after the last round."""
        if self.round == 0:
            return {row_pair(self.plan, t) for t in self.trials}
        return {(x, d.dataset) for d in self.decisions.values()
                if self._open(d) for x in (d.row, d.baseline)}

    def _open(self, d: Decision) -> bool:
        """Open and asking for seeds after the last round (a decision or a stop made in a
        later round of a replayed file does not count yet)."""
        if d.round > self.round:
            return True
        return d.decision == OPEN and not 0 < d.stopped <= self.round

    def round_trials(self, r: int, every: bool = False) -> list:
        """The trials of round `r` (the next) for the pairs still trained (`every`: all)."""
        seeds = set(self.ad.round_seeds(r))
        active = self.active
        return [t for t in self.trials if set(t.config.seeds) <= seeds
                and (every or row_pair(self.plan, t) in active)]

    def decide(self, r: int, values: pd.DataFrame | None) -> None:
        """Round `r` has run: its seed runs counted, its decisions made from `values` (or, for
        a round the decisions file holds, replayed: `values` unused)."""
        ran = sum(len(t.config.seeds) for t in self.round_trials(r))
        self.seed_runs += ran
        self.saved += sum(len(t.config.seeds) for t in self.round_trials(r, every=True)) - ran
        if r > self.frozen:
            decide_round(self.ad, self.plan, values, max(self.ad.round_seeds(r)) + 1, r,
                         self.decisions)
        self.round = r

    @property
    def seed_runs_max(self) -> int:
        return sum(len(t.config.seeds) for t in self.trials)

    @property
    def finished(self) -> bool:
        """Every comparison closed, or the last round run: nothing more to train."""
        return not self.active or self.round == self.ad.rounds

    def counts(self) -> dict[str, int]:
        """Comparisons decided, open and absent (their split not made), after the last round."""
        states = [OPEN if d.round > self.round else d.decision for d in self.decisions.values()]
        n_open, n_absent = states.count(OPEN), states.count("absent")
        stopped = sum(d.decision == OPEN and 0 < d.stopped <= self.round
                      for d in self.decisions.values())
        return {"decided": len(states) - n_open - n_absent, "open": n_open, "absent": n_absent,
                "stopped": stopped}

    def seed_words(self) -> str:
        """The seed runs so far, in words: saved only once nothing more will run."""
        if self.finished:
            return (f"{self.seed_runs} of {self.seed_runs_max} seed runs "
                    f"({self.seed_runs_max - self.seed_runs} saved)")
        later = self.seed_runs_max - self.seed_runs - self.saved
        return (f"{self.seed_runs} of at most {self.seed_runs_max} seed runs so far "
                f"({self.saved} saved, {later} not run yet)")

    def write(self, path: Path) -> None:
        """The decisions after the last round, for the report and for a rerun to replay."""
        from ablate.atomic import atomic_write

        doc = {"options": options_doc(self.ad), "round": self.round,
               "alpha_per_comparison": sequence_alpha(self.ad, len(self.decisions)),
               "seed_runs": self.seed_runs, "seed_runs_max": self.seed_runs_max,
               "seed_runs_saved": self.saved, "finished": self.finished,
               "comparisons": [asdict(d) for d in self.decisions.values()],
               "left_out": [asdict(x) for x in self.left_out]}
        atomic_write(path, lambda f: f.write(json.dumps(doc, indent=1).encode()))


def dropped(doc: dict) -> str:
    """What force=true drops of a decisions file: its rounds and the decisions made in them."""
    comps = [c for c in doc.get("comparisons") or [] if c.get("decision") not in (OPEN, None)]
    made = "; ".join(f"{c['row']} vs {c['baseline']} ({c['dataset']} {c['split']}): "
                     f"{c['decision']} in round {c['round']}" for c in comps)
    return (f"force=true drops the stored decisions of round(s) 1-{doc.get('round', 0)} "
            f"({len(comps)} decided{': ' + made if made else ''}); they are decided again from "
            "the new results")


def replay_plan(ad: AdaptiveSeeds, trials: list, status: dict[str, str],
                results_dir: str | Path, study: str) -> list:
    """The trials of the rounds the store's decisions call for, replayed as `run_adaptive`
    makes them: every round whose trials all have a result (ok or failed), then the first one
    that does not (the round a rerun goes on with). The rounds the decisions file holds are
    replayed from it; later ones decided from the store. `status`: trial id -> status."""
    from ablate.runner.plan import adaptive as core  # store_values looked up there (tests)

    rounds = Rounds.start(ad, trials)
    try:
        rounds.resume(read_stored(Path(results_dir) / study / DECISIONS_FILE))
    except OSError:
        pass  # an unreadable decisions file: decided again from the store, as on a first run
    out = []
    values = None
    for r in range(1, ad.rounds + 1):
        todo = rounds.round_trials(r)
        out += todo
        if any(t.trial_id not in status for t in todo):
            break
        if r > rounds.frozen and values is None:
            values = core.store_values(ad, rounds.plan, results_dir, study)
        rounds.decide(r, values)
        if not rounds.active:
            break
    return out
