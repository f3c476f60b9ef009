"""Ten thousand trials through one driver (issue 30): a linear hand-over to Ray Tune, a plan
limit, a live progress line through long driver steps, Ctrl-C / SIGTERM during them.

The tests that would catch a quadratic start-up again count, without timing anything,
the bytes Ray Tune deep-copies per trial it creates and the size of each trial's config:
with the packs handed over as a grid of payloads both grow with the number of trials.
"""

from __future__ import annotations

import copy
import io
import os
import pickle
import signal
import time

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "token")  # before `import ray` (DESIGN.md)

from ablate.runner.execute.progress import Progress  # noqa: E402
from ablate.runner.execute.signals import RESUME  # noqa: E402
from ablate.runner.study.compose import StudySpec  # noqa: E402
from ablate.runner.study.expand import Study, check_plan_size, expand, plan_size  # noqa: E402


def _descriptions(n: int) -> list[dict]:
    from ablate.runner.execute.handover import describe
    from ablate.runner.plan.packing import Pack

    packs = [Pack(f"{i:012x}", ()) for i in range(n)]
    return describe(packs, {p.pack_id: {"CPU": 1, "GPU": 0, "memory": 256 << 20}
                            for p in packs})


def _noop(config):
    return None


def _tune_creates(search_alg, param_space: dict, n: int, monkeypatch,
                  keep: bool = False) -> tuple:
    """Ray Tune's own trial creation (what `tune.run` does with a search algorithm) for
    `n` trials: (trials made, bytes deep-copied per trial, largest trial config in bytes),
    and the trials with `keep`."""
    from ray.tune.experiment import Experiment
    from ray.tune.search import BasicVariantGenerator, Searcher, SearchGenerator

    copied, depth, original = [0], [0], copy.deepcopy

    def counting(x, memo=None, _nil=[]):  # noqa: B006 (copy.deepcopy's own signature)
        if depth[0] == 0:  # a copy Tune asked for (its nested calls are not counted again)
            try:
                copied[0] += len(pickle.dumps(x))
            except Exception:
                copied[0] += len(repr(x))
        depth[0] += 1
        try:
            return original(x, memo)
        finally:
            depth[0] -= 1

    alg = search_alg or BasicVariantGenerator()
    if isinstance(alg, Searcher):
        alg = SearchGenerator(alg)
    exp = Experiment("handover", run=_noop, config=param_space,
                     num_samples=n if search_alg is not None else 1)
    monkeypatch.setattr(copy, "deepcopy", counting)
    alg.add_configurations([exp])
    trials = []
    while not alg.is_finished():
        trial = alg.next_trial()
        if trial is None:
            break
        trials.append(trial)
        alg.on_trial_complete(trial.trial_id)
    monkeypatch.setattr(copy, "deepcopy", original)
    largest = max(len(pickle.dumps(t.config)) for t in trials)
    return (len(trials), copied[0] / len(trials), largest) + ((trials,) if keep else ())


def test_tune_copies_a_fixed_size_description_per_trial(monkeypatch):
    from ray import tune

    from ablate.runner.execute.handover import feed

    per_trial, largest = {}, {}
    for n in (20, 200):
        made, per_trial[n], largest[n] = _tune_creates(feed(_descriptions(n), 4), {}, n,
                                                       monkeypatch)
        assert made == n
    assert per_trial[200] < 1.02 * per_trial[20]  # flat: linear in total
    # an index, an id, resources: bytes (a larger index pickles a byte longer), not payloads
    assert largest[200] <= largest[20] + 4 < 400

    # the control: the same descriptions as one grid, as the driver handed Tune its payloads
    # before, make Tune copy the whole grid for every trial (the quadratic start-up)
    grid = {}
    for n in (20, 200):
        made, grid[n], _ = _tune_creates(None, {"trial": tune.grid_search(_descriptions(n))}, n,
                                         monkeypatch)
        assert made == n
    # every trial more adds its description (~45 bytes here) to what each trial copies
    assert grid[200] - grid[20] > 20 * (200 - 20)


def test_the_scheduler_never_walks_the_finished_trials(monkeypatch):
    """Tune's FIFO scheduler looks through every trial at every step; `InOrder` keeps a
    queue of those not yet started, so a step's work does not grow with the finished ones."""
    from ray.tune.experiment import Trial

    from ablate.runner.execute.handover import InOrder, feed

    *_, trials = _tune_creates(feed(_descriptions(200), 4), {}, 200, monkeypatch, keep=True)
    order = InOrder()
    for t in trials:
        order.on_trial_add(None, t)
    for t in trials[:150]:
        t.set_status(Trial.TERMINATED)
    assert order.choose_trial_to_run(None) is trials[150]
    assert order.choose_trial_to_run(None) is trials[150] and len(order._waiting) == 50
    trials[150].set_status(Trial.RUNNING)
    assert order.choose_trial_to_run(None) is trials[151] and len(order._waiting) == 49
    for t in trials[151:]:
        t.set_status(Trial.TERMINATED)
    assert order.choose_trial_to_run(None) is None and not order._waiting


def test_a_study_above_the_trial_limit_stops_before_anything_runs(tmp_path, capsys,
                                                                   monkeypatch):
    from ablate import run
    from ablate.runner.search import entry  # noqa: F401 (imported before the patch below)
    from ablate.runner.study import expand as study_module

    def never(*a, **kw):
        raise AssertionError("a trial was built")

    monkeypatch.setattr(study_module, "make_trial", never)
    results = tmp_path / "r"
    for extra in ([], ["dry_run=true"]):
        code = run.main(["study=smoke", "seed=range(0,30000)", f"results_dir={results}", *extra])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1, err
        assert "240,000 trials" in err  # 4 variants x 2 datasets x 2 backbones x 15,000 chunks
        for words in ("4 variants", "dataset (2 values)", "backbone (2 values)",
                      "15,000 seed chunks (30,000 seeds, seeds_per_trial=2)",
                      "trial_limit=240000"):
            assert words in err, (words, err)
    assert not results.exists()


def test_plan_size_counts_what_expand_builds():
    spec = StudySpec(name="count", fixed={"dataset": "colors", "epochs": 1},
                     grid={"backbone": ["gin", "chebygin"], "threshold": [0.1, 0.2, 0.3]},
                     variants=[{"supervision": "unsup"}, {"supervision": "sup", "seeds": [5]}],
                     seeds=[0, 1, 2, 3, 4], seeds_per_trial=2)
    assert plan_size(spec)[0] == len(expand(spec)) == 2 * 3 * (3 + 1) == check_plan_size(spec)
    spec.trial_limit = 23
    with pytest.raises(Exception, match="expands to 24 trials .* trial_limit=24"):
        check_plan_size(spec)
    per_seed = StudySpec(name="perseed", fixed={"dataset": "colors", "epochs": 1},
                         data={"seed": "seed"}, seeds=[0, 1, 2], seeds_per_trial=2)
    assert plan_size(per_seed)[0] == len(expand(per_seed)) == 3


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_planning_stops_it_at_once_with_the_resume_line(
        tmp_path, capsys, monkeypatch, sig, code):
    """Planning 240,000 trials takes minutes; a signal stops it where it is."""
    from ablate import run

    seen = {}
    advance = Progress.advance

    def advance_and_signal(self, n=1):
        advance(self, n)
        seen[self.step_name] = self.step_done
        if self.step_name == "planning" and self.step_done == 200:
            os.kill(os.getpid(), sig)

    monkeypatch.setattr(Progress, "advance", advance_and_signal)
    got = run.main(["study=smoke", "seed=range(0,30000)", "trial_limit=240000",
                    f"results_dir={tmp_path / 'r'}", "progress=lines"])
    out = capsys.readouterr().out
    assert got == code and RESUME in out
    assert 200 <= seen["planning"] < 1000  # stopped where it was, of 240,000 trials
    assert not (tmp_path / "r").exists()


class _TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_line_stays_alive_through_a_long_step_and_names_it():
    stream = _TTY()
    p = Progress("s", stream=stream, tick_s=0.01, quiet_s=0.0)
    with p.ticking():
        p.step("planning", 1000, "trials")
        p.advance(250)
        time.sleep(0.3)  # the main thread is busy: the background thread redraws the line
        drawn = stream.getvalue()
    assert drawn.count("\r\033[K[s] planning: 250/1,000 trials | 0:00 elapsed") >= 5
    assert stream.getvalue().endswith("\r\033[K")  # an unfinished step's bar is cleared
    p.trials(3, 0)
    p.close()
    assert stream.getvalue().endswith("[s] 0/3 finished: 0 ok, 0 failed, 0 running, "
                                      "0 skipped | 0:00 elapsed, ETA --\n")

    log = io.StringIO()  # a log (not a terminal): a line per step that lasts, then rarely
    q = Progress("s", stream=log, tick_s=0.01, quiet_s=0.05, step_every_s=0.1)
    with q.ticking():
        q.step("reading the store", 10, "files")
        q.step("starting Ray")
        time.sleep(0.3)
    lines = log.getvalue().splitlines()
    assert "reading the store" not in log.getvalue()  # too short to log
    assert 2 <= len(lines) <= 4 and all(ln.startswith("[s] starting Ray |") for ln in lines)
    assert pickle.loads(pickle.dumps(q)).text().startswith("[s] starting Ray")  # Tune pickles it


def test_a_log_shows_the_first_unnamed_step_only_once_it_has_lasted_a_while():
    """In a log, the command's first step (imports, reading the study: "starting") gets no
    line before `step_every_s`, so an input refused after a slow start prints its one error
    line only; a named step that lasts `quiet_s` gets one, as before."""
    log = io.StringIO()
    p = Progress("s", stream=log, t0=100.0, quiet_s=2.0, step_every_s=10.0)
    assert p.step_name == "starting"
    for now in (102.5, 105.0, 109.9):
        p._refresh_step(now)
    assert log.getvalue() == ""
    p._refresh_step(110.1)
    assert log.getvalue().startswith("[s] starting |") and log.getvalue().count("\n") == 1
    log2 = io.StringIO()
    q = Progress("s", stream=log2, t0=time.time() - 3.0, quiet_s=2.0, step_every_s=10.0)
    q.step("reading the store", 10, "files")
    q._step_t0 -= 2.5
    q._refresh_step(time.time())
    assert log2.getvalue().startswith("[s] reading the store: 0/10 files")


def test_search_studies_hand_tune_small_fixed_size_trials(tmp_path, monkeypatch):
    """A search hands Tune one Optuna suggestion per trial; its spec goes through the object
    store once (`tune.with_parameters`), never in a trial's config."""
    from ray import tune

    from ablate.runner.execute.store import Store
    from ablate.runner.search.tuning import run_search
    from ablate.runner.study.search_spec import load_search_spec

    got = {}

    class Recorder:
        def __init__(self, trainable, **kwargs):
            got.update(kwargs, trainable=trainable)

        def fit(self):
            return None

    monkeypatch.setattr(tune, "Tuner", Recorder)
    spec = load_search_spec("threshold_search", [f"results_dir={tmp_path}", "n_trials=24"])
    arm = next(iter(spec.arms))
    run_search(spec, arm, Store(tmp_path, spec.name))
    assert not got.get("param_space")
    assert got["tune_config"].num_samples == 24
    searcher = got["tune_config"].search_alg
    sizes = []
    for i in range(24):
        config = searcher.suggest(f"t{i}")
        sizes.append(len(pickle.dumps(config)))
        searcher.on_trial_complete(f"t{i}", {"objective": 0.5, "training_iteration": 1})
        assert "spec" not in config and "base" not in config
    assert max(sizes) < 400 and max(sizes[12:]) <= max(sizes[:12]) + 8  # flat


# ------------------------------------------------------------------ on a real local Ray
@pytest.fixture
def barrier_env(ray_env, monkeypatch):
    from ablate.runner.study.kinds import TRIAL_KINDS

    monkeypatch.setitem(TRIAL_KINDS, "barrier", "_ray_kinds:BARRIER")
    return ray_env


@pytest.mark.slow
def test_the_driver_hands_tune_descriptions_and_the_workers_find_their_payloads(
        barrier_env, monkeypatch):
    """One embedded Ray for both runs: a run interrupted while it hands the packs to Tune
    (130, everything still to do, the step named), then the whole study; Tune's trials hold
    only descriptions, the payloads come from object-store pieces of three packs."""
    import ray
    from ray import tune

    from ablate.runner.execute import driver, handover
    from ablate.runner.execute.ray_env import start_ray
    from ablate.runner.execute.store import read_trials

    spec = StudySpec(name="handover", kind="barrier", fixed={"+parties": 1,
                     "+marker_dir": str(barrier_env / "markers")},
                     seeds=list(range(8)), seeds_per_trial=1, gpus_per_trial=0,
                     max_failures=0)
    study = Study(spec, expand(spec))
    start_ray(None)
    results = barrier_env / "results"

    memory, calls = driver.pack_memory, []

    def memory_then_ctrl_c(pack):
        calls.append(pack.pack_id)
        if len(calls) == 3:
            os.kill(os.getpid(), signal.SIGINT)
        return memory(pack)

    monkeypatch.setattr(driver, "pack_memory", memory_then_ctrl_c)
    out = io.StringIO()
    display = Progress(study.name, mode="lines", stream=out, quiet_s=0.0)
    s = driver.run_study(study, results, stream=out, display=display)
    assert s.exit_code == 130 and len(s.remaining) == 8 and "interrupted" in s.line()
    assert "[handover] handing the packs to Tune: " in out.getvalue()
    assert len(calls) == 3 and ray.is_initialized()  # stopped there; its Ray is the caller's
    monkeypatch.setattr(driver, "pack_memory", memory)

    monkeypatch.setattr(handover, "PACKS_PER_PIECE", 3)
    tables, configs = [], []
    put = handover.PayloadTable.put.__func__

    def put_and_keep(cls, payloads, *a, **kw):
        tables.append(put(cls, payloads, *a, **kw))
        return tables[-1]

    monkeypatch.setattr(handover.PayloadTable, "put", classmethod(put_and_keep))

    class Sizes(tune.Callback):
        def on_trial_start(self, iteration, trials, trial, **info):
            configs.append(trial.config)

    tuner = tune.Tuner

    def spied(trainable, **kwargs):
        configs.append(("param_space", kwargs.get("param_space")))
        kwargs["run_config"].callbacks.append(Sizes())
        return tuner(trainable, **kwargs)

    monkeypatch.setattr(tune, "Tuner", spied)
    ctrl_c = signal.getsignal(signal.SIGINT)
    s = driver.run_study(study, results, progress="none")
    assert s.exit_code == 0, s.line()
    # Tune leaves its handler after a run no signal ended; the driver puts Ctrl-C's back
    assert signal.getsignal(signal.SIGINT) is ctrl_c
    assert configs[0] == ("param_space", None)  # no grid: nothing per trial up front
    trials = configs[1:]
    assert len(trials) == 8 and len(tables) == 1 and len(tables[0].pieces) == 3
    assert all(set(c) == {"trial"} and set(c["trial"]) == {"index", "trial_id", "resources"}
               for c in trials)
    assert max(len(pickle.dumps(c)) for c in trials) < 400
    assert sorted(c["trial"]["index"] for c in trials) == list(range(8))
    df = read_trials(results, "handover")
    by_id = {t.trial_id: t.config.seeds[0] for t in study.trials}
    assert len(df) == 8 and all(by_id[r.trial_id] == r.seed for r in df.itertuples())
