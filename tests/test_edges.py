"""The edges of the user path (issue 20): a rerun on a still-full disk, every bad file named
by the report, SIGTERM during start-up, what an embedded Ray leaves behind, `verify=true`'s
exit codes, where the report lands, and one retry count."""

from __future__ import annotations

import io
import os
import pickle
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

os.environ.setdefault("RAY_AUTH_MODE", "token")  # before `import ray` (DESIGN.md)

import ray  # noqa: E402

from ablate.run import main as run_main  # noqa: E402
from ablate.runner.execute import driver, signals  # noqa: E402
from ablate.runner.execute.driver import run_study  # noqa: E402
from ablate.runner.execute.progress import Progress, Summary  # noqa: E402
from ablate.runner.execute.reap import (  # noqa: E402
    SESSION_MARK,
    clean_ray_leftovers,
    ray_temp_dir,
    session_processes,
)
from ablate.runner.execute.signals import Terminated  # noqa: E402
from ablate.runner.execute.store import PLAN, Store  # noqa: E402
from ablate.runner.study.compose import StudySpec  # noqa: E402
from ablate.runner.study.expand import Study, build_study, expand  # noqa: E402
from analysis.report import default_out  # noqa: E402
from analysis.report import main as report_main  # noqa: E402
from analysis.synthetic import trial_record, write_trials  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TINY = {"n_train": 40, "n_val": 40, "n_test": 40, "n_max_large": 40}
RESUME = "interrupted: rerun the same command to resume"


@pytest.fixture(autouse=True)
def _env(ray_env):
    return ray_env


def _study(name, seeds=(0,), **settings) -> Study:
    spec = StudySpec(name=name, kind="graph", fixed={"dataset": "colors", "backbone": "gin",
                                                     "epochs": 1},
                     data=dict(TINY), grid={"threshold": [0.01, 0.05]}, seeds=list(seeds),
                     gpus_per_trial=0, **settings)
    return Study(spec, expand(spec))


def _cli(args, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ablate.run", *args], cwd=ROOT,
                            env={**os.environ}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def _sessions_of(pid: int) -> list[Path]:
    out = []
    for s in ray_temp_dir().glob("session_*"):
        try:
            if (s / SESSION_MARK).read_text() == str(pid):
                out.append(s)
        except OSError:
            pass
    return out


# ---------------------------------------------------------------- a still-full disk
def _no_file_can_grow():  # a full disk, as the process sees it: any write of a byte fails
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))


def test_rerun_on_a_still_full_disk_is_the_summary_line_and_exit_3_before_ray(tmp_path):
    proc = _cli(["study=smoke", f"results_dir={tmp_path / 'res'}", "progress=none"],
                preexec_fn=_no_file_can_grow)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, (out, err)
    lines = out.strip().splitlines()
    assert len(lines) == 1 and "results could not be written" in lines[0], out
    assert "rerun the same command to resume" in lines[0] and "16 not run" in lines[0]
    assert "Traceback" not in err, err
    assert not _sessions_of(proc.pid)  # refused before Ray started
    assert not (tmp_path / "res" / "smoke" / PLAN).exists()


def test_a_plan_write_that_fails_after_ray_started_is_exit_3_not_a_traceback(tmp_path,
                                                                             monkeypatch):
    def full(self, ids):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Store, "write_plan", full)
    s = run_study(_study("plandisk"), tmp_path, progress="none")
    assert s.exit_code == 3 and "No space left on device" in s.line()
    assert len(s.remaining) == 2 and s.ok == 0 and "\n" not in s.line()
    assert not ray.is_initialized()  # the embedded Ray was stopped


# ---------------------------------------------------------------- one retry count
def test_a_result_that_could_not_be_written_is_not_counted_as_a_retry(tmp_path, monkeypatch):
    from ablate.runner.execute.tune_callback import StoreCallback

    study = _study("count")
    ids = [t.trial_id for t in study.trials]

    def full(self, *a, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Store, "write", full)
    stream = io.StringIO()
    display = Progress("count", len(ids), 0, "lines", stream, every_s=0)
    cb = StoreCallback(Store(tmp_path, "count"), {t.trial_id: t for t in study.trials}, {},
                       display, {"pack": ids})

    class Trial:
        config = {"trial": {"trial_id": "pack"}}
        error_file = None

    members = [{"trial_id": tid, "status": "ok", "error": "", "records": [{"seed": 0}],
                "curves": []} for tid in ids]
    cb.on_trial_start(0, [], Trial())
    cb.on_trial_result(0, [], Trial(), {"payload": pickle.dumps(
        {"members": members, "meta": {}, "final": True})})
    cb.on_trial_recover(0, [], Trial())  # a lost worker whose rows cannot be written either
    display.close()
    assert cb.storage_error and cb.retries == 0 and not display.running
    assert "retried" not in stream.getvalue(), stream.getvalue()
    s = Summary("count", len(ids), retries=cb.retries, storage_error=cb.storage_error,
                remaining=ids)
    assert "0 retries" in s.line() and s.exit_code == 3


# ---------------------------------------------------------------- SIGTERM during start-up
def _wait_until_caught(pid: int, sig: int, timeout: float = 60.0) -> None:
    """Until process `pid` catches `sig` (its SigCgt mask in /proc): a signal sent before the
    interpreter reached ablate.run's first line meets the default action, whatever the product
    does, and a fixed sleep races with the interpreter's own start on a loaded machine."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/status") as f:
                mask = next(int(x.split()[1], 16) for x in f if x.startswith("SigCgt:"))
        except (OSError, StopIteration):
            mask = 0
        if mask >> (sig - 1) & 1:
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} never caught signal {sig}")


def test_sigterm_while_python_starts_prints_the_resume_line_and_exits_143(tmp_path):
    proc = _cli(["study=smoke", f"results_dir={tmp_path}", "progress=none"])
    _wait_until_caught(proc.pid, signal.SIGTERM)  # ablate.run's first line ran: its imports run
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, (out, err)
    assert RESUME in out and "Traceback" not in err, (out, err)


def test_sigterm_during_start_up_resumes_and_stops_the_embedded_ray(tmp_path, monkeypatch):
    real = driver.prepare_datasets
    calls = []

    def terminated_on_the_second_call(trials, **kw):  # Ray is starting by then
        calls.append(1)
        if len(calls) == 2:
            raise Terminated()
        return real(trials, **kw)

    monkeypatch.setattr(driver, "prepare_datasets", terminated_on_the_second_call)
    s = run_study(_study("early"), tmp_path, progress="none")
    assert s.exit_code == 143 and RESUME in s.line() and len(s.remaining) == 2
    assert not ray.is_initialized()
    assert not _sessions_of(os.getpid())  # its session folder removed, nothing left of it


def test_the_cli_catches_sigterm_like_ctrl_c(tmp_path, monkeypatch, capsys):
    def terminated(*a, **kw):
        raise Terminated()

    monkeypatch.setattr(driver, "run_study", terminated)
    assert run_main(["study=smoke", f"results_dir={tmp_path}"]) == 143
    assert RESUME in capsys.readouterr().out
    assert signal.getsignal(signal.SIGTERM) is not None  # pytest's handler is back


# ---------------------------------------------------------------- what Ray leaves
@pytest.mark.slow  # two embedded Rays; CI runs -m slow too
def test_a_killed_drivers_ray_is_stopped_and_its_session_removed_by_the_next_run(tmp_path):
    proc = _cli(["study=smoke", f"results_dir={tmp_path}", "progress=none", "epochs=50"])
    deadline = time.time() + 120
    while not _sessions_of(proc.pid):
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.1)
    session = _sessions_of(proc.pid)[0]
    time.sleep(1.0)  # the raylet starts its agents
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert session.is_dir()  # SIGKILL cannot be handled: what it leaves, until the next run
    assert clean_ray_leftovers() >= 1
    assert not session.exists()
    deadline = time.time() + 10
    while session_processes(session) and time.time() < deadline:
        time.sleep(0.1)
    assert not session_processes(session)


def test_leftover_cleaning_leaves_unmarked_and_live_sessions_alone(tmp_path):
    root = tmp_path / "ray"
    unmarked, live = root / "session_1_1", root / "session_2_2"
    for d in (unmarked, live):
        (d / "logs").mkdir(parents=True)
    (live / SESSION_MARK).write_text(str(os.getppid()))
    assert clean_ray_leftovers(root) == 0 and unmarked.is_dir() and live.is_dir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (root / "session_3_3" / "logs").mkdir(parents=True)
    (root / "session_3_3" / SESSION_MARK).write_text(str(dead.pid))
    assert clean_ray_leftovers(root) == 1 and not (root / "session_3_3").exists()


# ---------------------------------------------------------------- verify and dry runs
def _smoke_ids(tmp_path) -> list[str]:
    study, _ = build_study("smoke", ["study=smoke", f"results_dir={tmp_path}"])
    return [t.trial_id for t in study.trials]


def test_verify_exit_codes_tell_complete_from_incomplete_from_corrupt(tmp_path, capsys):
    args = ["study=smoke", "verify=true", f"results_dir={tmp_path / 'res'}"]
    assert run_main(args) == 4  # nothing run: incomplete
    assert "0 of 16 planned trials complete" in capsys.readouterr().out
    assert not (tmp_path / "res").exists()  # verify creates nothing
    assert run_main(["study=smoke", "dry_run=true", f"results_dir={tmp_path / 'res'}"]) == 0
    assert not (tmp_path / "res").exists()  # neither does a dry run
    store = Store(tmp_path / "res", "smoke")
    ids = _smoke_ids(tmp_path / "res")
    rows = [{"seed": 0, "split": "test", "status": "ok", "accuracy": 1.0}]
    for tid in ids[:-1]:
        store.write(tid, rows)
    store.write(ids[-1], [{**rows[0], "status": "error", "error": "boom"}])
    assert run_main(args) == 4  # one failed: incomplete
    assert "15 of 16 planned trials complete, 1 failed, 0 not run" in capsys.readouterr().out
    store.write(ids[-1], rows)
    assert run_main(args) == 0
    assert "(complete)" in capsys.readouterr().out
    (store.trials_dir / "stray.parquet").write_bytes(b"x")
    assert run_main(args) == 2
    out = capsys.readouterr().out
    assert "stray.parquet" in out and "move it out" in out and "(corrupt)" in out


# ---------------------------------------------------------------- the report
def test_the_report_names_every_bad_file_with_the_verify_advice(tmp_path, capsys):
    root = tmp_path / "results"
    write_trials(root, "a", [trial_record(trial_id="a" * 12, seed=0)])
    write_trials(root, "b", [trial_record(trial_id="b" * 12, seed=0)])
    torn = root / "a" / "trials" / ("c" * 12 + ".parquet")
    torn.write_bytes(b"torn")
    foreign = root / "b" / "trials" / "notes.parquet"
    pd.DataFrame({"x": [1]}).to_parquet(foreign)
    (root / "b" / "curves").mkdir()
    bad_curves = root / "b" / "curves" / ("b" * 12 + ".parquet")
    bad_curves.write_bytes(b"")
    out = tmp_path / "out"
    assert report_main([str(root), "--out", str(out), "--no-figures"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: 3 bad files"), err
    lines = err.strip().splitlines()[1:]
    assert len(lines) == 3
    by = {next(p for p in (torn, foreign, bad_curves) if str(p) in ln): ln for ln in lines}
    assert "delete it to rerun that trial" in by[torn]
    assert "move it out of" in by[foreign] and "rerun" not in by[foreign]
    assert "delete it and" in by[bad_curves] and "trials" in by[bad_curves]
    assert not (out / "report.md").exists()


def test_the_report_lands_beside_the_results_and_git_ignores_it(tmp_path, monkeypatch,
                                                                capsys):
    root = tmp_path / "results"
    write_trials(root, "s", [trial_record(trial_id="a" * 12, seed=0)])
    assert default_out(root) == (tmp_path / "report").resolve()
    assert default_out(root / "s") == (tmp_path / "report").resolve()  # one study's folder
    monkeypatch.chdir(tmp_path)
    assert report_main(["results/", "--no-figures"]) == 0
    assert "wrote report/report.html" in capsys.readouterr().out
    assert (tmp_path / "report" / "report.html").is_file()
    for path in ("report/report.html", "report/.cache/x.parquet", "results/smoke/plan.json"):
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0


def test_sigterm_inside_an_import_leaves_with_the_resume_line_not_a_half_imported_library(
        tmp_path):
    """SIGTERM that lands while a module is being imported (after `main` installed the
    raising handler) exits 143 with the resume line: raising there would leave the library
    half-imported and fail later with a traceback."""
    code = ("import sys\n"
            "from ablate.runner.execute.signals import raise_on_sigterm\n"
            "raise_on_sigterm()\n"
            "sys.path.insert(0, sys.argv[1])\n"
            "import slow_module  # sends itself SIGTERM halfway through its top level\n"
            "print('imported')\n")
    tmp_path.joinpath("slow_module.py").write_text(
        "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\nHALF = 1\n")
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 143, (p.stdout, p.stderr)
    assert RESUME in p.stdout and "imported" not in p.stdout and "Traceback" not in p.stderr


def test_session_clean_up_stops_rays_processes_never_a_users_viewer_of_its_logs(tmp_path):
    """A leftover session's clean-up stops processes that are Ray's (by command line) and have a
    file open under the session, never a user's `tail -f` on a log there (issue 35)."""
    from ablate.runner.execute.reap import _ray_package_dir, is_ray_process

    session = tmp_path / "ray" / "session_2026-01-01_00-00-00_000000_1"
    (session / "logs").mkdir(parents=True)
    log = session / "logs" / "raylet.out"
    log.write_text("x\n")
    viewer = subprocess.Popen(["tail", "-f", str(log)], stdout=subprocess.DEVNULL)
    worker = subprocess.Popen(["bash", "-c", f"exec -a ray::IDLE sleep 60 3<{log}"])
    try:
        deadline = time.time() + 10
        while worker.pid not in session_processes(session) and time.time() < deadline:
            time.sleep(0.05)
        found = session_processes(session)
        assert worker.pid in found and viewer.pid not in found
    finally:
        for p in (viewer, worker):
            p.kill()
            p.wait()
    ray_dir = _ray_package_dir()
    assert ray_dir and is_ray_process([f"{ray_dir}core/src/ray/raylet/raylet", "--x"], ray_dir)
    assert is_ray_process(["/usr/bin/python", "-u", f"{ray_dir}_private/log_monitor.py"], ray_dir)
    assert not is_ray_process(["less", f"{session}/logs/gcs_server.out"], ray_dir)


def test_a_sigterm_a_library_swallows_during_start_up_still_stops_the_run(tmp_path, monkeypatch,
                                                                         capsys):
    """SIGTERM raises `Terminated` (a KeyboardInterrupt); a library that catches it around its
    own work must not let the run go on: the next stage boundary raises it again."""
    real = driver.prepare_datasets
    started = []

    def swallowing(trials, **kw):
        if started:
            return real(trials, **kw)
        started.append("data")
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler runs here
        except KeyboardInterrupt:
            pass  # what `except BaseException: ...` in some library does
        return real(trials, **kw)

    monkeypatch.setattr(driver, "prepare_datasets", swallowing)
    monkeypatch.setattr(driver, "_run_tune", lambda *a, **kw: started.append("tune"))
    monkeypatch.setattr(driver, "RayStarter", lambda *a: started.append("ray"))
    assert run_main(["study=smoke", f"results_dir={tmp_path}", "progress=none"]) == 143
    assert RESUME in capsys.readouterr().out and started == ["data"]
    assert not ray.is_initialized()
    signals.raise_if_terminated()  # the run is over: the next run of this process starts clean
