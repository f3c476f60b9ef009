"""A researcher's mistakes and accidents, through the command line (`ablate.run.main`, the
`python -m ablate.run` entry) and on a real local Ray: each one gets one line and the
right exit code, and nothing in the store is lost."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "token")  # before `import ray` (DESIGN.md)

import ray  # noqa: E402
import torch  # noqa: E402

from ablate.run import main  # noqa: E402
from ablate.runner.execute.driver import run_study  # noqa: E402
from ablate.runner.execute.ray_env import clean_tune_leftovers, start_ray  # noqa: E402
from ablate.runner.execute.store import PLAN, Store, StoreError, read_trials  # noqa: E402
from ablate.runner.study.compose import StudySpec  # noqa: E402
from ablate.runner.study.expand import Study, expand  # noqa: E402
from ablate.runner.study.kinds import TRIAL_KINDS  # noqa: E402

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
TINY = {"n_train": 40, "n_val": 40, "n_test": 40, "n_max_large": 40}


@pytest.fixture(autouse=True)
def _env(ray_env):
    return ray_env


def _one_line_error(capsys, argv, *words) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    for w in words:
        assert w in err, (w, err)
    return err


@pytest.mark.parametrize("dry", [True, False])
def test_uncreatable_results_dir(capsys, dry):
    _one_line_error(capsys, ["study=smoke", "results_dir=/proc/forbidden/x",
                             f"dry_run={str(dry).lower()}"], "results_dir=/proc/forbidden/x")


@pytest.mark.parametrize("arg, words", [
    ("lr=-0.1", ["lr must be > 0"]), ("weight_decay=-1", ["weight_decay must be >= 0"]),
    ("epochs=0", ["epochs must be >= 1"]), ("batch_size=0", ["batch_size must be >= 1"]),
    ("kl_weight=-1", ["kl_weight must be >= 0"]), ("init_scale=0", ["init_scale must be > 0"]),
    ("dropout=1.0", ["dropout must be in [0, 1)"]), ("eval_every=-2", ["eval_every"]),
    ("lr=nan", ["lr must be > 0"]), ("hidden=-3", ["hidden must be >= 0"]),
    ("lr_decay_epochs=[0]", ["lr_decay_epochs"]), ("lr_timing=late", ["lr_timing", "published", "early"]),
])
def test_numeric_ranges_are_checked_up_front(capsys, tmp_path, arg, words):
    _one_line_error(capsys, ["study=smoke", arg, f"results_dir={tmp_path}"], *words)
    assert not (tmp_path / "smoke" / PLAN).exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_device_cuda_without_cuda_is_an_error(capsys, tmp_path):
    for dry in ("true", "false"):
        _one_line_error(capsys, ["study=smoke", "device=cuda", f"dry_run={dry}",
                                 f"results_dir={tmp_path}"], "device=cuda")
    assert not ray.is_initialized()


def test_offline_digits_need_no_path(capsys, tmp_path):
    assert main(["study=mnist", "dataset=digits_sp", "dry_run=true",
                 f"results_dir={tmp_path}"]) == 0
    assert "90 trials" in capsys.readouterr().out


@pytest.mark.parametrize("estimate", ["records", "off"])
def test_a_dry_run_before_any_data_names_the_download_to_come(capsys, tmp_path, monkeypatch,
                                                              estimate):
    """Offline (the tests' URL is a closed loopback port), `study=mnist` / `study=tu` dry runs
    show the trials and name the download still to come, exit 0; nothing is fetched."""
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    assert main(["study=mnist", "dry_run=true", f"estimate={estimate}",
                 f"results_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "90 trials (0 done, 90 to run)" in out
    (note,) = [line for line in out.splitlines() if line.startswith("note: MNIST")]
    assert "4 file(s) (11.6 MB) will be downloaded from http://127.0.0.1:9/" in note
    assert "not reachable from here now" in note and "by hand" in note and "data.path" in note
    assert main(["study=tu", "dry_run=true", f"estimate={estimate}",
                 f"results_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "80 trials (0 done, 80 to run)" in out
    for label in ("PROTEINS", "DD", "COLLAB"):
        assert f"note: {label}: 1 file(s) (size not known) will be downloaded from" in out
    assert not (tmp_path / "cache").exists() and not ray.is_initialized()
    # the run itself still needs the files: one line naming the URL, exit 2, before Ray
    _one_line_error(capsys, ["study=mnist", "progress=none", f"results_dir={tmp_path}"],
                    "cannot download http://127.0.0.1:9/", "by hand", "data.path")
    assert not ray.is_initialized()


def test_an_unknown_estimate_says_how_to_get_one(capsys, tmp_path):
    assert main(["study=supervision", "dry_run=true", f"results_dir={tmp_path}"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("estimate:")]
    assert "100% none" in line and "add estimate=calibrate" in line
    assert "each of the 10 trial shape(s) without one here for 2 epochs" in line


@pytest.mark.parametrize("argv, hint", [
    (["study=supervison"], "did you mean 'supervision'?"),
    (["study=smoke", "backbon=gin"], "did you mean 'backbone'?"),
    (["study=smoke", "backbone=gni"], "did you mean 'gin'?"),
    (["study=smoke", "supervision=unsupervised"], "did you mean 'unsup'?"),
    (["study=smoke", "data.n_trian=3"], "did you mean 'data.n_train'?"),
    (["study=smoke", "progress=bars"], "did you mean 'bar'?"),
    (["study=threshold_search", "epoch=3"], "did you mean 'epochs'?"),
])
def test_a_misspelt_study_key_or_value_gets_a_did_you_mean(capsys, tmp_path, argv, hint):
    err = _one_line_error(capsys, [*argv, "dry_run=true", f"results_dir={tmp_path}"], hint)
    assert err.endswith(hint)


def test_reading_a_study_not_run_yet_names_the_studies_there(tmp_path):
    with pytest.raises(StoreError) as e:
        read_trials(tmp_path / "results", "supervision")
    assert "does not exist" in str(e.value) and "no study has results there yet" in str(e.value)
    store = Store(tmp_path / "results", "smoke")
    store.trials_dir.mkdir(parents=True)
    with pytest.raises(StoreError) as e:
        read_trials(tmp_path / "results", "smoke")
    assert "no trial of it has finished" in str(e.value)
    store_v0 = TESTS / "fixtures" / "store_v0"  # read only: studies sdc and smoke
    for name, words in (("supervision", ["studies with results there: sdc, smoke"]),
                        ("smok", ["did you mean 'smoke'?"])):
        with pytest.raises(StoreError) as e:
            read_trials(store_v0, name)
        assert "\n" not in str(e.value) and f"study={name}" in str(e.value)
        assert all(w in str(e.value) for w in words), str(e.value)


def test_import_ablate_is_light_and_reexports_the_reader():
    code = ("import sys, ablate; heavy = [m for m in ('torch', 'ray', 'pandas') if m in "
            "sys.modules]; assert not heavy, heavy; from ablate import read_trials; "
            "from ablate.runner.execute import store; assert read_trials is store.read_trials; "
            "assert 'torch' not in sys.modules and 'ray' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=120)


def test_too_many_cpus_refused_before_ray_and_plan_kept(capsys, tmp_path):
    store = Store(tmp_path, "smoke")
    store.write_plan(["aaaaaaaaaaaa"])
    before = (store.dir / PLAN).read_bytes()
    t0 = time.time()
    err = _one_line_error(capsys, ["study=smoke", "cpus_per_trial=100",
                                   f"results_dir={tmp_path}"], "cpus_per_trial=100")
    assert f"this machine has {os.cpu_count()} CPUs" in err  # checked before Ray, not after
    assert time.time() - t0 < 30 and not ray.is_initialized()
    assert (store.dir / PLAN).read_bytes() == before  # a refused run leaves the plan alone


def test_verify_lists_every_problem(capsys, tmp_path):
    store = Store(tmp_path, "smoke")
    store.trials_dir.mkdir(parents=True)
    (store.trials_dir / "aaaaaaaaaaaa.parquet").write_bytes(b"torn")
    (store.trials_dir / "mine.parquet").write_bytes(b"")
    assert main(["study=smoke", "verify=true", f"results_dir={tmp_path}"]) == 2
    out = capsys.readouterr().out.splitlines()
    assert any("aaaaaaaaaaaa.parquet" in x and "rerun that trial" in x for x in out)
    assert any("mine.parquet" in x and "move it out" in x for x in out)
    assert "2 problem(s)" in out[-1]
    _one_line_error(capsys, ["study=smoke", f"results_dir={tmp_path}"], "2 problem file(s)",
                    "verify=true")


def _study(name, kind="graph", fixed=None, seeds=(0,), **settings) -> Study:
    spec = StudySpec(name=name, kind=kind, fixed={"dataset": "colors", "backbone": "gin",
                                                  "epochs": 1, **(fixed or {})},
                     data=dict(TINY), grid={"threshold": [0.01, 0.05]}, seeds=list(seeds),
                     gpus_per_trial=0, **settings)
    return Study(spec, expand(spec))


@pytest.mark.slow
def test_a_deterministic_error_is_not_retried_and_is_explained(tmp_path, monkeypatch):
    monkeypatch.setitem(TRIAL_KINDS, "cfgerr", "_ray_kinds:CONFIG_ERROR")
    study = _study("cfgerr", kind="cfgerr", max_failures=3,
                   fixed={"+marker_dir": str(tmp_path / "m")})
    start_ray(None)
    s = run_study(study, tmp_path / "results", progress="none")
    assert s.exit_code == 1 and len(s.failed) == 2 and s.retries == 0
    assert len(list((tmp_path / "m").glob("attempt-*"))) == 2  # one attempt per trial
    lines = s.failure_lines()
    assert lines[0] == "every failed trial (2) failed the same way:"
    assert "ValueError: injected: kl_weight cannot be used" in lines[1]
    assert lines[-1].endswith("failures.jsonl")


@pytest.mark.slow  # the default suite stays under 10 min; CI runs -m slow too
def test_a_full_disk_stops_the_study_with_exit_3_and_a_rerun_resumes(tmp_path, monkeypatch):
    study = _study("disk", seeds=(0, 1, 2), max_failures=0)  # 6 trials
    real = Store.write
    calls = []

    def full_after_two(self, *a, **kw):
        calls.append(1)
        if len(calls) > 2:
            raise OSError(28, "No space left on device")
        return real(self, *a, **kw)

    monkeypatch.setattr(Store, "write", full_after_two)
    start_ray(None)
    s = run_study(study, tmp_path / "results", progress="none")
    assert s.exit_code == 3 and "No space left on device" in s.line() and "\n" not in s.line()
    stored = set(read_trials(tmp_path / "results", "disk").trial_id)
    assert len(stored) == 2 and not s.failed and len(s.remaining) == 4
    monkeypatch.setattr(Store, "write", real)
    again = run_study(study, tmp_path / "results", progress="none")
    assert again.exit_code == 0 and again.skipped == 2 and again.ok == 4


def _chattr(path: Path, flag: str) -> bool:
    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0


@pytest.mark.slow
def test_read_only_complete_archive_is_rechecked_not_locked(tmp_path):
    study = _study("archive")
    start_ray(None)
    assert run_study(study, tmp_path, progress="none").exit_code == 0
    ray.shutdown()
    folders = [tmp_path / "archive" / "trials", tmp_path / "archive"]
    if not all(_chattr(f, "+i") for f in folders):
        for f in folders:
            _chattr(f, "-i")
        pytest.skip("cannot make a folder read-only here (chattr)")
    try:
        s = run_study(study, tmp_path, progress="none")  # nothing to do: exit 0, no lock
        assert s.exit_code == 0 and s.skipped == 2 and "(complete)" in s.line()
        with pytest.raises(StoreError, match="read-only and 2 of 2 trials"):
            run_study(study, tmp_path, force=True, progress="none")
    finally:
        for f in folders:
            _chattr(f, "-i")


def test_tune_leftovers_of_dead_drivers_are_removed():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = Path(tempfile.mkdtemp(prefix=f"ablate-tune-x-pid{dead.pid}-"))
    alive = Path(tempfile.mkdtemp(prefix=f"ablate-tune-x-pid{os.getppid()}-"))
    try:
        assert clean_tune_leftovers() >= 1
        assert not gone.exists() and alive.exists()
    finally:
        shutil.rmtree(alive, ignore_errors=True)
        shutil.rmtree(gone, ignore_errors=True)


def test_cached_load_keeps_the_canonical_split_order():
    from ablate.data import load_graphsets

    fresh = list(load_graphsets("colors", **TINY))
    cached = list(load_graphsets("colors", **TINY))
    assert fresh == cached == ["train", "val", "test_orig", "test_large", "test_largec"]


def test_no_colour_reset_code_after_the_last_line_on_a_terminal():
    import pty

    code = ("from ablate.runner.execute.ray_env import start_ray; start_ray(None); import ray; "
            "ray.shutdown(); print('last line')")
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(master)
    text = b"".join(chunks).decode(errors="replace")
    assert "last line" in text and "\x1b[0m" not in text, repr(text[-200:])
