"""Device memory errors handled where they happen (errors injected on the CPU): evaluation and
leave-one-out retry in smaller chunks and never retrain; only training splits a pack; a CUDA
library's allocation failure counts as out of memory; what would fail again is not retried."""

import pytest
import torch
from _packs import TIMING, TINY, close, tmp_cache  # noqa: F401 (tmp_cache: autouse fixture)

from ablate.config import TrialConfig
from ablate.errors import DeviceMemoryExhausted
from ablate.runner.execute import worker
from ablate.trial import pack_step
from ablate.trial import packed as batched
from ablate.trial.graph import run_trial_full
from ablate.trial.memory import SHRINKS, is_out_of_memory
from ablate.trial.pack_loo import CHUNK_ENTRIES

CUBLAS = "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"


def tiny(**kw) -> TrialConfig:
    base = dict(dataset="colors", data_params=TINY, epochs=2, seeds=(0, 1, 2), eval_every=1,
                device="cpu")
    return TrialConfig(**{**base, **kw})


@pytest.fixture
def trainings(monkeypatch):
    """How many packed trainings ran (one per `fit_members`: model B and model A each count)."""
    calls = []
    fit = batched.fit_members

    def counted(stack, *a, **kw):
        calls.append(len(stack))
        return fit(stack, *a, **kw)

    monkeypatch.setattr(batched, "fit_members", counted)
    return calls


def _same(a, b) -> None:
    key = lambda r: (r["seed"], r["split"])  # noqa: E731
    for x, y in zip(sorted(a.records, key=key), sorted(b.records, key=key), strict=True):
        bad = {k: (x[k], y[k]) for k in y if k not in TIMING and not close(x[k], y[k], k)}
        assert not bad, bad
    assert len(a.curves) == len(b.curves)
    for x, y in zip(a.curves, b.curves):
        assert all(close(x[k], y[k], k) for k in y), (x, y)


@pytest.mark.parametrize("error, oom", [
    (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (RuntimeError(CUBLAS), True),
    (RuntimeError("CUSPARSE_STATUS_INSUFFICIENT_RESOURCES"), True),
    (RuntimeError("CUDA error: out of memory"), True),
    (RuntimeError("CUDA error: an illegal memory access was encountered"), False),
    (ValueError("out of memory"), False),
    (DeviceMemoryExhausted("evaluation ran out of device memory"), False),
])
def test_what_counts_as_out_of_memory(error, oom):
    assert is_out_of_memory(error) is oom


def test_evaluation_out_of_memory_retries_in_smaller_chunks_without_retraining(monkeypatch,
                                                                                trainings):
    cfg = tiny(supervision="sup")
    ref = run_trial_full(cfg)
    n_ref = len(trainings)
    shrinks = []
    forward = batched._eval_forward

    def tight(stack, alive, batches, cfg, shrink=1):
        shrinks.append(shrink)
        if shrink < 16:
            raise RuntimeError(CUBLAS)
        return forward(stack, alive, batches, cfg, shrink)

    monkeypatch.setattr(batched, "_eval_forward", tight)
    got = run_trial_full(cfg)
    assert len(trainings) == 2 * n_ref  # trained once, as the reference run
    assert set(shrinks) == {1, 4, 16}
    _same(got, ref)


def test_leave_one_out_out_of_memory_retries_in_smaller_chunks(monkeypatch, trainings):
    cfg = tiny(pool_layers=())
    ref = run_trial_full(cfg)
    n_ref = len(trainings)
    loo = batched.leave_one_out_members
    chunks = []

    def tight(stack, alive, b, target, chunk_entries=CHUNK_ENTRIES, member_entries=None):
        chunks.append(chunk_entries)
        if chunk_entries == CHUNK_ENTRIES:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        return loo(stack, alive, b, target, chunk_entries, member_entries)

    monkeypatch.setattr(batched, "leave_one_out_members", tight)
    got = run_trial_full(cfg)
    assert len(trainings) == 2 * n_ref
    assert CHUNK_ENTRIES // 4 in chunks
    _same(got, ref)


def test_weak_targets_out_of_memory_retries_without_retraining_model_b(monkeypatch, trainings):
    cfg = tiny(supervision="weak")
    ref = run_trial_full(cfg)
    assert trainings == [3, 3]  # model B of every member, then model A
    targets = batched.leave_one_out_attention_members
    seen = []

    def tight(*a):
        seen.append(a[-2])  # chunk_entries
        if a[-2] == CHUNK_ENTRIES:
            raise RuntimeError("CUDA error: out of memory")
        return targets(*a)

    monkeypatch.setattr(batched, "leave_one_out_attention_members", tight)
    got = run_trial_full(cfg)
    assert trainings == [3, 3, 3, 3] and seen == [CHUNK_ENTRIES, CHUNK_ENTRIES // 4]
    _same(got, ref)


def test_evaluation_that_never_fits_fails_once_and_is_not_retried(monkeypatch, trainings):
    def never(*a, **kw):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(batched, "_eval_forward", never)
    with pytest.raises(DeviceMemoryExhausted, match=f"evaluation .* 1/{SHRINKS[-1]}.*"
                                                    "gpus_per_trial=1") as info:
        run_trial_full(tiny(supervision="sup", epochs=1))
    assert trainings == [3]  # no split, no retraining
    assert not worker._retryable(info.value)
    assert worker._retryable(RuntimeError(CUBLAS))  # a plain fault may pass on a retry


def test_training_out_of_memory_from_a_cuda_library_splits_the_pack(monkeypatch, trainings):
    run = pack_step.PackStep.run

    def tight(self, idx):
        if len(self.stack) > 1:
            raise RuntimeError(CUBLAS)
        return run(self, idx)

    monkeypatch.setattr(pack_step.PackStep, "run", tight)
    res = run_trial_full(tiny(supervision="sup", epochs=1))
    assert trainings == [3, 1, 2, 1, 1]  # 3 -> 1 + 2 -> 2 -> 1 + 1
    assert {r["status"] for r in res.records} == {"ok"}


def test_one_member_that_does_not_fit_names_the_remedy(monkeypatch):
    def never(self, idx):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(pack_step.PackStep, "run", never)
    with pytest.raises(DeviceMemoryExhausted, match="training one member .*pack_size"):
        run_trial_full(tiny(supervision="sup", epochs=1, seeds=(0, 1)))


def test_a_retry_in_smaller_pieces_holds_nothing_of_the_failed_attempt():
    """The failed attempt's tensors are free before the next piece runs (issue 35: the
    exception it kept held them through its frames)."""
    import gc
    import weakref

    from ablate.trial.memory import in_smaller_pieces

    alive = []

    def step(shrink):
        big = torch.zeros(1000)  # the attempt's working memory
        if shrink == 1:
            alive.append(weakref.ref(big))
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (simulated)")
        gc.collect()
        return alive[0]() is None

    assert in_smaller_pieces(step, "evaluation", torch.device("cpu")) is True
