"""Preparing real data before the trials (issue 25): a clean console, signals, a full disk,
a trial too large for the machine.

Through the command line (`ablate.run.main` in-process, or `python -m ablate.run` where a
signal must reach a process of its own); TU data from a tiny TU-format folder written
here (read from local files: prepared before Ray starts).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ablate.run import main
from ablate.runner.execute import driver
from ablate.runner.execute.signals import RESUME
from ablate.runner.plan import resources

ROOT = Path(__file__).resolve().parents[1]


def _env(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def _write_tu(folder: Path, name: str = "PROTEINS") -> Path:
    """12 rings of 3-30 nodes with node labels 1..3, graph labels alternating."""
    sizes = [3, 5, 8, 10, 20, 25, 26, 30, 4, 6, 12, 7]
    ind, edges, off = [], [], 0
    for g, n in enumerate(sizes):
        ind += [g + 1] * n
        edges += [(off + i + 1, off + (i + 1) % n + 1) for i in range(n)]
        off += n
    d = folder / name
    d.mkdir(parents=True)
    (d / f"{name}_A.txt").write_text("".join(f"{a}, {b}\n{b}, {a}\n" for a, b in edges))
    (d / f"{name}_graph_indicator.txt").write_text("".join(f"{i}\n" for i in ind))
    (d / f"{name}_graph_labels.txt").write_text("".join(f"{1 + g % 2}\n" for g in range(12)))
    (d / f"{name}_node_labels.txt").write_text("".join(f"{1 + k % 3}\n" for k in range(off)))
    return folder


def _tu_args(tmp_path: Path) -> list[str]:
    data = _write_tu(tmp_path / "tu")
    return ["study=tu", f"data.path={data}", "data.max_train_nodes=10", "data.n_train_val=4",
            "dataset=proteins", "seed=0", f"results_dir={tmp_path / 'results'}",
            "progress=none"]


def test_a_trial_this_machine_cannot_hold_is_refused_before_ray(tmp_path, monkeypatch,
                                                                 capsys):
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    args = _tu_args(tmp_path)
    assert main([*args, "dry_run=true"]) == 0  # not prepared yet: not known, no refusal
    assert "memory per trial: not known until" in capsys.readouterr().out
    monkeypatch.setattr(driver, "node_memory_estimate", lambda: 200 << 20)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: a trial needs ") and "\n" not in err, err
    assert "this machine gives trials 0.2 GB" in err and "more memory" in err
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
    assert not (tmp_path / "results" / "tu" / "trials").exists()
    monkeypatch.setattr(resources, "node_memory_estimate", lambda: 200 << 20)
    assert main([*args, "dry_run=true"]) == 2  # prepared now: the dry run refuses it too
    capsys.readouterr()
    monkeypatch.setattr(resources, "node_memory_estimate", lambda: 24 << 30)
    assert main([*args, "dry_run=true"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("memory per trial: ") and "trials at once here" in line, line


def test_a_data_folder_that_fills_during_preparation_is_exit_3_and_leaves_nothing(
        tmp_path, monkeypatch, capsys):
    cache = tmp_path / "cache"
    monkeypatch.setenv("ABLATE_CACHE", str(cache))

    def full(f, **arrays):  # the disk fills after the first bytes of the cache file
        f.write(b"PK\x03\x04 partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full)
    assert main(_tu_args(tmp_path)) == 3
    out = [x for x in capsys.readouterr().out.strip().splitlines()
           if not x.startswith("note: variants")]  # dataset=proteins makes tu's rows meet
    assert len(out) == 1 and "results could not be written (No space left on device" in out[0]
    assert "rerun the same command to resume" in out[0]
    assert not list(cache.rglob("*.npz")) and not list(cache.rglob(".*.tmp"))


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _descendants(pid: int) -> list[int]:
    """Children, grandchildren, ... of `pid` (a forkserver's workers are its grandchildren)."""
    out, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        out += kids
        todo += kids
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_sigterm_while_superpixels_are_made_is_143_with_the_resume_line(tmp_path):
    """The superpixel pool (two loky workers, as Ray starts in a thread meanwhile)
    runs when SIGTERM arrives: exit 143, the resume line, no traceback, and the pool's
    processes end with the driver."""
    cmd = [sys.executable, "-m", "ablate.run", "study=mnist", "dataset=digits_sp",
           f"results_dir={tmp_path / 'results'}", "progress=none"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(ABLATE_CACHE=str(tmp_path / "cache")),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, pool = time.time() + 120, []
    while time.time() < deadline and proc.poll() is None:
        try:
            pool = [p for p in _descendants(proc.pid)
                    if b"loky" in Path(f"/proc/{p}/cmdline").read_bytes()
                    or (b"python" in Path(f"/proc/{p}/cmdline").read_bytes()
                        and b"ray" not in Path(f"/proc/{p}/cmdline").read_bytes())]
        except OSError:  # a process ended while it was read
            continue
        if len(pool) >= 3:  # loky's resource tracker and two workers
            break
        time.sleep(0.05)
    assert len(pool) >= 2, "the superpixel pool never started"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, (out, err)
    assert RESUME in out.strip().splitlines()[-1] and "Traceback" not in err, (out, err)
    time.sleep(0.5)
    assert not [p for p in pool if _alive(p)]


def test_the_superpixel_pool_never_forks_beside_another_thread():
    """The driver prepares data while Ray starts in a thread: the pool then starts its workers
    with loky (fresh interpreters: a fork could copy a lock that thread holds); alone, it forks
    (issue 35). The superpixels are the same either way."""
    import threading

    from ablate.data import pool, superpixels

    alone = subprocess.run([sys.executable, "-c", "from ablate.data import pool; "
                            "print(pool.start_method())"], capture_output=True, text=True,
                           cwd=ROOT, check=True).stdout.strip()
    assert alone == "fork"  # a fresh process: no other thread (this one may have some)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        assert pool.start_method() == "loky"
        rng = np.random.default_rng(0)
        images = rng.random((6, 28, 28)) * (rng.random((6, 28, 28)) > 0.6)
        pooled = superpixels.images_to_superpixels(images, workers=2, chunksize=2)
    finally:
        stop.set()
        other.join()
    serial = superpixels.images_to_superpixels(images, workers=1)
    for (a, b), (c, d) in zip(pooled, serial, strict=True):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)


_CHOSEN = """import sys, threading, time
import numpy as np
from tqdm.auto import tqdm
from ablate.data import pool, superpixels
chosen = []
pick = pool.start_method
pool.start_method = lambda: chosen.append(pick()) or chosen[-1]
if sys.argv[1] == "thread":
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
rng = np.random.default_rng(0)
images = rng.random((4, 28, 28)) * (rng.random((4, 28, 28)) > 0.6)
out = superpixels.images_to_superpixels(images, progress=sys.argv[2] == "bar", workers=2, chunksize=2)
same = all((a == c).all() and (b == d).all() for (a, b), (c, d)
           in zip(out, superpixels.images_to_superpixels(images, workers=1), strict=True))
print(*chosen, same, tqdm.monitor_interval)
"""


@pytest.mark.parametrize("threads, bar, method", [("alone", "quiet", "fork"), ("alone", "bar", "fork"),
                                                  ("thread", "quiet", "loky")])
def test_images_to_superpixels_forks_where_the_driver_runs_no_other_thread(tmp_path, threads, bar,
                                                                           method):
    """Item 8: the progress bar (shown or not) starts no tqdm monitor thread, so a single-threaded
    driver's pool forks (no fresh interpreter importing torch); beside another thread it is loky.
    The user's own tqdm keeps its monitor setting."""
    script = tmp_path / "chosen.py"
    script.write_text(_CHOSEN)
    run = subprocess.run([sys.executable, str(script), threads, bar], capture_output=True,
                         text=True, cwd=tmp_path, timeout=180, env=_env())
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == [method, "True", "10"]


_NO_GUARD = """import threading, time
import numpy as np
import pytest
from ablate.data import pool, superpixels
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # e.g. tqdm's monitor
rng = np.random.default_rng(0)
images = rng.random((12, 28, 28)) * (rng.random((12, 28, 28)) > 0.6)
out = superpixels.images_to_superpixels(images, workers=2, chunksize=3)
print(pool.start_method(), len(out))
"""


@pytest.mark.parametrize("how", ["script", pytest.param("stdin", marks=pytest.mark.slow),
                                 pytest.param("dash_c", marks=pytest.mark.slow)])
def test_superpixels_from_user_code_without_a_main_guard(tmp_path, how):
    """Issue 42: a user's script without a main guard, code piped to `python -`, and a
    notebook-style `python -c`, each with another thread alive, finish (loky never re-imports
    the caller's `__main__`; the forkserver pool did and respawned its dying workers forever)."""
    script = tmp_path / "prepare.py"
    script.write_text(_NO_GUARD)
    argv = {"script": [str(script)], "stdin": ["-"], "dash_c": ["-c", _NO_GUARD]}[how]
    run = subprocess.run([sys.executable, *argv], input=_NO_GUARD if how == "stdin" else None,
                         capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env=_env())
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["loky", "12"]
    assert "bootstrapping phase" not in run.stderr and "Traceback" not in run.stderr


_DYING = """import os, sys, threading, time
import numpy as np
import pytest
from ablate.data import pool
if sys.argv[1] == "loky":
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
def die(chunk):
    os._exit(3)
chunks = [(np.zeros((2, 28, 28)), "v0.15")] * 4
try:
    list(pool.map_chunks(die, chunks, 2))
except pool.SuperpixelPoolError as e:
    print("ERROR", e)
"""


@pytest.mark.parametrize("method", ["fork", "loky"])
def test_a_dying_superpixel_worker_is_one_clear_error(tmp_path, method):
    """A worker killed mid-task (out of memory, say) ends the preparation with one line,
    under either start method, instead of a pool that replaces it and waits forever."""
    script = tmp_path / "dying.py"
    script.write_text(_DYING)
    run = subprocess.run([sys.executable, str(script), method], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120, env=_env())
    lines = run.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR a superpixel worker"), run
    assert f"({method})" in lines[0]


@pytest.mark.slow
def test_in_a_ray_worker_the_pool_never_forks(ray_env):
    """A Ray worker runs many threads of its own: the pool starts loky workers there (never a
    fork beside those threads) and gives the serial superpixels."""
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)

    @ray.remote
    def prepare(images):
        from ablate.data import pool, superpixels

        return pool.start_method(), superpixels.images_to_superpixels(images, workers=2, chunksize=2)

    rng = np.random.default_rng(1)
    images = rng.random((6, 28, 28)) * (rng.random((6, 28, 28)) > 0.6)
    method, pooled = ray.get(prepare.remote(images), timeout=180)
    assert method == "loky"
    from ablate.data import superpixels

    for (a, b), (c, d) in zip(pooled, superpixels.images_to_superpixels(images, workers=1), strict=True):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
