"""What differs most on a GPU: run-to-run determinism, classification and every attention
variant under the captured step, dense leave-one-out, a split kept on the host, two processes
on one GPU, and a process left clean after a failed capture. The CUDA tests skip without a
GPU (`benchmarks/gpu_check.py` runs them there in one call); the set-up they rely on is
proven on the CPU here too."""

import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from _packs import TIMING, TINY, tmp_cache  # noqa: F401 (tmp_cache: autouse fixture)

from ablate.config import TrialConfig
from ablate.data import load_graphsets
from ablate.trial import batches, pack_step, setup
from ablate.trial.graph import run_trial_full

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
ROOT = Path(__file__).resolve().parents[1]
DIGITS = (("n_test", 32), ("n_train", 64), ("n_val", 32))


def tiny(**kw) -> TrialConfig:
    base = dict(dataset="colors", data_params=TINY, epochs=4, seeds=(0, 1), eval_every=2,
                device="cuda")
    return TrialConfig(**{**base, **kw})


def _bytes(res) -> str:
    """Records (timing and host columns dropped) and curves as exact text: NaN, lists and
    every float digit included."""
    recs = [{k: v for k, v in r.items() if k not in TIMING | {"peak_gpu_mb"}} for r in res.records]
    key = lambda r: (r["seed"], r.get("split", ""), r.get("epoch", 0))  # noqa: E731
    return json.dumps([sorted(recs, key=key), sorted(res.curves, key=key)], sort_keys=True,
                      default=str)


def _agree(gpu, cpu, graphs: int = 2) -> None:
    """Same science on both devices: statuses equal, accuracy within `graphs` graphs, losses
    and AUCs within 1e-2 (float noise moves a node across a threshold now and then)."""
    key = lambda r: (r["seed"], r["split"])  # noqa: E731
    for a, b in zip(sorted(gpu.records, key=key), sorted(cpu.records, key=key), strict=True):
        assert a["status"] == b["status"] == "ok", (a["split"], a["error"], b["error"])
        n = max(1, int(b["n_graphs"]))
        assert abs(a["accuracy"] - b["accuracy"]) <= graphs / n + 1e-9, (a["split"], a, b)
        for k, v in b.items():
            if (k.startswith(("loss", "attn_auc")) and isinstance(v, float)
                    and not math.isnan(v)):
                assert abs(a[k] - v) <= 1e-2 * max(1.0, abs(v)), (a["split"], k, a[k], v)


# ------------------------------------------------------------------ the set-up, on the CPU


def test_a_cuda_device_turns_on_deterministic_algorithms(monkeypatch):
    """Whenever a trial picks CUDA, deterministic algorithms are on (the leave-one-out
    `index_add_` takes its sorted variant) with the cuBLAS workspace they need, and
    uninitialised memory is not filled (no extra kernel per allocation)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = torch.are_deterministic_algorithms_enabled()
    try:
        assert setup.pick_device("auto") == torch.device("cuda")
        assert torch.are_deterministic_algorithms_enabled()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == setup.CUBLAS_WORKSPACE
        assert torch.utils.deterministic.fill_uninitialized_memory is False
        monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")  # the user's choice is kept
        setup.pick_device("cuda")
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    finally:
        torch.use_deterministic_algorithms(before)
        torch.utils.deterministic.fill_uninitialized_memory = True


def test_the_cpu_leaves_the_global_flags_alone():
    before = torch.are_deterministic_algorithms_enabled()
    assert setup.pick_device("cpu") == torch.device("cpu")
    assert torch.are_deterministic_algorithms_enabled() == before


# ------------------------------------------------------------------------------- CUDA


@needs_cuda
@pytest.mark.parametrize("kw", [dict(supervision="weak"), dict(pool_layers=()),
                                dict(supervision="sup")])
def test_cuda_trial_is_bit_identical_run_to_run(kw):
    """Two runs of one trial on one GPU give the same bytes: weak supervision (model A trains
    on leave-one-out targets summed with `index_add_`), a global pool's leave-one-out AUC,
    and the captured supervised step."""
    cfg = tiny(**kw)
    first = run_trial_full(cfg)
    assert torch.are_deterministic_algorithms_enabled()
    assert _bytes(run_trial_full(cfg)) == _bytes(first)


@needs_cuda
@pytest.mark.parametrize("kw", [
    dict(dataset="digits_sp", data_params=DIGITS, epochs=2, supervision="sup"),
    dict(dataset="digits_sp", data_params=DIGITS, epochs=2, pool_layers=()),
    dict(supervision="sup", normalizer="sparsemax"),
    dict(supervision="sup", normalizer="spherical"),
    dict(supervision="sup", scorer="fc_hidden"),
    dict(supervision="unsup", normalizer="sparsemax", selection="topk", ratio=0.5),
])
def test_cuda_captured_step_agrees_with_cpu(kw):
    """Classification (cross-entropy and dropout 0.5 in a captured, vmapped step: the
    MNIST-75SP recipe on the digits stand-in), sparse normalisers and the hidden-layer
    scorer: the replayed CUDA step and CPU training give the same science."""
    cfg = tiny(**kw)
    gpu = run_trial_full(cfg.replace(step="replay"))
    assert all(r["device"].startswith("cuda") for r in gpu.records)
    _agree(gpu, run_trial_full(cfg.replace(device="cpu", step="eager")))


@needs_cuda
def test_cuda_dense_leave_one_out_agrees_with_cpu():
    """A global-pool ChebyNet with K = 3 takes the dense leave-one-out path (not the local
    one): its attention AUC on the GPU is the CPU's."""
    cfg = tiny(backbone="chebynet", K=3, pool_layers=(), epochs=2)
    gpu = run_trial_full(cfg)
    cpu = run_trial_full(cfg.replace(device="cpu"))
    assert any(not math.isnan(r.get("attn_auc_l0", math.nan)) for r in cpu.records)
    _agree(gpu, cpu)


@needs_cuda
def test_cuda_split_kept_on_the_host_trains_as_on_the_device(monkeypatch):
    """A training split too large for a quarter of the free GPU memory stays on the host and
    is collated batch by batch: the same numbers as the split kept on the device."""
    cfg = tiny(supervision="sup")
    on_device = run_trial_full(cfg)
    monkeypatch.setattr(batches, "precollate_limit", lambda device: 0)
    _agree(run_trial_full(cfg), on_device, graphs=0)


_CHILD = """
import json, sys
sys.path.insert(0, {tests!r})
from test_cuda import _bytes, tiny
from ablate.trial.graph import run_trial_full
print("RESULT" + _bytes(run_trial_full(tiny(supervision="weak", epochs=3))))
"""


@needs_cuda
def test_cuda_two_processes_share_one_gpu(tmp_path):
    """Two trial processes on one GPU at once (as Ray's fractional GPUs place them) both
    finish, and give the same bytes."""
    cfg = tiny(supervision="weak", epochs=3)
    load_graphsets(cfg.dataset, **dict(cfg.data_params))  # cached once, before both start
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    code = _CHILD.format(tests=str(ROOT / "tests"))
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    a, b = (next(line for line in out.splitlines() if line.startswith("RESULT"))
            for out, _ in outs)
    assert a == b


@needs_cuda
def test_cuda_failed_capture_leaves_the_process_clean(monkeypatch):
    """A capture that fails (a host sync inside the captured region) leaves the default
    stream current, no capture under way and the allocator able to free its cache; the
    next trial in the same process captures and replays as usual."""
    cfg = tiny(supervision="sup", epochs=3)
    body = pack_step.PackStep._body

    def syncing(self, idx):
        if torch.cuda.is_current_stream_capturing():
            float(self.total.sum())  # not allowed while capturing
        body(self, idx)

    with monkeypatch.context() as m:
        m.setattr(pack_step.PackStep, "_body", syncing)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            failed = run_trial_full(cfg.replace(step="replay"))
    assert any("capture of the" in str(w.message) for w in rec)
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    assert not torch.cuda.is_current_stream_capturing()
    torch.cuda.synchronize()
    with pytest.raises(torch.cuda.OutOfMemoryError):  # the out-of-memory path still answers
        torch.empty(1 << 42, device="cuda")  # 16 TiB
    big = torch.empty(1 << 28, device="cuda")  # 1 GiB: the allocator still allocates
    del big
    torch.cuda.empty_cache()
    graphs = []
    ps_init = pack_step.PackStep.__init__

    def spy(self, *a, **kw):
        ps_init(self, *a, **kw)
        graphs.append(self)

    monkeypatch.setattr(pack_step.PackStep, "__init__", spy)
    again = run_trial_full(cfg.replace(step="replay"))
    assert graphs and all(not ps._uncaptured for ps in graphs)
    _agree(again, failed)


@needs_cuda
def test_cuda_real_out_of_memory_in_evaluation_is_retried_without_retraining(monkeypatch):
    """A real out-of-memory error in evaluation (a 16 TiB request at the first attempt) is
    retried in smaller chunks; training runs once and the records are those of a run that
    never ran out."""
    from ablate.trial import packed

    cfg = tiny(supervision="sup", epochs=2)
    ref = run_trial_full(cfg)
    forward, fits, fit = packed._eval_forward, [], packed.fit_members

    def greedy(stack, alive, batches, cfg, shrink=1):
        if shrink == 1:
            torch.empty(1 << 42, device="cuda")
        return forward(stack, alive, batches, cfg, shrink)

    def counted(*a, **kw):
        fits.append(1)
        return fit(*a, **kw)

    monkeypatch.setattr(packed, "_eval_forward", greedy)
    monkeypatch.setattr(packed, "fit_members", counted)
    got = run_trial_full(cfg)
    assert len(fits) == 1
    _agree(got, ref, graphs=0)


@needs_cuda
def test_cuda_records_name_the_gpu_and_its_peak_memory():
    recs = run_trial_full(tiny(supervision="sup", epochs=1)).records
    for r in recs:
        assert r["gpu_name"] == torch.cuda.get_device_name()
        assert r["cuda_version"] == torch.version.cuda and r["gpu_driver"]
        assert 0 < r["peak_gpu_mb"] < torch.cuda.get_device_properties(0).total_memory / 2**20


@needs_cuda
def test_cuda_sparsemax_support_holds_with_tf32_on():
    """TF32 products (allow_tf32) must not move sparsemax's support on CUDA: its running sum
    runs in float64 (`normalizers.triangular_running_sum`); the CPU's float64 cumsum is the
    reference (issue 35)."""
    from ablate.models.normalizers import sparsemax

    g = torch.Generator().manual_seed(0)
    z = torch.randn(64, 500, generator=g) * 0.05  # close scores: a large support, many ties near tau
    mask = torch.rand(64, 500, generator=g) > 0.2
    want = sparsemax(z.double(), mask).float()
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        got = sparsemax(z.cuda(), mask.cuda()).cpu()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    assert torch.equal(got > 0, want > 0)
    assert torch.allclose(got, want, atol=1e-6)
