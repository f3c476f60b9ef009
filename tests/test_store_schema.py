"""The declared result-store schema (result_store/): typed files, nested columns, one reader,
stores written before the schema (tests/fixtures/store_v0, made by commit 38aa184's writer),
foreign and newer files, and the docs table generated from the declaration."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ablate.run import main as run_main
from ablate.runner.execute import driver
from ablate.runner.execute.store import Store, StoreError, read_curves, read_trials
from ablate.runner.study.expand import build_study
from ablate.runner.study.kinds import trial_kind
from analysis.load import load_store
from analysis.report import main as report_main
from result_store import legacy, reader, schema, schema_doc

ROOT = Path(__file__).resolve().parents[1]
V0 = ROOT / "tests" / "fixtures" / "store_v0"
# the studies the fixtures were made from (tests/fixtures/store_v0/make_fixtures.py)
GRAPH = ["study=smoke", "dataset=colors", "backbone=chebygin", "seed=0", "seeds_per_trial=1"]
SDC = ["study=sdc", "task=synthetic_linear", "average_at=input", "normalizer=softmax,sparsemax",
       "seed=0", "epochs=3", "data.n_train=40", "data.n_val=40", "data.n_test=40"]
GRAPH_OK, GRAPH_FAILED = {"83d27d271668", "2a192a008a0b"}, {"2e5b2156ff37"}


@pytest.fixture
def v0(tmp_path) -> Path:
    """A copy of the version-0 store (never touch the fixtures themselves)."""
    shutil.copytree(V0, tmp_path / "res", ignore=shutil.ignore_patterns("*.py"))
    return tmp_path / "res"


def _row(**kw) -> dict:
    return {"seed": 0, "split": "val", "status": "ok", "accuracy": 0.5, **kw}


def _full(**kw) -> dict:
    """A row with its identity, as the store adds it."""
    return _row(study="s", trial_id="aaaaaaaaaaaa", error="", attempt=1, **kw)


# ---------------------------------------------------------------- the declaration
def test_docs_tables_are_the_declared_schema():
    text = (ROOT / "docs" / "runner.md").read_text()
    for part in schema.PARTS:
        assert schema_doc.section(text, part) == schema_doc.markdown(part), (
            f"docs/runner.md's {part} table differs from result_store/schema.py: run "
            "python -m result_store.schema_doc docs/runner.md")


def test_a_written_file_has_every_column_of_its_kind_typed_and_versioned(tmp_path):
    store = Store(tmp_path, "s")
    bins = [{"lo": 1, "hi": 25, "accuracy": 0.5, "graphs": 40}]
    path = store.write("aaaaaaaaaaaa", [_row(acc_by_size=bins, attn_auc_l1=0.7),
                                        _row(status="nan", error="NaN loss", seed=1)],
                       curves=[{"seed": 0, "epoch": 1, "train_loss": 1.0}])
    got = pq.read_schema(path)
    own = dict(trial_kind("graph").store_columns)  # the graph kind's own `note` column
    assert got == schema.schema("graph", "trials", layers=2, extra=own)  # types, nulls, order
    assert got.metadata[schema.META_VERSION] == str(schema.VERSION).encode()
    assert got.metadata[schema.META_KIND] == b"graph"
    assert not {"task", "nnz"} & set(got.names)  # SDC-only columns are not graph columns
    t = pq.read_table(path)
    assert t["acc_by_size"].to_pylist() == [bins, None]
    assert t["gt_mass_curve"].null_count == 2 and t["ratio_kept_l1"].type == pa.float64()
    curves = pq.read_schema(store.curves_dir / path.name)
    assert curves == schema.schema("graph", "curves")


@pytest.mark.parametrize("bad, column", [
    ({"surprise": 1}, "surprise"),  # not declared
    ({"seed": "zero"}, "seed"),  # another type
    ({"seed": None}, "seed"),  # a required column left null
    ({"acc_by_size": "[[1, 2"}, "acc_by_size"),  # broken JSON of the old encoding
    ({"nnz": 0.3}, "nnz"),  # an SDC column in a graph file
])
def test_a_row_that_does_not_fit_fails_naming_the_column_and_writes_nothing(tmp_path, bad,
                                                                             column):
    store = Store(tmp_path, "s")
    store.write("aaaaaaaaaaaa", [_row()], extra={"attempt": 1})
    before = (store.trials_dir / "aaaaaaaaaaaa.parquet").read_bytes()
    with pytest.raises(schema.SchemaError, match=repr(column)):
        store.write("aaaaaaaaaaaa", [_row(**bad)], curves=[{"seed": 0, "epoch": 1}],
                    extra={"attempt": 2})
    assert (store.trials_dir / "aaaaaaaaaaaa.parquet").read_bytes() == before
    assert not store.curves_dir.exists()
    with pytest.raises(schema.SchemaError, match="'epoch'"):  # curves are checked first too
        store.write("bbbbbbbbbbbb", [_row()], curves=[{"seed": 0}])
    assert not (store.trials_dir / "bbbbbbbbbbbb.parquet").exists()


def test_the_old_encodings_are_taken_at_write_time():
    """Rows in the version-0 encodings (JSON text, as code written before the schema gave)
    are written as the nested types."""
    t = schema.table([_full(acc_by_size="[[1, 25, 0.5, 40]]", gt_mass_curve='{"0.1": 0.9}'),
                      _full(gt_mass_curve="{}")], "graph")
    assert t["acc_by_size"].to_pylist()[0] == [{"lo": 1, "hi": 25, "accuracy": 0.5,
                                                "graphs": 40}]
    assert t["gt_mass_curve"].to_pylist() == [[{"t": 0.1, "fraction": 0.9}], None]


def test_a_kind_may_declare_columns_of_its_own():
    t = schema.table([_full(visible_gpu="0")], "graph", extra={"visible_gpu": "string"})
    assert t.schema.field("visible_gpu").type == pa.string()
    with pytest.raises(schema.SchemaError, match="declared name"):
        schema.schema("graph", extra={"accuracy": "double"})


def test_rows_of_every_writer_fit_their_kind():
    """The graph kind's axes with the search studies' columns, the SDC kind's axes."""
    from ablate.runner.study.kinds import trial_kind

    for name, overrides, kind in (("smoke", GRAPH[1:], "graph"), ("sdc", SDC[1:], "sdc")):
        study, _ = build_study(name, overrides)
        t = study.trials[0]
        axes = trial_kind(t.kind).columns(t.config)
        search = {"search_arm": "a", "role": "search", "optuna_trial": 3, "pruned": False,
                  "epochs_run": 5, "objective": 0.5, "fold": 0} if kind == "graph" else {}
        schema.table([{**_full(), **axes, **search}], trial_kind(t.kind).store_kind)


def test_a_misfit_trial_is_stored_as_failed_naming_the_column(tmp_path):
    """In a study (the driver's Tune callback) the trial fails with the column named."""
    from ablate.runner.execute.tune_callback import StoreCallback

    study, _ = build_study("smoke", GRAPH[1:] + ["study=smoke"])
    t = study.trials[0]
    store = Store(tmp_path, "smoke")
    events = []
    display = SimpleNamespace(finish=lambda tid, s: events.append((tid, s)), retry=None,
                              unstored=None)
    cb = StoreCallback(store, {t.trial_id: t}, {}, display, {t.trial_id: [t.trial_id]})
    member = {"trial_id": t.trial_id, "status": "ok", "error": "", "final": True,
              "records": [_row(weird_metric=1.0)], "curves": []}
    out = {"members": [member], "meta": {}, "final": True}
    cb.on_trial_result(0, [], SimpleNamespace(config={"trial": {"trial_id": t.trial_id}}),
                       {"payload": pickle.dumps(out)})
    assert events == [(t.trial_id, "failed")] and "'weird_metric'" in cb.errors[t.trial_id]
    df = read_trials(tmp_path, "smoke")
    assert set(df.status) == {"error"} and df.error.str.contains("weird_metric").all()
    assert store.scan() == {t.trial_id: "error"}  # rerun by the next run


# ---------------------------------------------------------------- stores of version 0
def test_the_fixtures_are_version_0_files_of_both_kinds():
    for study, kind_column in (("smoke", "backbone"), ("sdc", "task")):
        for f in (V0 / study / "trials").glob("*.parquet"):
            s = pq.read_schema(f)
            assert schema.version_of(s) == 0 and kind_column in s.names
            assert f.stat().st_size < 48_000
    assert pq.read_schema(V0 / "smoke/trials/2a192a008a0b.parquet").field(
        "acc_by_size").type == pa.large_string()  # JSON text, as pandas typed it


def test_version_0_rows_fit_the_declared_schema():
    """Every column today's trainer wrote is declared for its kind (nothing left out)."""
    for study, kind in (("smoke", "graph"), ("sdc", "sdc")):
        for part in schema.PARTS:
            for f in (V0 / study / part).glob("*.parquet"):
                schema.table(pq.read_table(f).to_pylist(), kind, part)


def test_version_0_converted_in_memory_equals_its_json(v0):
    scan = reader.read(reader.result_files(v0 / "smoke" / "trials"), "trials")
    assert set(scan.versions.values()) == {0} and not scan.problems
    t = scan.table
    assert t.schema.field("acc_by_size").type == schema.ACC_BY_SIZE
    assert t.schema.field("gt_mass_curve").type == schema.MASS_CURVE
    for f in (v0 / "smoke" / "trials").glob("*.parquet"):
        raw = pq.read_table(f).to_pylist()
        mine = [r for r in t.to_pylist() if r["_file"] == str(f.resolve())]
        for old, new in zip(raw, mine):
            for name in schema.NESTED:
                text = old.get(name)
                assert new[name] == legacy.native_value(name, text)
                if text and json.loads(text):  # same numbers as the JSON text
                    flat = [x for p in new[name] for x in p.values()]
                    js = json.loads(text)
                    want = [x for b in js for x in b] if isinstance(js, list) else \
                        [x for kv in sorted(js.items(), key=lambda kv: float(kv[0]))
                         for x in (float(kv[0]), kv[1])]
                    assert flat == pytest.approx(want)


def test_conversion_takes_values_that_are_not_strict_json():
    col = pa.chunked_array([pa.array(['{"0.1": NaN, "0.5": 0.2}', None, "{}"])])
    got = legacy.upgrade(pa.table({"gt_mass_curve": col}))["gt_mass_curve"].to_pylist()
    assert got[1:] == [None, None] and got[0][1] == {"t": 0.5, "fraction": 0.2}
    assert got[0][0]["fraction"] != got[0][0]["fraction"]  # NaN


def test_version_0_store_read_by_the_runner_and_the_analysis(v0):
    check = Store(v0, "smoke").inspect()
    assert check.problems == []
    assert check.status == {**{t: "ok" for t in GRAPH_OK}, **{t: "error" for t in GRAPH_FAILED}}
    assert set(check.versions.values()) == {0} and set(check.curve_versions.values()) == {0}
    df = read_trials(v0, "smoke")
    assert list(df.columns[:7]) == ["study", "trial_id", "seed", "split", "status", "error",
                                    "attempt"]
    ok = df[df.status == "ok"]
    assert all(isinstance(b, list) and b and "accuracy" in b[0] for b in ok.acc_by_size)
    assert len(read_curves(v0, "sdc")) and len(read_trials(v0)) == len(df) + 2
    studies = {s.name: s for s in load_store(v0)}
    trials = studies["smoke"].trials
    assert isinstance(trials["acc_by_size"].dtype, pd.ArrowDtype)
    assert set(trials.trial_id) == GRAPH_OK | GRAPH_FAILED
    assert not studies["sdc"].curves.empty and "ftpt" in studies["sdc"].curves


@pytest.mark.parametrize("name, overrides, todo", [
    ("smoke", GRAPH, {"2e5b2156ff37", "bd81a67a4d29"}),  # the failed one and the one not run
    ("sdc", SDC, {"eef8918ea23c"}),
])
def test_completed_version_0_trials_are_not_rerun(v0, monkeypatch, name, overrides, todo):
    """Same trial ids as the store of before; the run is asked for only what is left."""
    asked = []
    monkeypatch.setattr(driver, "_start_and_run",
                        lambda study, t, *a, **k: asked.append({x.trial_id for x in t}))
    study, _ = build_study(name, overrides)
    summary = driver.run_study(study, v0)
    assert asked == [todo] and summary.skipped == len(study.trials) - len(todo)


def test_verify_reports_schema_versions_and_flags_foreign_files(v0, capsys):
    args = [*GRAPH, "verify=true", f"results_dir={v0}"]
    assert run_main(args) == 4  # intact, one trial failed and one not run
    out = capsys.readouterr().out
    assert "schema v0 (before the declared schema" in out
    assert "3 trial file(s), 2 curves file(s)" in out and "2a192a008a0b.parquet" in out
    Store(v0, "smoke").write("bd81a67a4d29", [_row()])  # a new file beside the old ones
    assert run_main(args) == 4
    out = capsys.readouterr().out
    assert f"schema v{schema.VERSION} (current): 1 trial file(s), 0 curves file(s)\n" in out
    assert "schema v0 (before the declared schema" in out
    trials = v0 / "smoke" / "trials"
    pq.write_table(pa.table({"a": [1]}), trials / "stray.parquet")  # no version, no identity
    good = pq.read_table(trials / "bd81a67a4d29.parquet")
    meta = {**good.schema.metadata, schema.META_VERSION: b"one"}
    pq.write_table(good.replace_schema_metadata(meta), trials / "ffffffffffff.parquet")
    assert run_main(args) == 2
    out = capsys.readouterr().out
    assert f"stray.parquet: not an ablate trial file: neither schema v{schema.VERSION}" in out
    assert "ffffffffffff.parquet: not an ablate trial file" in out and "(corrupt)" in out


def test_a_versioned_file_whose_columns_differ_from_its_declaration_is_foreign(tmp_path):
    store = Store(tmp_path, "s")
    path = store.write("aaaaaaaaaaaa", [_row()])
    t = pq.read_table(path)
    bad = t.set_column(t.schema.get_field_index("seed"), "seed", t["seed"].cast(pa.string()))
    pq.write_table(bad.replace_schema_metadata(t.schema.metadata), path)
    (problem,) = store.verify()
    assert (f"declares schema v{schema.VERSION} but its columns differ (seed: string, declared "
            "int64)") in problem


def test_a_file_of_a_newer_schema_is_one_line_and_exit_2(v0, capsys):
    path = Store(v0, "smoke").write("bd81a67a4d29", [_row(dataset="colors")])
    t = pq.read_table(path)
    pq.write_table(t.replace_schema_metadata({**t.schema.metadata, schema.META_VERSION: b"7"}),
                   path)
    for args in ([*GRAPH, f"results_dir={v0}"], [*GRAPH, "verify=true", f"results_dir={v0}"]):
        assert run_main(args) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and str(path) in err and "schema v7" in err
    assert report_main([str(v0), "--out", str(v0.parent / "report"), "--no-figures"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "bd81a67a4d29.parquet" in err and "schema v7" in err
    with pytest.raises(StoreError, match="schema v7"):
        read_trials(v0, "smoke")
