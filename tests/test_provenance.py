"""What ran where: the CPU's vector unit, GPU name, CUDA and driver versions and peak GPU memory
in every trial's records, declared in the store's schema (files written before them still read), and shown by
the report's status section."""

import os
import stat

import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from _packs import TINY, tmp_cache  # noqa: F401 (tmp_cache: autouse fixture)

from ablate.config import TrialConfig
from ablate.trial import provenance
from ablate.trial.graph import run_trial_full
from analysis.overview import overview
from analysis.synthetic import trial_record, write_trials
from result_store import reader, schema, writer


def test_a_cpu_trial_records_no_gpu():
    res = run_trial_full(TrialConfig(dataset="colors", data_params=TINY, epochs=1, seeds=(0,),
                                     device="cpu"))
    for r in res.records:
        assert (r["gpu_name"], r["cuda_version"], r["gpu_driver"]) == ("", "", "")
        assert r["peak_gpu_mb"] is None
        assert r["cpu_capability"] == torch.backends.cpu.get_cpu_capability() != ""


def test_old_files_without_the_vector_unit_still_read(tmp_path):
    """Files written before `cpu_capability` (schema v4) read beside new ones (v5) with it
    null; a v5 file without it is foreign."""
    folder = tmp_path / "s" / "trials"
    old = schema.table([{**trial_record(trial_id="old"), "study": "s"}], "graph")
    old = old.drop_columns(["cpu_capability"])  # as the code before the column wrote it: v4
    old = old.replace_schema_metadata({**old.schema.metadata, schema.META_VERSION: b"4"})
    folder.mkdir(parents=True)
    writer.write(old, folder / "old.parquet")
    write_trials(tmp_path, "s", [trial_record(trial_id="new", cpu_capability="AVX512")])
    scan = reader.read(reader.result_files(folder))
    assert not scan.problems and sorted(scan.versions.values()) == [4, 5]
    df = scan.table.to_pandas().set_index("trial_id")
    assert df.loc["new", "cpu_capability"] == "AVX512" and pd.isna(df.loc["old", "cpu_capability"])
    lying = old.replace_schema_metadata({**old.schema.metadata, schema.META_VERSION: b"5"})
    writer.write(lying, folder / "lying.parquet")
    scan = reader.read(reader.result_files(folder))
    assert [p.name for p in scan.bad] == ["lying.parquet"]
    assert "declares schema v5 but its columns differ (no cpu_capability" in scan.problems[0]


def test_a_cuda_device_is_named_with_its_driver(monkeypatch, tmp_path):
    """The GPU's name from torch, CUDA from torch's build, the driver from nvidia-smi (a stand-in
    on PATH that answers as the real one does)."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 580.159.04\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    provenance._cuda_info.cache_clear()
    provenance.driver_version.cache_clear()
    try:
        got = provenance.device_provenance(torch.device("cuda", 0))
    finally:
        provenance._cuda_info.cache_clear()
        provenance.driver_version.cache_clear()
    assert got == {"gpu_name": "NVIDIA H100 80GB HBM3", "cuda_version": "13.0",
                   "gpu_driver": "580.159.04"}


def test_no_nvidia_smi_leaves_the_driver_blank(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    provenance.driver_version.cache_clear()
    try:
        assert provenance.driver_version(0) == ""
    finally:
        provenance.driver_version.cache_clear()


def test_old_files_without_the_gpu_columns_still_read(tmp_path):
    """Files written before the GPU columns (schema v1) read beside new ones (v2); their GPU
    columns are null. A v2 file without them is foreign."""
    folder = tmp_path / "s" / "trials"
    gpu = ["gpu_name", "cuda_version", "gpu_driver", "peak_gpu_mb"]
    old = schema.table([{**trial_record(trial_id="old"), "study": "s"}], "graph")
    old = old.drop_columns(gpu)  # the file as the code before these columns wrote it: v1
    old = old.replace_schema_metadata({**old.schema.metadata, schema.META_VERSION: b"1"})
    folder.mkdir(parents=True)
    writer.write(old, folder / "old.parquet")
    assert not set(gpu) & set(pq.read_schema(folder / "old.parquet").names)
    write_trials(tmp_path, "s", [trial_record(trial_id="new", gpu_name="NVIDIA H100 80GB HBM3",
                                              cuda_version="13.0", gpu_driver="580.159.04",
                                              peak_gpu_mb=2779.1, device="cuda")])
    df = reader.read(reader.result_files(folder)).table.to_pandas().set_index("trial_id")
    assert df.loc["new", "gpu_name"] == "NVIDIA H100 80GB HBM3"
    assert df.loc["new", "peak_gpu_mb"] == pytest.approx(2779.1)
    assert pd.isna(df.loc["old", "gpu_name"]) and pd.isna(df.loc["old", "peak_gpu_mb"])
    lying = old.replace_schema_metadata({**old.schema.metadata, schema.META_VERSION: b"2"})
    writer.write(lying, folder / "lying.parquet")
    scan = reader.read(reader.result_files(folder))
    assert [p.name for p in scan.bad] == ["lying.parquet"]
    assert "declares schema v2 but its columns differ (no gpu_name" in scan.problems[0]


def test_the_report_status_names_the_devices(tmp_path):
    from analysis.load import load_study

    write_trials(tmp_path, "s", [trial_record(
        trial_id="t1", seed=s, gpu_name="NVIDIA H100 80GB HBM3", cuda_version="13.0",
        gpu_driver="580.159.04", peak_gpu_mb=1500.0 + s, device="cuda") for s in (0, 1)])
    write_trials(tmp_path, "s", [trial_record(trial_id="t2", seed=2)])
    lines = overview(load_study("s", tmp_path / "s")).provenance
    assert ("devices: CPU (or not recorded): 1 run(s); NVIDIA H100 80GB HBM3 (CUDA 13.0, driver "
            "580.159.04): 2 run(s), peak GPU memory up to 1501 MB") in lines


def test_peak_rss_is_each_trials_own_in_a_reused_process():
    """A worker reused for many trials records each trial's own peak (issue 35): the peak is
    counted afresh at a trial's start, so a large trial before does not show in the next.
    (In a fresh process: one whose allocator still holds freed memory proves nothing.)"""
    import subprocess
    import sys

    code = """
import numpy as np
from ablate.trial.provenance import peak_rss_mb, reset_peak_rss
if not reset_peak_rss():
    print("skip"); raise SystemExit
big = np.ones(400 * 2**20 // 8)  # a 400 MB trial
first = peak_rss_mb()
del big
reset_peak_rss()
small = np.ones(8 * 2**20 // 8)
print(first, peak_rss_mb())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    if out == ["skip"]:
        pytest.skip("this kernel cannot reset the peak resident memory")
    first, second = map(float, out)
    assert first - second > 300  # the 400 MB are not in the second trial's peak


def test_a_modified_tree_is_named_in_every_record_and_in_the_report(tmp_path):
    """git_dirty: '' for a clean checkout, 'dirty:<hash of the diff>' after an edit; the report's
    overview names the runs trained from a modified tree (issue 36)."""
    import subprocess

    from ablate.trial.provenance import tree_state

    repo = tmp_path / "repo"
    repo.mkdir()
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True,  # noqa: E731
                                    capture_output=True)
    git("init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    record = repo / "benchmarks" / "results" / "r" / "records.jsonl"
    record.parent.mkdir(parents=True)
    record.write_text("{}\n")
    git("add", "a.py", str(record))
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    assert tree_state(str(repo)) == ""
    record.write_text("{}\n{}\n")  # a benchmark appending to its own record: the code is clean
    assert tree_state(str(record.parent)) == ""
    (repo / "a.py").write_text("x = 2\n")
    first = tree_state(str(repo))
    (repo / "a.py").write_text("x = 3\n")
    assert first.startswith("dirty:") and tree_state(str(repo)) not in ("", first)
    assert tree_state(str(tmp_path)) == ""  # not a checkout

    from analysis.report import write_report
    from analysis.synthetic import trial_record, write_trials

    write_trials(tmp_path / "res", "s", [trial_record(trial_id="t", seed=0, split="val", git_dirty=first),
                                         trial_record(trial_id="u", seed=0, split="val", git_dirty="")])
    write_report(tmp_path / "res", tmp_path / "out", figures=False)
    text = "".join(f.read_text() for f in (tmp_path / "out").rglob("*.md"))
    assert f"1 run(s) trained from a modified tree ({first})" in text


def test_a_trials_provenance_names_its_code_and_host_as_a_failed_trials_rows_do():
    """`provenance` (a trial's rows, from its worker) and a failed trial's rows (the driver's,
    `StoreCallback.error_rows`) take host, git_sha and git_dirty from one `code_provenance`."""
    import subprocess

    code = provenance.code_provenance()
    head = subprocess.run(["git", "-C", os.path.dirname(provenance.__file__), "rev-parse",
                           "HEAD"], capture_output=True, text=True).stdout.strip()
    assert code["host"] == os.uname().nodename
    assert head and head.startswith(code["git_sha"]) and len(code["git_sha"]) >= 7
    assert code.items() <= provenance.provenance("h").items()
