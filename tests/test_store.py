"""Parquet result store: atomic writes, completion scan, foreign/corrupt files rejected untouched."""

from __future__ import annotations

import hashlib
import os
import time

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ablate.runner.execute.store import Store, StoreError, read_curves, read_trials, write_parquet


def _rows(status="ok", seeds=(0, 1), splits=("val", "test_orig")):
    return [{"seed": s, "split": sp, "status": status, "error": "" if status == "ok" else "boom",
             "dataset": "colors", "threshold": 0.03, "accuracy": 0.5, "attn_auc_l0": 0.9}
            for s in seeds for sp in splits]


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_write_read_roundtrip_and_layout(tmp_path):
    store = Store(tmp_path, "s1")
    curves = [{"seed": 0, "epoch": e, "train_loss": 1.0 / e} for e in (1, 2)]
    path = store.write("abc123abc123", _rows(), curves, {"attempt": 1, "ray_version": "x"})
    assert path == tmp_path / "s1" / "trials" / "abc123abc123.parquet"
    assert (tmp_path / "s1" / "curves" / "abc123abc123.parquet").exists()
    df = read_trials(tmp_path, "s1")
    assert len(df) == 4
    assert list(df.columns[:7]) == ["study", "trial_id", "seed", "split", "status", "error",
                                    "attempt"]
    assert set(df.study) == {"s1"} and set(df.trial_id) == {"abc123abc123"}
    cur = read_curves(tmp_path, "s1")
    assert list(cur.epoch) == [1, 2] and set(cur.attempt) == {1}
    assert store.scan() == {"abc123abc123": "ok"}
    assert not [p for p in (tmp_path / "s1").rglob("*.tmp")]


def test_completed_needs_every_row_ok_and_rewrite_replaces(tmp_path):
    store = Store(tmp_path, "s")
    rows = _rows()
    rows[-1]["status"] = "nan"
    store.write("t1", rows, extra={"attempt": 1})
    store.write("t2", _rows(), extra={"attempt": 1})
    assert store.scan() == {"t1": "nan", "t2": "ok"}
    assert store.completed() == {"t2"}
    store.write("t1", _rows(), extra={"attempt": 2})  # a successful retry replaces the rows
    assert store.completed() == {"t1", "t2"}
    df = read_trials(tmp_path)
    assert len(df) == 8 and set(df[df.trial_id == "t1"].attempt) == {2}


def test_bad_status_is_refused(tmp_path):
    with pytest.raises(ValueError, match="status"):
        Store(tmp_path, "s").write("t", _rows(status="weird"))


@pytest.mark.parametrize("kind", ["foreign", "corrupt", "empty", "wrong_id"])
def test_foreign_or_corrupt_files_are_rejected_and_left_alone(tmp_path, kind):
    store = Store(tmp_path, "s")
    store.write("good", _rows(), extra={"attempt": 1})
    bad = store.trials_dir / ("other.parquet" if kind != "wrong_id" else "zzz.parquet")
    if kind == "foreign":
        pq.write_table(pa.table({"a": [1, 2]}), bad)
    elif kind == "corrupt":
        data = (store.trials_dir / "good.parquet").read_bytes()
        bad.write_bytes(data[: len(data) // 2])
    elif kind == "empty":
        bad.write_bytes(b"")
    else:
        (store.trials_dir / "good.parquet").rename(bad)
    before = {p.name: _digest(p) for p in store.trials_dir.iterdir()}
    with pytest.raises(StoreError) as e:
        store.scan()
    msg = str(e.value)
    assert "\n" not in msg and bad.name in msg and "verify=true" in msg
    assert {p.name: _digest(p) for p in store.trials_dir.iterdir()} == before
    problems = store.verify()
    assert len(problems) == 1 and bad.name in problems[0]
    if kind in ("foreign", "empty"):  # not named like a trial: never called one
        assert "rerun that trial" not in problems[0]


def test_write_parquet_never_leaves_a_torn_file(tmp_path, monkeypatch):
    from result_store import writer

    path = tmp_path / "x.parquet"
    write_parquet(pa.table({"a": [1]}), path)
    original = writer.write

    def crash(table, where):
        original(table, where)
        raise KeyboardInterrupt  # as if killed mid-write

    monkeypatch.setattr(writer, "write", crash)
    with pytest.raises(KeyboardInterrupt):
        write_parquet(pa.table({"a": [2, 3]}), path)
    assert pq.read_table(path).column("a").to_pylist() == [1]
    assert os.listdir(tmp_path) == ["x.parquet"]


def test_clean_temp_and_lock(tmp_path):
    store = Store(tmp_path, "s")
    store.write("t", _rows())
    old = store.trials_dir / ".t.parquet.123.abcd.tmp"
    new = store.trials_dir / ".u.parquet.123.abcd.tmp"
    old.write_bytes(b"x")
    new.write_bytes(b"x")
    past = time.time() - 3600
    os.utime(old, (past, past))
    assert store.clean_temp(older_than_s=60) == 1
    assert not old.exists() and new.exists()
    assert store.clean_temp() == 1 and not new.exists()  # under the lock: every leftover
    assert store.completed() == {"t"}  # temp files are never read as results
    store.lock()
    other = Store(tmp_path, "s")
    with pytest.raises(StoreError, match="another run"):
        other.lock()
    store.unlock()
    other.lock()
    other.unlock()


def test_read_all_studies_unions_columns(tmp_path):
    Store(tmp_path, "a").write("t1", _rows())
    rows = _rows()
    for r in rows:
        r["ratio_kept_l1"] = 0.5
    Store(tmp_path, "b").write("t2", rows)
    df = read_trials(tmp_path)
    assert set(df.study) == {"a", "b"} and len(df) == 8
    assert df.ratio_kept_l1.isna().sum() == 4
    assert isinstance(df, pd.DataFrame)


def test_plan_lists_trials_the_report_finds_missing(tmp_path):
    from analysis.load import load_study

    store = Store(tmp_path, "s1")
    store.write("aaaaaaaaaaaa", _rows())
    store.write_plan(["aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    assert not [p for p in (tmp_path / "s1").rglob("*.tmp")]
    study = load_study("s1", tmp_path / "s1")
    assert study.planned == ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    assert set(study.planned) - set(study.trials.trial_id) == {"bbbbbbbbbbbb"}


def test_verify_lists_every_bad_trial_and_curves_file(tmp_path):
    store = Store(tmp_path, "s")
    for tid in ("aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"):
        store.write(tid, _rows(), curves=[{"seed": 0, "epoch": 1, "train_loss": 1.0}])
    (store.trials_dir / "aaaaaaaaaaaa.parquet").write_bytes(b"garbage")
    (store.trials_dir / "notes.parquet").write_bytes(b"")
    data = (store.curves_dir / "bbbbbbbbbbbb.parquet").read_bytes()
    (store.curves_dir / "bbbbbbbbbbbb.parquet").write_bytes(data[: len(data) // 2])
    problems = store.verify()
    assert len(problems) == 3
    text = "\n".join(problems)
    assert "aaaaaaaaaaaa.parquet" in text and "notes.parquet" in text
    assert "curves/bbbbbbbbbbbb.parquet" in text
    with pytest.raises(StoreError, match="3 problem file"):
        store.scan()


def test_a_failed_trial_write_leaves_no_curves(tmp_path, monkeypatch):
    import ablate.runner.execute.store as st

    store = Store(tmp_path, "s")
    real = st.write_parquet

    def full_disk(table, path):
        if path.parent.name == "trials":
            raise OSError(28, "No space left on device")
        return real(table, path)

    monkeypatch.setattr(st, "write_parquet", full_disk)
    with pytest.raises(OSError):
        store.write("aaaaaaaaaaaa", _rows(), curves=[{"seed": 0, "epoch": 1}])
    assert not list(store.curves_dir.glob("*.parquet"))


def test_read_only_store_gives_one_line(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root ignores file permissions")
    store = Store(tmp_path, "s")
    store.write("aaaaaaaaaaaa", _rows())
    os.chmod(store.dir, 0o555)
    try:
        assert not store.writable()
        with pytest.raises(StoreError, match="cannot write"):
            store.lock()
    finally:
        os.chmod(store.dir, 0o755)


def test_a_refused_first_run_checks_what_to_discard_under_the_lock(tmp_path, monkeypatch):
    """Two first runs of one study: run A, refused, discards the study folder only if nothing
    but bookkeeping is there once it holds the lock; a trial that run B wrote before A took
    the lock is never undone (checked before its lock, A removed the study file that B's
    trial ran with)."""
    study_file = tmp_path / "s.yaml"
    study_file.write_text("name: s\n")
    a, b = Store(tmp_path / "r", "s"), Store(tmp_path / "r", "s")
    made = a.new_folders()
    a.keep_study_file(study_file)  # run A's study file; B finds it there and writes none
    real_lock = Store.lock

    def b_writes_first(self):  # B takes the lock, writes a trial and ends just before A's lock
        if self is a and not list(b.trials_dir.glob("*.parquet")):
            real_lock(b)
            b.write("t", _rows())
            b.unlock()
        real_lock(self)

    monkeypatch.setattr(Store, "lock", b_writes_first)
    assert a.discard_new(made) is False
    assert list(a.dir.glob("study-*.yaml")) and b.completed() == {"t"}


def test_a_run_keeps_its_study_file_under_its_lock(tmp_path, monkeypatch, capsys):
    """Run B of a study finds the study file that run A (refused, a first run too) kept, and
    writes none; A removes it before B takes the store's lock. B keeps it again under its
    lock, so its store is never left without the study file it ran."""
    from ablate.run import main

    root = tmp_path / "r"
    a = Store(root, "smoke")
    real_lock, seen = Store.lock, []

    def a_discards_first(self):  # A's refusal lands between B's first look and B's lock
        if self.dir == a.dir and not seen:
            seen.append("lock")
            assert list(a.dir.glob("study-*.yaml"))  # as B found it
            real_lock(a)  # A ran to its lock and was refused
            a.unlock()
            a.discard_new([a.dir, root])
            assert not a.dir.exists()
        real_lock(self)

    def full_disk(self, nbytes=0):  # the driver's next step after the lock: stop before Ray
        seen.append(sorted(p.name for p in self.dir.glob("study-*.yaml")))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Store, "lock", a_discards_first)
    monkeypatch.setattr(Store, "check_space", full_disk)
    assert main(["study=smoke", f"results_dir={root}"]) == 3  # the disk-full line, exit 3
    assert seen[0] == "lock" and len(seen[1]) == 1, seen  # kept again under B's lock
    assert "No space left" in capsys.readouterr().out


def test_a_failure_line_has_one_set_of_fields_for_every_caller(tmp_path):
    """failures.jsonl's fields are the store's, not each caller's (grid: `StoreCallback`,
    search: `tuning.store_writer`): a caller that does not know a node writes ''."""
    import json

    from ablate.runner.execute.store import FAILURES

    store = Store(tmp_path, "s")
    store.log_failure("t1", 1, "error", "RuntimeError: boom", "10.0.0.7", "2026-12-02T00:00:00")
    store.log_failure("t2", 2, "nan", "loss is NaN")
    one, two = (json.loads(x) for x in (store.dir / FAILURES).read_text().splitlines())
    assert set(one) == set(two) == {"time", "trial_id", "attempt", "status", "error", "node",
                                    "created_at"}
    assert (one["node"], one["created_at"], two["node"], two["created_at"]) == \
        ("10.0.0.7", "2026-12-02T00:00:00", "", "")
