"""Progress inside long trials: the live line names each running trial's epoch and pace, and
the ETA uses them (issue 36 item 4)."""

from __future__ import annotations

import io
import time

import pytest

from ablate.runner.execute.progress import Progress
from ablate.runner.execute.worker import EpochReporter
from ablate.trial import epochs


def test_the_line_shows_a_running_trials_epoch_and_pace_and_the_eta_uses_them():
    p = Progress("mnist", todo=4, mode="lines", stream=io.StringIO(), epoch_every_s=0.0)
    p.trials(4, 0)
    p.start("a")
    p.start("b")
    p.epoch(["a"], "chebygin_ref sup s0", 12, 30, 41.0)
    text = p.text()
    assert "2 running: chebygin_ref sup s0 epoch 12/30 (41 s/epoch)" in text
    # a's 18 epochs left at 41 s, then the 2 trials not started, 2 at a time, 30 x 41 s each
    assert text.endswith("ETA 32:48")
    p.epoch(["b"], "gin sup s1", 3, 30, 10.0)
    assert "epoch 12/30 (41 s/epoch); gin sup s1 epoch 3/30 (10 s/epoch)" in p.text()
    p.finish("a", "ok")
    assert "chebygin_ref" not in p.text() and "gin sup s1 epoch 3/30" in p.text()
    p.retry("b")
    assert "epoch" not in p.text()


def test_a_log_prints_the_epochs_of_a_long_trial_between_count_changes():
    out = io.StringIO()
    p = Progress("mnist", todo=1, mode="lines", stream=out, epoch_every_s=0.0, heartbeat_s=1e9)
    p.trials(1, 0)
    p.start("a")
    for e in (1, 2, 3):
        p.epoch(["a"], "chebygin_ref sup s0", e, 30, 40.0)
    lines = out.getvalue().splitlines()
    assert [line.split("running: ")[1].split(", ")[0] for line in lines if "epoch" in line] == [
        "chebygin_ref sup s0 epoch 1/30 (40 s/epoch)", "chebygin_ref sup s0 epoch 2/30 (40 s/epoch)",
        "chebygin_ref sup s0 epoch 3/30 (40 s/epoch)"]
    quiet = io.StringIO()
    q = Progress("mnist", todo=1, mode="lines", stream=quiet, epoch_every_s=1e9, heartbeat_s=1e9)
    q.trials(1, 0)
    q.start("a")
    q.epoch(["a"], "x", 1, 30, 40.0)
    q.epoch(["a"], "x", 2, 30, 40.0)
    assert sum("epoch" in line for line in quiet.getvalue().splitlines()) == 1  # then throttled


def test_the_worker_reports_epochs_at_most_every_so_often_and_restarts_the_pace_per_model(monkeypatch):
    import ablate.runner.execute.worker as worker

    now = [100.0]
    monkeypatch.setattr(worker.time, "monotonic", lambda: now[0])
    sent = []
    r = EpochReporter(sent.append, every_s=5.0)
    with epochs.listening(r):
        epochs.report_epoch(0, 10)  # model B: 10 epochs of 2 s
        for e in range(1, 11):
            now[0] += 2.0
            epochs.report_epoch(e, 10)
        now[0] += 7.0  # its evaluation, then model A: epochs of 1 s
        epochs.report_epoch(0, 3)
        for e in range(1, 4):
            now[0] += 1.0
            epochs.report_epoch(e, 3)
    epochs.report_epoch(1, 1)  # outside the block: nobody listens
    got = [(s["epoch_progress"]["epoch"], s["epoch_progress"]["epochs"],
            s["epoch_progress"]["s_per_epoch"]) for s in sent]
    assert got == [(3, 10, 2.0), (6, 10, 2.0), (9, 10, 2.0), (10, 10, 2.0), (1, 3, 1.0), (3, 3, 1.0)]


@pytest.mark.slow
def test_a_30_epoch_digits_trial_shows_its_epochs_live(tmp_path, capsys, monkeypatch):
    """Through the runner on an embedded Ray: every epoch report reaches the log line."""
    from ablate import run

    monkeypatch.setenv("ABLATE_PROGRESS_EPOCH_S", "0")
    study = tmp_path / "long.yaml"
    study.write_text("description: one 30-epoch digits trial\n"
                     "fixed: {dataset: digits_sp, backbone: chebygin_ref, supervision: sup, epochs: 30}\n"
                     "data: {n_train: 32, n_val: 16, n_test: 16}\n"
                     "seeds: [0]\n")
    code = run.main([f"study={study}", f"results_dir={tmp_path / 'r'}", "progress=lines"])
    err = capsys.readouterr().err
    assert code == 0, err
    seen = [int(line.split(" epoch ")[1].split("/")[0]) for line in err.splitlines()
            if "digits_sp chebygin_ref sup s0 epoch" in line and "/30 (" in line]
    assert len(seen) >= 10 and seen == sorted(seen) and seen[-1] == 30, err


def test_trials_change_only_under_the_lines_lock():
    """Issue 42 item 2: `text` (the ticker's redraw) reads `running` and `epochs` under the
    lock; start / finish / retry must change them under it too, or a redraw can see a pack
    vanish between two reads."""
    import threading

    p = Progress("mnist", todo=3, mode="lines", stream=io.StringIO())
    p.trials(3, 0)
    p.start("a")
    p.epoch(["a"], "gin sup s0", 1, 30, 2.0)
    for change, check in [(lambda: p.finish("a", "ok"), lambda: "a" in p.running and p.epochs),
                          (lambda: p.start("b"), lambda: "b" not in p.running),
                          (lambda: p.retry("b"), lambda: "b" in p.running)]:
        with p._lock:  # a redraw in progress
            t = threading.Thread(target=change)
            t.start()
            time.sleep(0.05)
            assert check(), "changed while a redraw held the lock"
        t.join()
    assert p.done == 1 and p.retries == 1 and not p.running and not p.epochs


def test_a_failing_redraw_does_not_end_the_live_line():
    out = io.StringIO()
    p = Progress("mnist", todo=2, mode="bar", stream=out, tick_s=0.01)
    p.trials(2, 0)
    calls = []
    real = p.text

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("max() arg is an empty sequence")
        return real()

    p.text = flaky
    with p.ticking():
        deadline = time.time() + 5
        while len(calls) < 3 and time.time() < deadline:
            time.sleep(0.01)
        assert len(calls) >= 3 and p._ticker.is_alive()
