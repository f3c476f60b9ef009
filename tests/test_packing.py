"""Packs: trials that differ only in stackable values run as one Ray trial and one model.

Grouping is checked directly; the runner is checked on a real local Ray: one file per
trial, the pack's id on every row, the same numbers as each trial run alone, retries of
only the failed trials of a pack, and resume.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "token")  # before `import ray` (DESIGN.md)


from ablate.runner.execute.driver import run_study  # noqa: E402
from ablate.runner.execute.ray_env import start_ray  # noqa: E402
from ablate.runner.execute.store import read_trials  # noqa: E402
from ablate.runner.plan.packing import GPU_PACK_SEEDS, make_packs, pack_seeds  # noqa: E402
from ablate.runner.study.compose import StudySpec  # noqa: E402
from ablate.runner.study.expand import Study, build_study, expand  # noqa: E402
from ablate.runner.study.kinds import TRIAL_KINDS  # noqa: E402
from ablate.trial.graph import run_trial_full  # noqa: E402

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
TINY = {"n_train": 40, "n_val": 40, "n_test": 40, "n_max_large": 40}


@pytest.fixture
def env(ray_env, monkeypatch):
    monkeypatch.setitem(TRIAL_KINDS, "faultypack", "_ray_kinds:FAULTY_PACK")
    return ray_env


def _study(name: str, kind: str = "graph", fixed: dict | None = None, grid: dict | None = None,
           seeds=(0, 1), **settings) -> Study:
    spec = StudySpec(name=name, kind=kind, fixed={"dataset": "colors", "backbone": "chebygin",
                                                  "epochs": 2, "supervision": "sup",
                                                  **(fixed or {})},
                     data=dict(TINY), grid=dict(grid or {}), seeds=list(seeds), **settings)
    return Study(spec, expand(spec))


def test_packs_group_only_stackable_trials_up_to_the_size(env):
    study = _study("g", grid={"threshold": [0.01, 0.05], "init_scale": [0.1, 1.0],
                              "backbone": ["gin", "chebygin"]}, seeds=range(4),
                   seeds_per_trial=2)
    assert len(study.trials) == 16  # 2 x 2 x 2 rows x 2 seed chunks
    packs = make_packs(study.trials, max_seeds=8)
    assert sorted(len(p.trials) for p in packs) == [4, 4, 4, 4]
    for p in packs:
        assert len({t.config.backbone for t in p.trials}) == 1 and p.seeds == 8
        assert p.pack_id.startswith("pack-")
    assert sum(len(p.trials) for p in packs) == 16
    assert {t.trial_id for p in packs for t in p.trials} == {t.trial_id for t in study.trials}
    alone = make_packs(study.trials, max_seeds=0)  # CPU default: every trial its own pack
    assert [p.pack_id for p in alone] == [t.trial_id for t in study.trials]
    weak = _study("w", fixed={"supervision": "weak"}, grid={"threshold": [0.01, 0.05]})
    assert len(weak.trials) == 4 and len(make_packs(weak.trials, max_seeds=8)) == 1  # packs too
    assert pack_seeds("auto", 0.25) == GPU_PACK_SEEDS and pack_seeds("auto", 0) == 0
    assert pack_seeds(5, 0) == 5


def test_init_study_becomes_a_handful_of_packs_on_a_gpu():
    study, _ = build_study("init")
    assert len(study.trials) == 24
    packs = make_packs(study.trials, pack_seeds("auto", 0.25))
    assert len(packs) == 2 and sum(p.seeds for p in packs) == 104
    assert all(p.seeds <= GPU_PACK_SEEDS for p in packs)


def _key(r):
    return (r["seed"], r["split"])


@pytest.mark.slow
def test_runner_packs_trials_and_writes_one_file_per_trial(env):
    study = _study("packs", grid={"threshold": [0.02, 0.1], "kl_weight": [10.0, 100.0]},
                   seeds=(0, 1), seeds_per_trial=2, pack_size=8, gpus_per_trial=0)
    assert len(study.trials) == 4
    start_ray(None)
    s = run_study(study, env / "results", progress="none")
    assert s.exit_code == 0 and s.ok == 4
    df = read_trials(env / "results", "packs")
    assert set(df.trial_id) == {t.trial_id for t in study.trials}
    assert df.pack_id.nunique() == 1 and df.pack_id.iloc[0].startswith("pack-")
    assert set(df.pack_trials) == {4} and set(df.batched_seeds) == {8}
    assert len(list((env / "results" / "packs" / "trials").glob("*.parquet"))) == 4
    for t in study.trials[:2]:  # each trial's numbers are its own
        alone = {_key(r): r for r in run_trial_full(t.config).records}
        for _, row in df[df.trial_id == t.trial_id].iterrows():
            ref = alone[(row.seed, row.split)]
            assert row.threshold == ref["threshold"] and row.kl_weight == ref["kl_weight"]
            assert row.accuracy == ref["accuracy"]
            assert math.isclose(row.loss, ref["loss"], rel_tol=1e-4, abs_tol=1e-5)
    again = run_study(study, env / "results", progress="none")
    assert again.skipped == 4 and again.exit_code == 0


def _faulty_pack_study(name: str, fault: str, env: Path) -> Study:
    """4 trials (2 thresholds x seed chunks (0, 1), (2, 3)) in one pack of the faultypack kind:
    seed 1 starts from NaN parameters; `fault` as `_ray_kinds.faulty_pack` names it."""
    return _study(name, kind="faultypack", seeds=range(4), seeds_per_trial=2,
                  grid={"threshold": [0.02, 0.1]}, pack_size=8, max_failures=2,
                  gpus_per_trial=0, fixed={"+nan_seed": 1, "+fault": fault,
                                           "+marker_dir": str(env / "markers")})


@pytest.mark.slow
def test_a_failed_pack_member_is_retried_alone_and_a_raising_pack_whole(env):
    study = _faulty_pack_study("packfaults", "raise_once", env)
    assert len(study.trials) == 4  # 2 thresholds x seed chunks (0, 1) and (2, 3): one pack
    start_ray(None)
    s = run_study(study, env / "results", progress="none")
    with_nan = sorted(t.trial_id for t in study.trials if 1 in t.config.seeds)
    assert s.failed == with_nan and s.ok == 2 and s.exit_code == 1
    df = read_trials(env / "results", "packfaults")
    for t in study.trials:
        rows = df[df.trial_id == t.trial_id]
        if t.trial_id in with_nan:  # raised with the pack, then NaN alone twice: 3 attempts
            assert set(rows.attempt) == {3}
            assert set(rows[rows.seed == 0].batched_seeds) == {4}  # the 2 failed trials only
            assert set(rows[rows.seed == 1].status) == {"nan"}
            assert set(rows[rows.seed == 0].status) == {"ok"}
        else:  # raised with the pack, then ok: 2 attempts
            assert set(rows.attempt) == {2} and set(rows.status) == {"ok"}
            assert set(rows.batched_seeds) == {8}  # trained in the whole pack


@pytest.mark.slow  # the default suite stays under 10 min; CI runs -m slow too
def test_a_retried_pack_never_rewrites_a_member_stored_ok(env):
    """Two of a pack's four members stored ok, the other two failed; the worker then dies while
    retrying them, and Tune reruns the whole pack: the two stored files keep their bytes."""
    study = _faulty_pack_study("packkeep", "nan_then_exit", env)
    start_ray(None)
    folder = env / "results" / "packkeep" / "trials"
    stored: dict[str, bytes] = {}
    ok_first = sorted(t.trial_id for t in study.trials if 1 not in t.config.seeds)

    from ablate.runner.execute import tune_callback

    write = tune_callback.StoreCallback._write

    def spy(self, tid, rows, *a, **kw):  # the bytes of each ok member's first file
        out = write(self, tid, rows, *a, **kw)
        if tid in ok_first and tid not in stored and all(r["status"] == "ok" for r in rows):
            stored[tid] = (folder / f"{tid}.parquet").read_bytes()
        return out

    tune_callback.StoreCallback._write = spy
    try:
        s = run_study(study, env / "results", progress="none")
    finally:
        tune_callback.StoreCallback._write = write
    assert sorted(stored) == ok_first
    assert s.exit_code == 0 and s.ok == 4, s
    df = read_trials(env / "results", "packkeep")
    for tid in ok_first:  # stored once, at attempt 1, never again
        assert (folder / f"{tid}.parquet").read_bytes() == stored[tid]
        assert set(df[df.trial_id == tid].attempt) == {1}
    failed_first = df[~df.trial_id.isin(ok_first)]
    assert set(failed_first.status) == {"ok"} and failed_first.attempt.min() >= 2


@pytest.mark.slow  # the default suite stays under 10 min; CI runs -m slow too
def test_worker_retries_and_tune_restarts_count_against_one_budget(env):
    """max_failures=2 is 3 attempts in all, whoever retries: NaN (the worker retries), the
    worker dies (Tune restarts the pack), NaN again: final at attempt 3, not 3 more attempts
    of the restarted worker's own (issue 35)."""
    import json

    study = _faulty_pack_study("packbudget", "nan_exit_nan", env)
    start_ray(None)
    s = run_study(study, env / "results", progress="none")
    with_nan = sorted(t.trial_id for t in study.trials if 1 in t.config.seeds)
    assert s.failed == with_nan and s.ok == 2 and s.exit_code == 1
    df = read_trials(env / "results", "packbudget")
    log = [json.loads(ln) for ln in (env / "results" / "packbudget" / "failures.jsonl")
           .read_text().splitlines()]
    for tid in with_nan:
        rows = df[df.trial_id == tid]
        assert set(rows.attempt) == {3} and set(rows[rows.seed == 1].status) == {"nan"}
        assert sorted(e["attempt"] for e in log if e["trial_id"] == tid) == [1, 2, 3]
