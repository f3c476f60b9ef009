"""The command line: --help, dry runs, exit code 2 on bad input, and the smoke study end to end."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ablate.run import main
from ablate.runner.execute.store import read_curves, read_trials

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))


def _ray_running() -> bool:
    return "ray" in sys.modules and sys.modules["ray"].is_initialized()


def test_help_lists_studies_and_keys_with_allowed_values(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for study in ("init", "placement", "backbone", "threshold", "supervision", "normalizer",
                  "paper", "mnist", "tu", "smoke"):
        assert f"\n  {study} " in out
    for line in ("backbone=          gcn|gin|chebynet|chebygin",
                 "normalizer=        softmax|sparsemax|spherical",
                 "supervision=       unsup|sup|weak|gt", "dry_run=", "results_dir=",
                 "gpus_per_trial=", "seeds_per_trial=", "colors     n_train=500"):
        assert line in out
    assert main(["study=smoke", "--help"]) == 0
    assert "study smoke:" in capsys.readouterr().out


def test_dry_run_prints_trial_table_and_count(capsys, tmp_path):
    assert main(["study=smoke", "dry_run=true", "backbone=gin,gcn,chebygin",
                 f"results_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    lines = out.strip().splitlines()
    header = lines[2].split()
    assert header[0] == "trial_id" and "backbone" in header and "dataset" in header
    assert header[-2:] == ["est", "from"]  # the cost estimate of each trial
    count = next(i for i, line in enumerate(lines) if line.startswith("24 trials"))
    assert lines[count].startswith("24 trials (0 done, 24 to run), 48 seed runs")
    assert count == 3 + 24  # two header lines, the column names, one line per trial
    assert lines[count + 1].startswith("estimate: unknown wall on ")
    assert not _ray_running()


@pytest.mark.parametrize("args, words", [
    (["study=nope"], ["unknown study 'nope'", "smoke"]),
    ([], ["no study given", "smoke"]),
    (["study=smoke", "bogus=1"], ["unknown key 'bogus'", "valid keys"]),
    (["study=smoke", "backbone=resnet"], ["valid choices: gcn, gin, chebynet, chebygin"]),
    (["study=smoke", "epochs=-1"], ["epochs"]),
    (["study=smoke", "seed=a,b"], ["seeds must be"]),
    (["study=smoke", "backbone=gin", "K=2"], ["K = 1"]),
    (["study=mnist", "data.url=not-a-url"], ["data.url 'not-a-url' is not a URL"]),
    (["study=smoke", "study=smoke", "dry_run=true", "data.n_colors=1"], ["n_colors"]),
    # split sizes and node counts a recipe cannot use: refused as they are read, dry runs too
    (["study=smoke", "dry_run=true", "data.n_train=-3"], ["data.n_train must be >= 1"]),
    (["study=smoke", "data.n_train=-3"], ["data.n_train must be >= 1"]),
    (["study=smoke", "dry_run=true", "data.n_val=0"], ["data.n_val must be >= 1"]),
    (["study=smoke", "dry_run=true", "data.n_train=1e3"], ["data.n_train must be an integer"]),
    (["study=smoke", "dry_run=true", "data.n_min=30"], ["data.n_min=30 is above data.n_max=25"]),
    (["study=tu", "dry_run=true", "data.val_fraction=1.5"], ["data.val_fraction must be in (0, 1)"]),
    (["study=threshold_search", "dry_run=true", "final_data.n_train=-3"], ["data.n_train"]),
])
def test_bad_input_exits_2_with_one_line(capsys, args, words):
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    for w in words:
        assert w in err
    assert not _ray_running()


@pytest.mark.parametrize("study", ["smoke", "threshold_search"])
def test_a_generators_own_refusal_is_one_line_and_exit_2(study, capsys, tmp_path, monkeypatch):
    """What only the generator checks (COLORS' n_colors >= 2) stops the run with one line when
    the data is prepared (was a traceback), grid and search studies alike."""
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    args = [f"study={study}", "data.n_colors=0", "data.n_train=20", "data.n_val=20",
            "data.n_test=20", f"results_dir={tmp_path / 'r'}"]
    assert main(args + (["arms=colors_chebygin_unsup", "n_trials=1"] if study != "smoke"
                        else ["dataset=colors"])) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: dataset colors: n_colors must be >= 2"), err
    assert not [line for line in err if "Traceback" in line]
    assert not _ray_running()


def test_missing_local_data_exits_2_before_ray(capsys, tmp_path):
    assert main(["study=mnist", f"data.path={tmp_path / 'nothing'}",
                 f"results_dir={tmp_path / 'r'}"]) == 2
    err = capsys.readouterr().err
    assert "MNIST directory" in err and "data.KEY=VALUE" in err
    assert not _ray_running()


def test_foreign_file_in_store_exits_2_and_is_not_modified(capsys, tmp_path):
    trials = tmp_path / "r" / "smoke" / "trials"
    trials.mkdir(parents=True)
    foreign = trials / "notes.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), foreign)
    digest = hashlib.sha256(foreign.read_bytes()).hexdigest()
    assert main(["study=smoke", f"results_dir={tmp_path / 'r'}"]) == 2
    err = capsys.readouterr().err
    assert "not an ablate trial file" in err and len(err.strip().splitlines()) == 1
    assert hashlib.sha256(foreign.read_bytes()).hexdigest() == digest
    assert not _ray_running()


def test_worker_cache_path_matches_the_dataset_cache():
    """Workers on other nodes write the driver's dataset file where load_graphsets looks."""
    from ablate.data import dataset_cache_path, load_graphsets

    params = {"n_train": 20, "n_val": 20, "n_test": 20, "n_max_large": 30}
    path = dataset_cache_path("colors", params)
    assert not path.exists()
    load_graphsets("colors", **params)
    assert path.exists()


@pytest.mark.slow  # the default suite stays under 10 min; CI runs -m slow too
def test_smoke_study_end_to_end_then_rerun_skips(tmp_path):
    """The README's quick demo (CI end-to-end test): a real embedded Ray, then a resumed no-op."""
    env = {**os.environ, "ABLATE_CACHE": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "ablate.run", "study=smoke", f"results_dir={tmp_path / 'r'}"]
    t0 = time.time()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    first_s = time.time() - t0
    assert done.returncode == 0, done.stdout + done.stderr
    assert "16 trials, 16 run, 0 skipped" in done.stdout and "(complete)" in done.stdout
    assert done.stdout.count("\n") == 1  # one summary line on stdout
    assert "[smoke] 16/16 finished: 16 ok, 0 failed" in done.stderr  # the progress display
    assert "WARNING" not in done.stderr and "Traceback" not in done.stderr

    df = read_trials(tmp_path / "r", "smoke")
    assert df.trial_id.nunique() == 16 and set(df.status) == {"ok"}
    assert not df.duplicated(["trial_id", "seed", "split"]).any()
    for col in ("study", "trial_id", "attempt", "created_at", "ray_version", "dataset_hash",
                "backbone", "pool_layers", "supervision", "threshold", "accuracy",
                "attn_auc_l0", "train_s", "peak_rss_mb", "device", "git_sha"):
        assert col in df.columns, col
    colors = df[df.dataset == "colors"]
    assert set(colors.split) == {"val", "test_orig", "test_large", "test_largec"}
    tri = df[(df.dataset == "triangles") & (df.pool_layers == "1,2")]
    assert tri.attn_auc_l1.notna().all() and tri.ratio_kept_l1.notna().all()
    curves = read_curves(tmp_path / "r", "smoke")
    assert set(curves.trial_id) == set(df.trial_id) and curves.epoch.max() == 3
    plan = json.loads((tmp_path / "r" / "smoke" / "plan.json").read_text())
    assert sorted(plan["trial_ids"]) == sorted(df.trial_id.unique())

    t0 = time.time()
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "16 skipped (already done)" in again.stdout
    assert time.time() - t0 < first_s  # nothing to run: Ray is not even started


def test_progress_display_modes():
    import io

    from ablate.runner.execute.progress import Progress

    class TTY(io.StringIO):
        def isatty(self):
            return True

    bar = TTY()
    p = Progress("s", todo=3, skipped=2, stream=bar)
    p.start("a")
    p.start("b")
    p.finish("a", "ok")
    p.retry("b")
    p.start("b")
    p.finish("b", "failed")
    p.close()
    out = bar.getvalue()
    assert "\r\033[K" in out and out.endswith("\n") and out.count("\n") == 1  # one live line
    assert "[s] 2/3 finished: 1 ok, 1 failed, 1 retried, 0 running, 2 skipped" in out
    assert "ETA" in out

    log = io.StringIO()
    q = Progress("s", todo=2, skipped=0, stream=log, every_s=0.0)
    q.start("a")
    q.finish("a", "ok")
    q.close()
    lines = log.getvalue().splitlines()
    assert lines[-1].startswith("[s] 1/2 finished: 1 ok, 0 failed, 0 running") and "\r" not in log.getvalue()
    silent = io.StringIO()
    r = Progress("s", todo=1, skipped=0, mode="none", stream=silent)
    r.start("a")
    r.close()
    assert silent.getvalue() == ""


def test_the_cli_finds_the_studies_from_any_working_directory(tmp_path):
    """`python -m ablate.run` run outside the checkout still finds studies/*.yaml."""
    env = {k: v for k, v in os.environ.items() if k != "ABLATE_STUDIES"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-m", "ablate.run", "study=smoke", "dry_run=true"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "16 trials" in done.stdout


def test_a_dry_run_names_a_dataset_folder_that_does_not_exist(tmp_path, capsys):
    code = main(["study=tu", f"data.path={tmp_path / 'missing'}", "dry_run=true",
                 f"results_dir={tmp_path / 'r'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "does not exist" in err[0] and "missing" in err[0]
