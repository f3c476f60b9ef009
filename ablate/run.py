"""Command line: ``python -m ablate.run study=NAME [overrides...]``.

Overrides use Hydra's syntax (``key=value``, ``+new=value``, ``~key``, sweeps
``'seed=range(0,10)'`` (quoted: the shell reads brackets) / ``backbone=gin,chebygin`` that
expand the grid).
``--help`` lists the studies and every key with its allowed values;
``dry_run=true`` prints the trial table, count and cost estimate and the downloads a run
would make (it needs no data and no network); ``verify=true`` checks every result file.
Exit codes: 0 every trial complete, 1 some trials failed after their retries (the console
says why), 2 bad study / key / value / path / store (one line naming the valid choices,
and the closest one to a misspelling) or a Ray that cannot be joined or started, 3 results
could not be written (disk full, read-only; rerun to resume), 130 interrupted by Ctrl-C
and 143 by SIGTERM (rerun to resume).
verify=true: 0 every planned trial complete and every file intact, 4 intact but
incomplete (planned trials not run or failed), 2 a corrupt or foreign file.
reproduce=TRIAL_ID: 0 the rerun matches the store within the documented tolerance, 5 it
does not, 2 no such trial.
"""

from __future__ import annotations

import signal
import sys

from ablate.runner.execute.signals import RESUME, exit_resumable  # stdlib only: cheap this early


def _sigterm_before_main(signum, frame) -> None:  # nothing has started yet: just the line
    exit_resumable()


if __name__ == "__main__":  # SIGTERM while the imports below run
    signal.signal(signal.SIGTERM, _sigterm_before_main)

import dataclasses  # noqa: E402
from pathlib import Path  # noqa: E402

from ablate.errors import ConfigError  # noqa: E402
from ablate.runner.execute.signals import (  # noqa: E402
    forget_sigterm,
    raise_if_terminated,
    raise_on_sigterm,
    signal_name,
)
from ablate.runner.study.compose import (  # noqa: E402
    RUN_KEYS,
    STUDIES_DIR,
    STUDY_KEYS,
    list_studies,
    load_spec,
    study_files,
)
from ablate.runner.study.expand import build_study  # noqa: E402
from ablate.runner.study.kinds import NOT_AXES, trial_kind  # noqa: E402
from ablate.runner.study.trial_table import fixed_axes, trial_table  # noqa: E402

USAGE = "usage: python -m ablate.run study=NAME|PATH [key=value ...] [--help]"
SDC_PAPER = "study sdc: Pandey, Vashisht & Ramaswamy, \"On the Interpretability of Attention Networks\""


def papers() -> list[str]:
    """What "the paper" and "the authors' script" of the study descriptions are (the report's
    citations, `analysis.reference`, imported here only for --help: it loads pandas)."""
    from analysis.reference import AUTHORS_CODE, MNIST_SCRIPT, PAPER, WORKSHOP

    return [f"the paper: {PAPER}; its results table is that of {WORKSHOP}, with the final "
            "version's ChebyGIN rows",
            f"the authors' code and scripts: {AUTHORS_CODE} (MNIST-75SP: {MNIST_SCRIPT})",
            SDC_PAPER]


def _choices() -> dict[str, tuple]:
    from ablate import config

    return config.axis_choices()


def _type_name(typ) -> str:
    """A field's annotation as written (a string under `from __future__ import annotations`)."""
    if isinstance(typ, str):
        return typ
    return typ.__name__ if isinstance(typ, type) else str(typ).replace("typing.", "")


def _field_docs(cls) -> list[tuple[str, str, str]]:
    """(name, type, doc) of every field of a config dataclass, the doc from the field's
    `metadata["doc"]` (`ablate.config._doc`) with its whitespace and line breaks collapsed."""
    return [(f.name, _type_name(f.type), " ".join(str(f.metadata.get("doc", "")).split()))
            for f in dataclasses.fields(cls)]


def _pretty(typ: str) -> str:
    return (typ.replace("tuple[int, ...]", "[int,...]").replace("tuple[float, ...]", "[float,...]")
            .replace(" | None", "|null"))


def help_text(study: str | None = None) -> str:
    """The --help page: usage, studies, runner keys, axes with valid values, data keys."""
    from ablate.data import DATASETS, resolve_params

    lines = [USAGE, "", __doc__.split("\n\n", 1)[1].strip(), "", *papers(), "",
             "studies (study=NAME looks in $ABLATE_STUDIES, then the built-in studies; "
             "study=PATH runs any .yaml file):"]
    descriptions = list_studies()
    for name, paths in study_files().items():
        where = "built-in" if paths[0].parent == STUDIES_DIR else str(paths[0].parent)
        twice = f"; also in {paths[1].parent} (ambiguous)" if len(paths) > 1 else ""
        lines.append(f"  {name:<12} {descriptions[name]}  [{where}{twice}]")
    lines += ["", "runner keys:"]
    for k, (d, h) in RUN_KEYS.items():
        lines.append(f"  {k + '=':<18} {h} (default {d})")
    lines += ["", "study settings (the study file sets them; override here):"]
    for k, (d, h) in STUDY_KEYS.items():
        lines.append(f"  {k + '=':<18} {h} (default {d})")
    lines += ["", "trial axes (graph trials; null = the dataset's reference recipe):"]
    choices = _choices()
    for name, typ, doc in _field_docs(trial_kind("graph").config):
        if name in NOT_AXES:
            continue
        allowed = "|".join(choices[name]) if name in choices else _pretty(typ)
        lines.append(f"  {name + '=':<18} {allowed}  -- {doc}")
    lines += ["  +NEW=VALUE         a free-form axis (recorded in the 'extra' column)", "",
              "dataset parameters (data.KEY=VALUE; defaults shown):"]
    shown = [(ds, ds, {}) for ds in DATASETS] + [  # the open names, with an example value
        ("tu:NAME", "tu:MUTAG", {}), ("pyg", "pyg", {"target": "package.module:Class"})]
    for label, ds, example in shown:
        params = ", ".join(f"{k}={v}" for k, v in resolve_params(ds, example).items())
        lines.append(f"  {label:<10} {params}")
    if study:
        lines += ["", _study_summary(study)]
    return "\n".join(lines)


def _study_summary(name: str) -> str:
    spec = load_spec(name)
    out = [f"study {name}: {spec.description}", f"  fixed: {spec.fixed}",
           f"  data: {spec.data}", f"  grid: {spec.grid}",
           f"  variants: {len(spec.variants)}", f"  seeds: {spec.seeds} "
           f"(seeds_per_trial={spec.seeds_per_trial})"]
    return "\n".join(out)


def _study_name(argv: list[str]) -> str:
    names = [a.split("=", 1)[1] for a in argv if a.startswith("study=")]
    if not names or not names[-1]:
        valid = ", ".join(list_studies())
        raise ConfigError(f"no study given: pass study=NAME or study=PATH.yaml; valid names: "
                          f"{valid}")
    return names[-1]


def _display(argv: list[str]):
    """The run's `Progress` line, made before planning (its mode: the last ``progress=``;
    a bad mode shows nothing here, the overrides refuse it)."""
    from ablate.runner.execute.progress import Progress, epoch_report_s
    from ablate.runner.study.compose import PROGRESS_MODES, study_name

    modes = [a.split("=", 1)[1] for a in argv if a.startswith("progress=")]
    mode = modes[-1] if modes else "auto"
    return Progress(study_name(_study_name(argv)), mode=mode if mode in PROGRESS_MODES else "none",
                    epoch_every_s=6 * epoch_report_s())


def dry_run(study, options) -> str:
    """The trial table (axes as columns) and the count, marking trials already done."""
    import pandas as pd

    from ablate.runner.execute.store import Store

    done = Store(options["results_dir"], study.name).completed()
    table = trial_table(study, done)
    cost = None
    if options.get("estimate", "off") != "off" and len(table):
        from ablate.runner.plan.estimate import estimate

        cost = estimate(study, options["results_dir"], options["estimate"])
        table["est"] = [_short(cost.trials[t].seconds) for t in table["trial_id"]]
        table["from"] = [cost.trials[t].source for t in table["trial_id"]]
    spec = study.spec
    fixed = " ".join(f"{k}={v}" for k, v in fixed_axes(study).items())
    n_done = int(table["done"].sum()) if len(table) else 0
    with pd.option_context("display.max_rows", None, "display.max_columns", None,
                           "display.width", 200):
        body = table.to_string(index=False) if len(table) else "(no trials)"
    return (f"study {study.name}: {spec.description}\n"
            f"fixed: {fixed}\n{body}\n"
            f"{len(study.trials)} trials ({n_done} done, {len(study.trials) - n_done} to run), "
            f"{sum(len(t.config.seeds) for t in study.trials)} seed runs; "
            f"seeds_per_trial={spec.seeds_per_trial} cpus_per_trial={spec.cpus_per_trial} "
            f"gpus_per_trial={spec.gpus_per_trial} max_failures={spec.max_failures}"
            + (_adaptive_line(study) if spec.adaptive is not None else "")
            + ("".join(f"\n{line}" for line in [cost.line(), *cost.notes]) if cost else ""))


def _adaptive_line(study) -> str:
    """What an adaptive-seed study trains first and at most (the counts above are the most)."""
    ad = study.spec.adaptive
    first = [t for t in study.trials if set(t.config.seeds) <= set(ad.round_seeds(1))]
    return (f"\nadaptive seeds ({ad.sequence} confidence sequences, alpha {ad.alpha} over all "
            f"comparisons, equivalence ±{ad.equivalence:g}, {ad.metric}): round 1 trains seeds "
            f"0-{ad.start - 1} of every row ({len(first)} trials); then {ad.step} more per round "
            f"for the rows of open comparisons only, up to {ad.max} seeds a row: the counts "
            "above are the most it can cost" + _decidable_line(study))


def _decidable_line(study) -> str:
    """For the exact default: the smallest difference it can decide within `max` seeds, so a
    user sees before running whether the effects they expect can be decided at all; at the
    alpha the run splits over its decisions (comparison x dataset x split, `initial_decisions`)."""
    ad = study.spec.adaptive
    if ad.sequence != "betting":
        return ""
    from ablate.runner.plan.adaptive import initial_decisions, plan_rows, sequence_alpha
    from analysis.betting import equivalence_seeds, smallest_decidable, smallest_equivalence

    n = len(initial_decisions(ad, plan_rows(study.trials)))
    a = sequence_alpha(ad, n)
    delta = smallest_decidable(ad.max, a)
    eq = smallest_equivalence(ad.max, a)
    same = (f"; it can call two rows equivalent only within about ±{100 * eq:.0f} points or "
            "wider, even if every paired difference is 0" + (
                f": equivalence ±{100 * ad.equivalence:g} points needs at least "
                f"{equivalence_seeds(ad.equivalence, a)} seeds, so no comparison will end "
                "'equivalent', and one whose rows do not differ stays open to max"
                if ad.equivalence < eq else ""))
    if delta > 1:
        return (f"\nwithin {ad.max} seeds the betting sequence can decide no difference at "
                f"alpha {a:.2g} per comparison ({n} comparisons): raise max")
    return (f"\nwithin {ad.max} seeds it can call a difference nonzero only from about "
            f"{100 * delta:.0f} points on (at alpha {a:.2g} per comparison, {n} comparisons, "
            f"even if every seed differs by as much; no exact test from less than "
            f"{100 * smallest_decidable(ad.max, a, 1.0):.0f}); smaller effects end open{same}: "
            "docs/performance.md (adaptive seeds)")


def _short(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds / 60:.1f}m" if seconds >= 90 else f"{seconds:.1f}s"


def main(argv: list[str] | None = None) -> int:
    previous = signal.getsignal(signal.SIGTERM)
    try:
        raise_on_sigterm()  # SIGTERM from here on: the resume line and 143, as under Tune
        return _main(list(sys.argv[1:] if argv is None else argv))
    finally:
        forget_sigterm()
        if previous is not None and signal.getsignal(signal.SIGTERM) is not previous:
            try:
                signal.signal(signal.SIGTERM, previous)
            except ValueError:  # not the main thread: nothing was installed
                pass


def _main(argv: list[str]) -> int:
    made: list = []  # folders a run created, taken away again if it is refused
    try:
        if any(a in ("-h", "--help", "help") for a in argv):
            names = [a.split("=", 1)[1] for a in argv if a.startswith("study=")]
            print(help_text(names[-1] if names else None))
            return 0
        from ablate.runner.study.search_spec import is_search_study

        if is_search_study(_study_name(argv)):  # kind: search -> Optuna through Ray Tune
            from ablate.runner.search.entry import main as search_main

            return search_main(_study_name(argv), argv)
        display = _display(argv)  # the live line, from the planning step on
        with display.ticking():
            study, options = build_study(_study_name(argv), argv, progress=display)
        raise_if_terminated()  # a SIGTERM some library swallowed while the study was built
        from ablate.runner.execute.driver import run_study
        from ablate.runner.execute.store import Store
        from ablate.runner.plan.checks import check_devices, check_resources_early
        from ablate.runner.plan.datasets import check_data_paths
        from ablate.runner.plan.resources import memory_plan
        from ablate.runner.study.expand import merge_notes

        if options["reproduce"]:
            from ablate.runner.execute.reproduce import reproduce

            # the id as typed: Hydra reads "0123e45678ab"-like ids as numbers
            raw = [a.split("=", 1)[1] for a in argv if a.startswith("reproduce=")]
            return reproduce(study, {**options, "reproduce": raw[-1] if raw else
                                     options["reproduce"]})
        if options["verify"]:
            return verify(study, options)
        if options["dry_run"]:  # a run makes these checks itself (run_study), before Ray
            check_devices(study, options["ray_address"])
            check_resources_early(study, options["ray_address"])
            notes = check_data_paths(study)
            from ablate.runner.execute.ray_env import RayMode
            from ablate.runner.plan.checks import cluster_address
            from ablate.runner.plan.datasets import check_trial_files

            if not cluster_address(options["ray_address"]):  # as a run on an embedded Ray
                check_trial_files(study.trials)

            embedded = RayMode.of(options["ray_address"]).embedded
            memory_plan(study, embedded=embedded)  # a trial this machine cannot hold: exit 2 now
            writable = Store(options["results_dir"], study.name).writable(keep=False)  # or 2
            print(dry_run(study, options))
            for note in merge_notes(study):  # the rows the table above makes
                print(f"note: {note}")
            print(memory_plan(study, embedded=embedded))  # estimate=calibrate prepared the data
            for note in notes:
                print(f"note: {note}")
            if not writable:
                print(f"note: {Path(options['results_dir']) / study.name} is read-only: a run "
                      "can only re-check it")
            return 0

        for note in merge_notes(study):  # stdout, before the run: stderr keeps an error one line
            print(f"note: {note}", flush=True)
        made = Store(options["results_dir"], study.name).new_folders()
        _keep_study_file(study, options["results_dir"])
        if study.spec.adaptive is not None:  # rounds of seeds, as long as comparisons are open
            from ablate.runner.execute.rounds import run_adaptive

            summary = run_adaptive(study, options["results_dir"], force=options["force"],
                                   ray_address=options["ray_address"],
                                   progress=options["progress"], display=display)
        else:
            summary = run_study(study, options["results_dir"], force=options["force"],
                                ray_address=options["ray_address"],
                                progress=options["progress"], display=display)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        if made:  # a refused first run leaves no study folder behind
            Store(options["results_dir"], study.name).discard_new(made)
        return 2
    except KeyboardInterrupt as e:
        print(RESUME, flush=True)
        return 143 if signal_name(e) == "SIGTERM" else 130
    print(summary.line())
    for line in summary.failure_lines():
        print(line, file=sys.stderr)
    return summary.exit_code


def _keep_study_file(study, results_dir: str) -> None:
    """The study file as run, beside its trials (`Store.keep_study_file`). A store that cannot
    be written is left to the run, which says so in one line (exit 3)."""
    from ablate.runner.execute.store import Store

    if study.spec.path is not None:
        try:
            Store(results_dir, study.name).keep_study_file(study.spec.path)
        except OSError:
            pass


VERIFY_CORRUPT, VERIFY_INCOMPLETE = 2, 4


def verify(study, options) -> int:
    """`verify=true`: every trial and curves file of the study read whole; problems listed.

    Exit 0 complete and intact, `VERIFY_INCOMPLETE` (4) intact but some planned trials are
    not complete (never run, or failed), `VERIFY_CORRUPT` (2) a file is corrupt or foreign.
    An adaptive-seed study plans the rounds its decisions call for, replayed from the store
    (`ablate.runner.plan.adaptive.replay_plan`), not every round up to `max`. Reads only: no
    folder is created."""
    from ablate.runner.execute.store import Store

    store = Store(options["results_dir"], study.name)
    got = store.inspect()
    status, problems = got.status, got.problems
    n = got.n_files
    for p in problems:
        print(p)
    for line in schema_versions(got.versions, got.curve_versions):
        print(line)
    trials, which = study.trials, ""
    if study.spec.adaptive is not None and not problems:  # the rounds its decisions call for
        from ablate.runner.plan.adaptive_rounds import replay_plan

        trials = replay_plan(study.spec.adaptive, trials, status, options["results_dir"],
                             study.name)
        which = "; planned: the rounds its adaptive seeds' decisions call for"
    planned = {t.trial_id for t in trials}
    ok = {t for t, s in status.items() if s == "ok"} & planned
    failed = {t for t, s in status.items() if s != "ok"} & planned
    missing = planned - ok - failed
    state = ("corrupt" if problems else "incomplete" if ok != planned else "complete")
    print(f"{store.dir}: {n} trial files, {len(problems)} problem(s); {len(ok)} of "
          f"{len(planned)} planned trials complete, {len(failed)} failed, {len(missing)} "
          f"not run ({state}{which})")
    if problems:
        return VERIFY_CORRUPT
    return VERIFY_INCOMPLETE if ok != planned else 0


def schema_versions(trials: dict[Path, int], curves: dict[Path, int]) -> list[str]:
    """`verify`'s lines on the schema version of every readable file: one line per version
    with its count of trial and curves files; files of an older version are named."""
    from result_store.schema import VERSION

    lines = []
    for v in sorted(set(trials.values()) | set(curves.values()), reverse=True):
        files = sorted(p for d in (trials, curves) for p, x in d.items() if x == v)
        nt, nc = sum(x == v for x in trials.values()), sum(x == v for x in curves.values())
        what = ("current" if v == VERSION else
                "before the declared schema: read through the compatibility path" if v == 0 else
                "older")
        named = f": {', '.join(map(str, files))}" if v != VERSION else ""
        lines.append(f"schema v{v} ({what}): {nt} trial file(s), {nc} curves file(s){named}")
    return lines


if __name__ == "__main__":
    sys.exit(main())
